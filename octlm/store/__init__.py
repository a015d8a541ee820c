"""What a home remembers (torch-free): the registry and its plumbing (``registry``, ``base``, ``merge``) on
its schema (``migrations/``: the migrations, the tables' columns, and the rows a read returns), the registry as a run
writes it (``bookkeeping``), whether a run's process lives (``liveness``), one writer per experiment
(``locking``), run files (``runfile``), experiments as files and rows (``experiments``), and the sweeps' SQL:
sweeps, trials, the durable queue's claims and halving's decisions (``sweeps``; ``Registry`` inherits it). An
experiment's lifecycle (``rm``, tags, notes) is a use case in ``tasks/lifecycle``.
May import: ``core``, ``config``.
"""
