"""Process and machine policy, decided before torch does any work: the device and the environment record
(``machine``), how busy the box is (``load``, torch-free), processes that never compile kept from loading torch's
compiler (``lean``), the determinism profiles (``determinism``, torch-free), the ranks of a data-parallel run and
their launch (``distributed``, ``launch``), one step's gradient summed in one fixed tree of canonical pieces
(``pieces``), every random generator (``rng``), and what the process loads or sets in native code (``native/``:
the allocator, the compile cache, MKL, the private folders code is loaded from).
May import: ``core``, ``config``.
"""
