"""Moving experiments between homes (torch-free): the JSON Lines records of ``registry export`` and their types
(``records``), reading and checking them back (``reading``), merging them into a registry (``importing``) once
``admitting`` has said that each experiment may come in, one experiment as one tar (``packing``), whose members and
manifest ``tarcheck`` checks before ``packing.unpack`` reads or copies anything and whose files ``placing`` puts in
the home, what these commands write with ``--json`` (``results``); and a run's records for another tool: the
trackers, one row each in one table (``trackers``: TensorBoard's events, a CSV), the runs an ``octlm export
tensorboard|csv`` names, their groups of seed replicates and the folder written (``tracking``).
May import: ``core``, ``config``, ``store``.
"""
