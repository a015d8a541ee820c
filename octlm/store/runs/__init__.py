"""A run's records (torch-free): its rows in the registry, which ``Registry`` inherits (``rows``: the run row, the
checkpoints, the verdicts, the metrics), and its files beside the registry: the run file, one record per logged step
(``runfile``), and the main track's evaluations block by block (``evalblocks``), both cut back on resume.
May import: ``core``, ``config``.
"""
