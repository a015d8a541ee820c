"""The use cases that use runs, one command each: ``verify-resume`` (``verify``; its bit-for-bit comparison of
two checkpoints: ``compare``), ``bench`` (``bench/``), ``sample``, ``eval`` (``evaluate``), ``export``,
``prepare``, ``doctor``, an experiment's lifecycle (``rm``, tags, notes, archiving: ``lifecycle``), and sweeps
(``sweeps/``: trials, the queue's workers, halving, Optuna, shipping to node-local homes).
May import: ``core``, ``config``, ``runtime``, ``data``, ``train``, ``store``, ``run``, ``exchange`` (sweeps ship
their trials as packs).
"""
