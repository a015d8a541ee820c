"""What a home remembers (torch-free): the registry (``registry``) on its plumbing (``base/``: a row's cells,
the connection) and its schema (``migrations/``: the migrations, the tables' columns, and the rows a read returns),
what moving experiments between homes asks of it (``merge``), the registry as a run writes it (``bookkeeping``), one
writer per experiment (``locking``), a run's rows and files (``runs/``: runs, checkpoints, verdicts and metrics as
rows; the run file, evaluations block by block), experiments as files and rows (``experiments``), what must survive
the registry's loss (``kept``: identities, sweeps' records, the highest ID given with each prefix), and the sweeps'
SQL: sweeps, trials, the durable queue's claims and halving's decisions (``sweeps/``; ``Registry`` inherits it). An
experiment's lifecycle (``octlm rm``, tags, notes) is a use case in ``tasks/lifecycle``.
May import: ``core``, ``config``.
"""
