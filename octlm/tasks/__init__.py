"""The use cases that use runs, one command each: ``verify-resume`` (``verify``), ``bench``
(``bench/``), ``sample``, ``export``, ``prepare`` and ``doctor``.
May import: ``core``, ``config``, ``runtime``, ``data``, ``train``, ``store``, ``run``.
"""
