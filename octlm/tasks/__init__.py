"""The use cases that use runs, one command each: ``verify-resume`` (``verify``; its bit-for-bit
comparison of two checkpoints: ``compare``), ``bench`` (``bench/``), ``sample``, ``export``, ``prepare`` and ``doctor``.
May import: ``core``, ``config``, ``runtime``, ``data``, ``train``, ``store``, ``run``.
"""
