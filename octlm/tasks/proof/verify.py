"""``verify-resume``: prove that a run split across processes ends bit-identical to one done in one go.

Both runs happen in scratch homes (never the experiment's own checkpoints or run file):
(a) one process trains 0 -> M; (b) one process trains 0 -> N1, and each later segment
resumes from the previous checkpoint in a new Python process, up to M. Then every model
tensor, optimizer tensor, random state, the run file and the loss of the next batch after
M are compared bit for bit.

``--nproc N`` runs every segment on N ranks; ``--nproc 4,2`` (canonical pieces only: ``training.micro_batches``)
runs (a) on the first size and each segment of (b) on the next size in the list, cycling, so a run stopped on 4
ranks is continued on 2. Every rank's random state of a canonical run is the same (``train.state.load_record``):
each side's distinct states are compared, so (a) on 4 ranks and (b) on 2 compare alike.

The scratch homes and the child processes that train in them are ``scratch``'s; a signal to ``verify-resume`` stops
the child, removes the scratch folder (unless ``--keep-scratch``) and exits 129/130/143.

With neither ``training.threads`` nor ``OMP_NUM_THREADS`` set, every process of the proof takes the threads of the
cores free at its start (``thread_choice``): its two sides are compared with each other, never with another run, so
a shared box's load may choose them; the first line and the summary say which.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import NotRequired, TypedDict

import torch

from octlm.config import Config, exact_world_sizes, moves_between, to_yaml
from octlm.core.errors import BadInput
from octlm.core.home import Home
from octlm.core.reporting import QuietReporter, QuietSegments, Reporter, Segments
from octlm.data.pipeline import PreparedData, prepare
from octlm.data.sources import data_root
from octlm.run.files import ExperimentFiles
from octlm.run.restore import restore
from octlm.runtime import load, machine
from octlm.runtime.launch import Launch
from octlm.store import experiments
from octlm.store.registry import Registry
from octlm.store.runs import runfile
from octlm.tasks.proof import bitcompare, scratch
from octlm.tasks.proof.bitcompare import Check, Differing
from octlm.tasks.proof.scratch import ResumePlan
from octlm.train import checkpoint
from octlm.train.loop import train_step

STOP_GRACE_S = 10.0  # a stopped segment may finish its step; then its process group is killed


class Threads(TypedDict):
    threads: int
    how: str  # asked | free cores | ...
    said: str  # the line verify-resume printed about them


class ResumeVerdict(TypedDict):
    verdict: str  # pass | fail
    identical: bool
    checks: list[Check]
    next_loss: float
    first_differing_step: int | str | None
    summary: str


class BothRuns(ResumeVerdict):
    seconds: dict[str, float]  # a: the uninterrupted run, b: the segments together
    scratch: str | None  # with --keep-scratch, the folder holding the scratch homes a/ and b/ (else None: removed)


class Resumed(BothRuns):
    """What ``verify-resume --json`` writes, and what the registry keeps as the verdict's details."""

    id: str
    split_at: list[int]
    until: int
    nproc: int | list[int]  # one size, or the sizes (a) and the segments of (b) cycled through
    threads: Threads
    world_sizes: list[int] | None  # those the experiment continues on exactly (canonical pieces); None: its own only
    warnings: NotRequired[list[SegmentWarning]]  # the command's: what the segments warned of, each once


class SegmentWarning(TypedDict):
    segments: list[str]  # the segments that said it
    message: str


def parse_splits(text: str, until: int) -> list[int]:
    try:
        splits = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise BadInput(f"--split-at {text!r}: expected step numbers such as 100 or 50,100,150") from None
    if not splits:
        raise BadInput("--split-at: give at least one step")
    for step in splits:
        if not 0 < step < until:
            raise BadInput(f"--split-at {step}: must be above 0 and below the final step {until}")
    return splits


def parse_sizes(text: str) -> list[int]:
    """``--nproc 4`` or ``--nproc 4,2``: the world sizes of the segments, each checked as ``--nproc`` is."""
    try:
        sizes = [int(part) for part in text.split(",")]
    except ValueError:
        raise BadInput(f"--nproc {text!r}: expected a number of ranks such as 4, or a list such as 4,2") from None
    for size in sizes:
        Launch(size)  # between 1 and the most ranks, else one line
    return sizes


def check_sizes(config: Config, sizes: list[int]) -> None:
    """Every size must split the batch; several sizes only with canonical pieces (exact at each size dividing them)."""
    if len(set(sizes)) > 1 and not config.training.micro_batches:
        raise BadInput(
            f"--nproc {','.join(map(str, sizes))}: a run continues exactly on another world size only with canonical "
            f"pieces: set training.micro_batches in {config.id}'s config, or give one size"
        )
    for size in sizes:
        config.training.check_split(size)


def _next_loss(prepared: PreparedData, loaded: checkpoint.Loaded) -> float:
    """The loss of the next global batch in this one process (a checkpoint of several ranks is continued
    here as a reshard would: its random streams reseeded alike for (a) and (b); one of canonical pieces is
    continued exactly, as any world size that divides its pieces continues it)."""
    pieces = prepared.config.training.micro_batches
    state = restore(prepared, loaded, QuietReporter(), reshard=loaded.record.world_size != 1 and not pieces)
    loss, _ = train_step(state, prepared.train_blocks, 0.0)
    return float(loss)


def verify_resume(
    home: Home,
    experiment_id: str,
    split_text: str,
    until: int | None = None,
    keep_scratch: bool = False,
    progress: Callable[[str], None] | None = None,
    reporter: Reporter | None = None,
    segments: Segments | None = None,
    nproc: int | list[int] = 1,
    config: Config | None = None,
) -> Resumed:
    """Runs (a) and (b) in scratch homes and compares them, each segment on ``nproc`` ranks (a list: (a) on the
    first, each segment of (b) on the next, cycling); ``reporter`` is told the phases of preparing the data here,
    ``segments`` each child process and what it says."""
    sizes = [nproc] if isinstance(nproc, int) else list(nproc)
    report = progress or (lambda message: None)
    config = config or experiments.load(home, experiment_id)
    final = config.training.steps if until is None else until
    if not 0 < final <= config.training.steps:
        raise BadInput(f"--until {final}: must be between 1 and training.steps ({config.training.steps})")
    splits = parse_splits(split_text, final)
    check_sizes(config, sizes)  # one line before anything is prepared or started
    files = ExperimentFiles(home, experiment_id)
    home.ensure_writable()
    threads = thread_choice(config)
    moves = f"; {moves_between(config.training.micro_batches)}" if config.training.micro_batches else ""
    report(f"{_shape(experiment_id, splits, final, sizes)}; {threads.said()}{moves}")
    outcome = "its child process was stopped and its scratch folder " + ("kept" if keep_scratch else "removed")
    with scratch.stopped_by_signals(outcome), Registry(home.registry) as registry:
        experiments.register(home, registry, config)
        with files.lock():
            # trains the experiment's tokenizer once if it has none
            device = machine.prepare_process(config)
            prepared = prepare(home, config, files.tokenizer, reporter, first_step=False, device=device)
        torch.set_num_threads(threads.threads)  # the next-batch losses, here, as the segments train
        plan = _plan(home, config, splits, final, sizes, threads)
        shown_by = segments or QuietSegments()
        compared = scratch.in_scratch(
            plan, keep_scratch, report, lambda folder: _both_runs(folder, plan, prepared, shown_by, keep_scratch)
        )
        shown: int | list[int] = sizes[0] if len(sizes) == 1 else sizes
        said: Threads = {"threads": threads.threads, "how": threads.how, "said": threads.said()}
        resumed: Resumed = {
            **compared,
            "id": experiment_id,
            "split_at": splits,
            "until": final,
            "nproc": shown,
            "threads": said,
            "world_sizes": exact_world_sizes(config.training.micro_batches) or None,
        }
        registry.add_verification(experiment_id, "verify-resume", resumed["verdict"], resumed)
        return resumed


def thread_choice(config: Config) -> load.Choice:
    """The threads of every process of the proof: ``training.threads`` or ``OMP_NUM_THREADS`` when set, else the
    cores free at the start (its sides are compared with each other, never with another run, so the box's load may
    choose; a segment on N ranks gives each rank its share)."""
    if config.training.threads:
        return load.Choice(config.training.threads, "asked")
    asked = os.environ.get("OMP_NUM_THREADS", "").strip()
    if asked.isdigit() and int(asked) > 0:
        return load.Choice(int(asked), "asked")
    return load.free_threads()


def _shape(experiment_id: str, splits: list[int], final: int, sizes: list[int]) -> str:
    """The proof's first line: ``verify-resume EXP-008: (a) 0 -> 200 in one process, (b) split at 100``."""
    where = "in one process" if sizes[0] == 1 else f"on {sizes[0]} ranks"
    then = f" (segments on {','.join(map(str, sizes[1:]))} ranks, cycling)" if len(sizes) > 1 else ""
    return f"verify-resume {experiment_id}: (a) 0 -> {final} {where}, (b) split at {','.join(map(str, splits))}{then}"


def _plan(
    home: Home, config: Config, splits: list[int], final: int, sizes: list[int], threads: load.Choice
) -> ResumePlan:
    # Both runs checkpoint only where they must: at the splits (by --until) and at the end.
    scratch = config.with_keys({"checkpoint.interval": final, "checkpoint.keep": len(splits) + 1})
    tokenizer = ExperimentFiles(home, config.id).tokenizer
    cadence = (to_yaml(scratch), tokenizer, splits, final, data_root(home), home.cache)
    chosen = threads.threads if threads.how == "chosen" else None
    return ResumePlan(config.id, *cadence, home.root, config.init.checkpoint, tuple(sizes), chosen)


def _both_runs(folder: Path, plan: ResumePlan, prepared: PreparedData, segments: Segments, kept: bool) -> BothRuns:
    a, b = scratch.scratch_home(folder / "a", plan), scratch.scratch_home(folder / "b", plan)
    bounds = [0, *plan.splits, plan.until]
    seconds = {"a": scratch.run_segment(a, plan, 0, 0, plan.until, segments), "b": 0.0}
    for index, (begin, stop) in enumerate(zip(bounds, bounds[1:], strict=False)):
        seconds["b"] += scratch.run_segment(b, plan, index + 1, begin, stop, segments)
    verdict = _verdict(prepared, _final(a, plan), _final(b, plan), a, b, plan.experiment_id)
    return {
        **verdict,
        "seconds": {k: round(v, 2) for k, v in seconds.items()},
        "scratch": str(folder) if kept else None,
    }


def _final(home: Home, plan: ResumePlan) -> checkpoint.Loaded:
    loaded = checkpoint.newest_valid(ExperimentFiles(home, plan.experiment_id).folder, step=plan.until)
    assert loaded is not None  # newest_valid refuses rather than return None when a step is given
    return loaded


def _verdict(
    prepared: PreparedData,
    loaded_a: checkpoint.Loaded,
    loaded_b: checkpoint.Loaded,
    a: Home,
    b: Home,
    experiment_id: str,
) -> ResumeVerdict:
    pieces = bool(prepared.config.training.micro_batches)  # every rank's streams alike: compared once per side
    checks = bitcompare.state_checks(loaded_a.record, loaded_b.record, pieces)
    records_a = runfile.without_timings(runfile.read(a.run_file(experiment_id)))
    records_b = runfile.without_timings(runfile.read(b.run_file(experiment_id)))
    return verdict_of(checks, loss_check(prepared, loaded_a, loaded_b), bitcompare.run_files(records_a, records_b))


def verdict_of(checks: list[Check], loss: Check, run_file: tuple[Check, int | str | None]) -> ResumeVerdict:
    """The verdict of the state's ``checks``, the next batch's ``loss`` and the ``run_file``'s check (with the first
    step where the files part): pass when nothing differs, and the summary line of every check."""
    checks = [*checks, loss, run_file[0]]
    identical = all(not check["differing"] for check in checks)
    summary = ("identical: " if identical else "DIFFERENT: ") + ", ".join(
        f"{c['check']} {c['compared'] - len(c['differing'])}/{c['compared']}" for c in checks
    )
    return {
        "verdict": "pass" if identical else "fail",
        "identical": identical,
        "checks": checks,
        "next_loss": loss["values"][0],
        "first_differing_step": run_file[1],
        "summary": summary,
    }


def loss_check(prepared: PreparedData, loaded_a: checkpoint.Loaded, loaded_b: checkpoint.Loaded) -> Check:
    """The loss of the batch after the last step, from each final checkpoint."""
    loss_a, loss_b = _next_loss(prepared, loaded_a), _next_loss(prepared, loaded_b)
    differing: list[Differing] = [] if loss_a == loss_b else [{"name": "loss", "max_abs_diff": abs(loss_a - loss_b)}]
    return {"check": "next-batch loss", "compared": 1, "differing": differing, "values": [loss_a, loss_b]}
