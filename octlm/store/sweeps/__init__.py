"""The sweeps' SQL (torch-free): a sweep and its trials, made in one transaction, merged from another home and
restored after the registry's loss (``rows``), the durable queue's claims and halving's decisions (``queue``), and a
sweep's spec and rows as every reader takes them, checked field by field and described (``specs``). ``Registry``
inherits ``rows`` and ``queue``.
"""
