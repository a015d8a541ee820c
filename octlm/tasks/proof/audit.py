"""``verify-run``: the proof of the run itself. After a ``kill -9`` and a ``resume``, "was *my* run exact?":
``verify-resume`` trains two scratch copies and never looks at the user's checkpoints; this replays the experiment
straight, in one child process in a scratch home, on the same machine class and tier, to the run's newest checkpoint
(``train --until N --checkpoint-at ...``, so that it also writes a checkpoint at the step of each earlier one the run
still keeps), and compares every tensor of each of the run's own checkpoints with the replay's at its step, the loss
of the next batch after the newest, and the run file up to it: the table ``verify-resume`` prints, its verdict kept in
the registry as ``verify-run`` (``show ID`` lists it).

The replay trains the config the run's checkpoints were written under (the same fingerprint for every one of them),
on the run's world size or, with canonical pieces, any that divides them (``--nproc``), at the run's thread count
or, where pieces make it irrelevant, the cores free at the start. A run whose history cannot be replayed here is one
line, exit 3, before anything trains: its checkpoints written on a machine its tier does not cover (another
processor under ``local``, another canary, torch release, kernel variables), a corpus or tokenizer that changed since
(the data fingerprint differs), a fork whose parent checkpoint is gone, a run continued by ``resume --reshard``
(its random streams reseeded: not one trajectory). A run with no readable checkpoint, or a ``--nproc`` its pieces do
not allow, is bad input (exit 2).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NotRequired

import torch

from octlm import config as cfg
from octlm.config.tiers import TIERS
from octlm.core import layout
from octlm.core.errors import BadInput, Refused
from octlm.core.home import Home
from octlm.core.records import RunRecord
from octlm.core.reporting import QuietSegments, Reporter, Segments, counted
from octlm.data.pipeline import PreparedData, prepare
from octlm.data.sources import data_root
from octlm.run.files import ExperimentFiles
from octlm.run.runner import check_owner
from octlm.runtime import load, machine
from octlm.store import experiments
from octlm.store.registry import Registry
from octlm.store.runs import runfile
from octlm.tasks.proof import bitcompare, scratch, verify
from octlm.tasks.proof.bitcompare import Check
from octlm.train import canary, checkpoint
from octlm.train.state import TrainState

CANNOT = "its run cannot be replayed"  # every refusal says it, then why


class Audited(verify.BothRuns):
    """What ``verify-run --json`` writes, and what the registry keeps as the verdict's details."""

    id: str
    steps: list[int]  # the run's checkpoints compared with the replay's, at their steps
    nproc: int  # the replay's world size
    threads: verify.Threads
    world_sizes: list[int] | None  # those the run continues on exactly (canonical pieces); None: its own only
    skipped: list[str]  # the run's checkpoints that could not be read, each with why
    warnings: NotRequired[list[verify.SegmentWarning]]  # the command's: what the replay warned of, each once


@dataclass(frozen=True)
class Run:
    """The run as its files hold it: its config (its newest checkpoint's), its readable checkpoints oldest first,
    its run file up to the newest (timings aside), and the checkpoints skipped."""

    config: cfg.Config
    loaded: list[checkpoint.Loaded]
    records: list[RunRecord]
    skipped: list[str]

    @property
    def newest(self) -> checkpoint.Loaded:
        return self.loaded[-1]

    @property
    def steps(self) -> list[int]:
        return [loaded.record.step for loaded in self.loaded]


def verify_run(
    home: Home,
    experiment_id: str,
    nproc: int | None = None,
    keep_scratch: bool = False,
    progress: Callable[[str], None] | None = None,
    reporter: Reporter | None = None,
    segments: Segments | None = None,
) -> Audited:
    """Replay the run in a scratch home and compare its checkpoints with the replay's; ``reporter`` is told the
    phases of preparing the data here, ``segments`` the replay's child process and what it says."""
    experiments.load(home, experiment_id)  # an unknown experiment said as such, before anything is made for it
    report, files = progress or (lambda message: None), ExperimentFiles(home, experiment_id)
    home.ensure_writable()
    outcome = "its replay was stopped and its scratch folder " + ("kept" if keep_scratch else "removed")
    with scratch.stopped_by_signals(outcome, "verify-run"), Registry(home.registry) as registry:
        with files.lock():  # no run writes the checkpoints while they are read
            run = read_run(home, files, registry, experiment_id)
            size = _world_size(run, nproc)
            device = machine.prepare_process(run.config)
            threads = _threads(run)
            torch.set_num_threads(threads.threads)  # the next-batch losses, here, as the replay trains
            _check_machine(run, device)  # before the data: the refusal is the command's one line
            prepared = _prepared(home, run, files, reporter, device)
        plan = _plan(home, run, size, threads)
        pieces = run.config.training.micro_batches
        report(_first_line(run, size, threads))
        shown_by = segments or QuietSegments()
        compared = scratch.in_scratch(
            plan, keep_scratch, report, lambda folder: _replayed(folder, plan, run, prepared, shown_by, keep_scratch)
        )
        said: verify.Threads = {"threads": threads.threads, "how": threads.how, "said": threads.said()}
        audited: Audited = {
            **compared,
            "id": experiment_id,
            "steps": run.steps,
            "nproc": size,
            "threads": said,
            "world_sizes": cfg.exact_world_sizes(pieces) or None,
            "skipped": run.skipped,
        }
        registry.add_verification(experiment_id, "verify-run", audited["verdict"], audited)
        return audited


def _first_line(run: Run, size: int, threads: load.Choice) -> str:
    """``verify-run EXP-001: its checkpoints at steps 4, 8 against a straight replay in one process; 2 threads (...);
    continues exactly on 1, 2 or 4 ranks (training.micro_batches 4)``."""
    where = "in one process" if size == 1 else f"on {size} ranks"
    pieces = run.config.training.micro_batches
    moves = f"; {cfg.moves_between(pieces)}" if pieces else ""
    at = ", ".join(map(str, run.steps))
    return f"verify-run {run.config.id}: its checkpoints at steps {at} against a straight replay {where}; " + (
        f"{threads.said()}{moves}"
    )


def read_run(home: Home, files: ExperimentFiles, registry: Registry, experiment_id: str) -> Run:
    """The run's readable checkpoints (each verified against its checksums) and what makes them one replayable run;
    BadInput when none can be read, ``Refused`` naming why its history cannot be replayed."""
    known, loaded, skipped = registry.digests(home.root, experiment_id), [], []
    for _, path in layout.checkpoints(files.folder):
        try:
            loaded.append(checkpoint.Loaded(path, checkpoint.read(path, known.get(str(path))), ()))
        except checkpoint.InvalidCheckpoint as error:
            skipped.append(str(error))
    if not loaded:
        why = f" (skipped: {'; '.join(skipped)})" if skipped else ""
        raise BadInput(f"{experiment_id} has no checkpoint to audit{why}: train it first")
    for found in loaded:
        check_owner(found, experiment_id, former=registry.former_ids(experiment_id))
    _check_history(registry, experiment_id, loaded)
    config = cfg.from_dict(loaded[-1].record.config, loaded[-1].path.name).replace(id=experiment_id)
    init = config.init
    if init.checkpoint and not (home.root / init.checkpoint).is_file():
        raise Refused(f"{experiment_id} forks from {init.parent}, whose checkpoint {init.checkpoint} is gone: {CANNOT}")
    last = loaded[-1].record.step
    kept = runfile.without_timings(runfile.read(home.run_file(experiment_id)))
    return Run(config, loaded, [r for r in kept if isinstance(r.get("step"), int) and r["step"] <= last], skipped)


def _check_history(registry: Registry, experiment_id: str, loaded: list[checkpoint.Loaded]) -> None:
    """One trajectory: no ``resume --reshard`` since the run last started at step 0, and every checkpoint written
    under the same config, data and tokenizer."""
    runs = [run for run in registry.runs(experiment_id) if run["kind"] in ("train", "resume")]
    since = max((index for index, run in enumerate(runs) if run["kind"] == "train"), default=0)
    for run in runs[since:]:
        if isinstance(run.get("resharded_from"), int):
            raise Refused(
                f"{experiment_id} was continued on another world size by resume --reshard (run {run['id']}, from "
                f"{counted(run['resharded_from'] or 0, 'rank')}), which reseeds the random streams: {CANNOT} straight"
            )
    first = loaded[0].record.fingerprints
    for found in loaded[1:]:
        if found.record.fingerprints != first:
            raise Refused(
                f"{loaded[0].path.name} and {found.path.name} were written under other configs, data or tokenizers: "
                f"not one run's checkpoints, so {CANNOT}"
            )


def _world_size(run: Run, nproc: int | None) -> int:
    """The replay's world size: ``--nproc``, else the run's newest; another than the run's only with pieces that
    the size divides (one line, exit 2)."""
    trained = run.newest.record.world_size
    size = nproc or trained
    if not run.config.training.micro_batches and size != trained:
        raise BadInput(
            f"--nproc {size}: {run.config.id} has no canonical pieces and trained on {counted(trained, 'rank')}: its "
            f"run replays exactly only there (training.micro_batches makes other world sizes exact)"
        )
    run.config.training.check_split(size)  # pieces: the size must divide them
    return size


def _prepared(
    home: Home, run: Run, files: ExperimentFiles, reporter: Reporter | None, device: torch.device
) -> PreparedData:
    """The run's data prepared here as the replay will prepare it, refused when its corpus or tokenizer is not the
    one the run trained on."""
    experiment_id, saved = run.config.id, run.newest.record.fingerprints
    if not files.tokenizer.is_file():
        raise Refused(f"{experiment_id}: its tokenizer {files.tokenizer.name} is gone: {CANNOT}")
    prepared = prepare(home, run.config, files.tokenizer, reporter, first_step=False, device=device)
    for what, there, here in (
        ("corpus", saved.data, prepared.fingerprints.data),
        ("tokenizer", saved.tokenizer, prepared.fingerprints.tokenizer),
    ):
        if there != here:
            raise Refused(
                f"{experiment_id}: the {what} changed since the run ({what} fingerprint {there[:12]} in "
                f"{run.newest.path.name}, {here[:12]} now): {CANNOT}"
            )
    return prepared


def _threads(run: Run) -> load.Choice:
    """The replay's threads: where pieces make the count irrelevant, ``verify-resume``'s choice (asked, else the
    cores free now); else the count the run's oldest checkpoint recorded."""
    if machine.thread_invariant(run.config):
        return verify.thread_choice(run.config)
    recorded = run.loaded[0].record.environment.get("threads")
    return load.Choice(recorded if isinstance(recorded, int) and recorded > 0 else 1, "recorded")


COMPARED = ("torch", "python", "platform", "device", "dtype", "optimizer", "determinism", "kernels", "mkl", "canary")


def _check_machine(run: Run, device: torch.device) -> None:
    """Refuse when a checkpoint of the run was written on a machine its tier does not cover: another torch, Python,
    platform, device, kernel variables, MKL path, canary (a tier that pins kernels) or processor (``local``)."""
    state = TrainState.fresh(run.config, device, run.config.training.batch_size)  # for its environment alone
    here = canary.environment(state)
    keys = COMPARED if "canary" in here else (*COMPARED, "processor")
    for found in run.loaded:
        there, mine = found.record.environment, dict(here)
        if "canary" in here and isinstance(there.get("threads"), int):  # its digest at the checkpoint's thread count
            mine["canary"] = canary.digest(int(there["threads"]))
        changed = [f"{key} {there.get(key)!r} -> {mine.get(key)!r}" for key in keys if _differs(there, mine, key)]
        if changed:
            tier = TIERS[run.config.training.determinism]
            raise Refused(
                f"{found.path.name} was written on another machine than this one ({', '.join(changed)}), and "
                f"training.determinism {tier.name} covers {tier.covers}: {CANNOT} here"
            )


def _differs(there: Mapping[str, object], here: Mapping[str, object], key: str) -> bool:
    """Whether ``key`` of the environment differs (a checkpoint written before it was recorded: not compared)."""
    return key in there and there.get(key) != here.get(key)


def _plan(home: Home, run: Run, size: int, threads: load.Choice) -> scratch.ResumePlan:
    """The replay: the run's config checkpointing at its newest step (and, by ``--checkpoint-at``, each earlier
    one), keeping them all."""
    config = run.config.with_keys({"checkpoint.interval": run.steps[-1], "checkpoint.keep": len(run.steps) + 1})
    tokenizer = ExperimentFiles(home, run.config.id).tokenizer
    given = threads.threads * size if threads.how in ("chosen", "recorded") else None  # each rank its share
    kept = (cfg.to_yaml(config), tokenizer, run.steps[:-1], run.steps[-1], data_root(home), home.cache, home.root)
    return scratch.ResumePlan(run.config.id, *kept, run.config.init.checkpoint, (size,), given)


def _replayed(
    folder: Path, plan: scratch.ResumePlan, run: Run, prepared: PreparedData, segments: Segments, kept: bool
) -> verify.BothRuns:
    home = scratch.scratch_home(folder / "replay", plan)
    parent = plan.home / "runs" / f"{run.config.init.parent.partition('@')[0]}.jsonl"
    if run.config.init.step and parent.is_file():  # a fork continuing its parent's run inherits its records
        home.runs.mkdir(exist_ok=True)
        shutil.copy2(parent, home.runs / parent.name)
    seconds = scratch.run_segment(home, plan, 0, 0, plan.until, segments, also=plan.splits)
    replay = ExperimentFiles(home, plan.experiment_id).folder
    pieces = bool(run.config.training.micro_batches)
    mine: list[tuple[int, list[Check]]] = []
    for found in run.loaded:
        theirs = checkpoint.read(layout.checkpoint_path(replay, found.record.step))
        mine.append((found.record.step, bitcompare.state_checks(found.record, theirs, pieces)))
    newest = checkpoint.Loaded(layout.checkpoint_path(replay, plan.until), theirs, ())
    records = runfile.without_timings(runfile.read(home.run_file(plan.experiment_id)))
    loss = verify.loss_check(prepared, run.newest, newest)
    verdict = verify.verdict_of(_merged(mine), loss, bitcompare.run_files(run.records, records))
    return {**verdict, "seconds": {"replay": round(seconds, 2)}, "scratch": str(folder) if kept else None}


def _merged(per_step: list[tuple[int, list[Check]]]) -> list[Check]:
    """Each check over every compared checkpoint: the leaves counted together, each differing one named with its
    step (``model.blocks.0.mlp.up.weight at step 8``)."""
    merged: dict[str, Check] = {}
    for step, checks in per_step:
        for check in checks:
            into = merged.setdefault(check["check"], {"check": check["check"], "compared": 0, "differing": []})
            into["compared"] += check["compared"]
            into["differing"] += [{**d, "name": f"{d['name']} at step {step}"} for d in check["differing"]]
    return list(merged.values())
