"""The pure engine: the model (``model/``: the decoder, and its pieces in one pass) and generation (``generate``),
the training state and its checkpoint record (``state``), one step and the loop (``loop``; the rate of each step is
``config.schedules``'), what a step may not do (``guard``), evaluation (``evaluation``), the optimizer (``optim``),
the checkpoint record and its files (``checkpoint``), and the canary (``canary``). Never prints, never opens the
registry.
May import: ``core``, ``config``, ``runtime``, ``data``.
"""
