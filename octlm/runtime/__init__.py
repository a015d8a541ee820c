"""Process and machine policy, decided before torch does any work: the device and the environment record
(``machine``), the determinism profiles (``determinism``, torch-free), threads, the allocator, the compile cache,
the ranks of a data-parallel run and their launch (``distributed``, ``launch``), and every random generator
(``rng``).
May import: ``core``, ``config``.
"""
