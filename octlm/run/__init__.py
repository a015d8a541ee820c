"""The run around the engine: one skeleton for train, resume and overfit (``runner``, ``overfit``), the
session that turns the loop's events into durable state (``session``), rank 0's word to the other ranks
(``handoff``), and the experiment's files and checkpoint keeper (``artifacts``).
May import: ``core``, ``config``, ``runtime``, ``data``, ``train``, ``store``.
"""
