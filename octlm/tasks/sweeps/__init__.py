"""Many experiments, not one: sweeps over a durable queue in the registry, in three rooms by job. What a sweep tries
and its trials as ordinary experiments (``planning/``: its options, the samplers' table, Optuna's asking, the trials
made and written); the workers that claim and train them and what they keep (``working/``: the claim loop, one
trial trained and its end recorded, several workers on one box, halving's decisions, the trials on a Ray cluster);
a sweep grown, healed and
moved to and from node-local homes (``upkeep/``: extend and retry, pack and unpack). The queue's SQL is
``store/sweeps/``.
May import: ``core``, ``config``, ``runtime``, ``data``, ``train``, ``store``, ``run`` (and ``exchange``, to ship).
"""
