"""The sweeps' SQL (torch-free): a sweep and its trials, made in one transaction, merged from another home and
restored after the registry's loss (``rows``), and the durable queue's claims and halving's decisions (``queue``).
``Registry`` inherits both.
"""
