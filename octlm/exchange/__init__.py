"""Moving experiments between homes (torch-free): the JSON Lines records of ``registry export`` and their types
(``records``), reading and checking them back (``reading``), merging them into a registry (``importing``) once
``admitting`` has said that each experiment may come in, one experiment as one tar (``packing``), whose members and
manifest ``tarcheck`` checks before ``packing.unpack`` reads or copies anything and whose files ``placing`` puts in
the home, and what these commands write with ``--json`` (``results``).
May import: ``core``, ``config``, ``store``.
"""
