"""Moving experiments between homes (torch-free): the JSON Lines records of ``registry export``
(``records``), merging them into a registry (``importing``), and one experiment as one tar (``packing``).
May import: ``core``, ``config``, ``store``.
"""
