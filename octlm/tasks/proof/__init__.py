"""``verify-resume`` and ``verify-run``, the proofs of exact resume: ``verify-resume``'s two runs and their verdict
(``verify``), ``verify-run``'s replay of a run against its own checkpoints (``audit``), the scratch homes and the child
processes that train in them (``scratch``), and the bit-for-bit comparison of two checkpoints and two run files
(``bitcompare``).
"""
