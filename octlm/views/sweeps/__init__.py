"""Sweeps as the views see them (torch-free, read-only): a sweep's queue and its configurations ranked with the
seeds' error bars (``status``), seed replicates and whether two groups differ beyond seed noise (``replicates``),
and what ``octlm watch`` draws, read from the run files and the registry without a lock (``live``).
"""
