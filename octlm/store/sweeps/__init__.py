"""The sweeps' SQL (torch-free): a sweep and its trials, made in one transaction, merged from another home and
restored after the registry's loss (``rows``), the durable queue's claims and halving's decisions (``queue``), both
inherited by ``Registry``, the records they read and hand out (``records``), and a sweep's spec and rows as every
reader takes them, checked field by field and described (``specs``).
"""
