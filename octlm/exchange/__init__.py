"""Moving experiments between homes (torch-free): the JSON Lines records of ``registry export`` and their types
(``records``), reading and checking them back (``reading``), merging them into a registry (``importing``), and
one experiment as one tar (``packing``), whose members and manifest ``tarcheck`` checks before ``unpack`` reads
or copies anything.
May import: ``core``, ``config``, ``store``.
"""
