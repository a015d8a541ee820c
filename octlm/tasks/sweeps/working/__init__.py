"""The queue's workers and what they keep: the claim loop of one worker (``worker``), one claimed trial trained and
its end recorded, its sweep topped up (``trials``), how a worker stops on a signal and releases its claims
(``stopping``), several workers on one box splitting its cores or GPUs (``pool``), each trial's log and the worker's
tally (``trial_log``), successive halving's decisions, made where a trial's end is recorded (``halving``), and the
trials trained on a Ray cluster (``work --ray``): the driver that claims, submits and merges them back
(``driver``), the trials in flight and what comes back of them (``inflight``), the cluster as it sees it
(``cluster``) and what a Ray task runs on its node (``remote``). Torch is imported only when a trial trains (or, in a
Ray driver, when the first checkpoint comes back); Ray only on the ``--ray`` path.
"""
