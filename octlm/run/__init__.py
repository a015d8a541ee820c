"""The run around the engine: one skeleton for train, resume and overfit (``runner``, ``overfit``), the
session that turns the loop's events into durable state (``session``), how a run ends as train and resume report it
(``summary``), rank 0's word to the other ranks (``handoff``), the experiment's files (``files``), when and how
checkpoints are written (``keeper``), where a run starts from (``restore``: a checkpoint, or a fork's parent), and the
TensorBoard events ``training.tensorboard`` writes while it trains, on a thread of their own (``live``).
May import: ``core``, ``config``, ``runtime``, ``data``, ``train``, ``store``, ``exchange`` (the trackers' events).
"""
