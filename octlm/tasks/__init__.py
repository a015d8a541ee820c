"""The use cases that use runs, one command each: verify-resume and verify-run (``proof/``: the two runs, a run's
replay against its own checkpoints, their scratch homes and the bit-for-bit comparison of checkpoints), bench
(``bench/``), sample (``sample``), eval (``evaluate``),
export (``export``), prepare (``prepare``), doctor (``doctor/``: the checkup, the checkpoint files' checks), an
experiment's lifecycle (``octlm new``, ``octlm rm``, tags, notes, archiving: ``lifecycle``), forks (``new --init-from``:
``forks``), and sweeps (``sweeps/``: trials, the queue's workers, halving, Optuna, shipping to node-local homes).
May import: ``core``, ``config``, ``runtime``, ``data``, ``train``, ``store``, ``run``, ``exchange`` (sweeps ship
their trials as packs).
"""
