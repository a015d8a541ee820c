"""``verify-resume``, the proof of exact resume: the two runs and their verdict (``verify``), the scratch homes and the
child processes that train in them (``scratch``), and the bit-for-bit comparison of two checkpoints (``bitcompare``).
"""
