"""The queue's workers and what they keep: the claim loop of one worker (``worker``), one claimed trial trained and
its end recorded, its sweep topped up (``trials``), how a worker stops on a signal and releases its claims
(``stopping``), several workers on one box splitting its cores or GPUs (``pool``), each trial's log and the worker's
tally (``trial_log``), and successive halving's decisions, made where a trial's end is recorded (``halving``).
Torch is imported only when a trial trains.
"""
