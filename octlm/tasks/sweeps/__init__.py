"""Many experiments, not one: sweeps over a durable queue in the registry. What a sweep tries and its trials as
ordinary experiments (``spec``: the options checked and counted; ``samplers``: one table of samplers; ``plan``,
torch-free; Optuna's samplers in ``asking``, imported only when used), the worker that claims and trains them in its
process as ``octlm resume`` would (``worker``, with each trial's log and its tally in ``trial_log``), several workers
on one box splitting its cores or GPUs (``pool``), successive halving's decisions (``halving``), a sweep extended or
its failed trials retried (``mending``), and a sweep's trials moved to and from node-local homes for a job array
(``shipping``). The queue's SQL is ``store/sweeps/``.
May import: ``core``, ``config``, ``runtime``, ``data``, ``train``, ``store``, ``run`` (and ``exchange``, to ship).
"""
