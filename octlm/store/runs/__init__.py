"""A run's files beside the registry (torch-free): the run file, one record per logged step (``runfile``), and the
main track's evaluations block by block (``evalblocks``), both cut back on resume. May import core."""
