"""The records that cross layers, each spelled once: what one logged step of a run says.

A ``RunRecord`` is written by the training loop (every ``training.log_interval`` steps, with the evaluation's
fields at evaluation steps), timed by the session, appended to ``runs/<ID>.jsonl``, kept as a row of the
registry's ``metrics`` table, exported with the run file, and read by the views. Every one of them takes its
field names from here (``RUN_RECORD_FIELDS``), so a field added here reaches them all.
"""

from __future__ import annotations

from typing import TypedDict


class RunRecord(TypedDict, total=False):
    step: int  # the step just taken (1-based: after the first step, 1)
    tokens: int  # tokens trained on so far
    lr: float  # the learning rate of that step
    train_loss: float  # the mean training loss of the steps since the previous record
    eval_loss: float  # at evaluation steps: the held-out loss (nats per target token)
    perplexity: float  # exp(eval_loss)
    bits_per_byte: float  # eval nats / (ln 2 x target bytes)
    gradient_norm: float  # the global gradient norm of that step, before clipping
    elapsed_seconds: float  # training time so far, all processes of the run together
    tokens_per_second: float  # of this process's run since it started


RUN_RECORD_FIELDS: tuple[str, ...] = tuple(RunRecord.__annotations__)  # in the order above
EVALUATION_FIELDS = ("eval_loss", "perplexity", "bits_per_byte")
TIMING_FIELDS = ("elapsed_seconds", "tokens_per_second")  # the session's; they differ between equal runs
LOOP_FIELDS = tuple(name for name in RUN_RECORD_FIELDS if name not in TIMING_FIELDS)  # what the loop writes
