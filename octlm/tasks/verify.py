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

Each segment is a child interpreter started with ``-P`` (no working directory on ``sys.path``) in
the scratch home, so a ``./octlm_cli`` planted where the user stands never runs; the user's own
environment (``PYTHONPATH``, user site-packages) still applies. Each runs in a process group of its
own: a signal to ``verify-resume`` stops the child and its group, removes the scratch folder (unless
``--keep-scratch``) and exits 129/130/143.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from octlm.config import Config, to_yaml
from octlm.core.errors import BadInput, Interrupted, OctlmError
from octlm.core.home import Home
from octlm.core.reporting import QuietReporter, QuietSegments, Reporter, Segments
from octlm.core.signals import SIGNAL_EXIT, handled_signals
from octlm.data.pipeline import PreparedData, prepare
from octlm.data.sources import data_root
from octlm.run.files import ExperimentFiles
from octlm.run.restore import restore
from octlm.runtime.launch import Launch, octlm_command
from octlm.store import experiments, runfile
from octlm.store.registry import Registry
from octlm.tasks import compare
from octlm.train import checkpoint
from octlm.train.loop import train_step

STOP_GRACE_S = 10.0  # a stopped segment may finish its step; then its process group is killed


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


def _scratch_home(root: Path, plan: Plan) -> Home:
    """A home with the experiment's config (checkpoint cadence adjusted), its tokenizer and the shared cache."""
    home = Home(root)
    home.experiments.mkdir(parents=True)
    home.config_path(plan.experiment_id).write_text(plan.config_text)
    files = ExperimentFiles(home, plan.experiment_id)
    files.folder.mkdir(parents=True)
    shutil.copy2(plan.tokenizer, files.tokenizer)
    plan.cache.mkdir(parents=True, exist_ok=True)
    home.cache.symlink_to(plan.cache, target_is_directory=True)
    if plan.init_checkpoint:  # a fork starts from its parent's checkpoint, at the same place in the home
        (root / plan.init_checkpoint).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(plan.home / plan.init_checkpoint, root / plan.init_checkpoint)
    return home


def _segment(home: Home, args: list[str], plan: Plan, label: str, segments: Segments) -> float:
    """One segment in a child process, its stderr lines passed on as they come; its failure is one line,
    a signal to this process stops it."""
    command = octlm_command(["--home", str(home.root), *args])
    env = {**os.environ, "NO_COLOR": "1", "OCTLM_DATA_ROOT": str(plan.data_root)}
    started, said = time.perf_counter(), ["(no output)"]
    with subprocess.Popen(
        command,
        cwd=home.root,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: a Ctrl-C reaches this process, which stops it
    ) as child:
        try:
            assert child.stderr is not None
            for line in child.stderr:
                said = [line.rstrip("\n")] if line.strip() else said
                segments.line(label, said[0])
            child.wait()
        except BaseException:
            _stop(child)
            raise
    segments.end(label)
    if child.returncode != 0:
        raise OctlmError(f"segment `octlm {' '.join(args)}` failed with exit {child.returncode}: {said[0]}")
    return time.perf_counter() - started


def _stop(child: subprocess.Popen[str]) -> None:
    """SIGTERM to the child's process group, SIGKILL to whatever is left of it after a grace period."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.wait(STOP_GRACE_S)
    with contextlib.suppress(ProcessLookupError):  # the group outlives its leader while members remain
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()


@contextlib.contextmanager
def _stopped_by_signals(outcome: str) -> Iterator[None]:
    """The first SIGHUP/SIGINT/SIGTERM raises ``Interrupted`` (129/130/143) where it lands, saying
    ``outcome``; later ones are ignored while the command stops its child and cleans up."""
    stopping = False

    def handle(signum: int, frame: object) -> None:
        nonlocal stopping
        if not stopping:
            stopping = True
            name = signal.Signals(signum)
            raise Interrupted(f"verify-resume stopped by {name.name}; {outcome}", SIGNAL_EXIT[name])

    previous = {signum: signal.signal(signum, handle) for signum in handled_signals()}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Signals wait until the block is done (a cleanup that must not stop halfway), then arrive."""
    signal.pthread_sigmask(signal.SIG_BLOCK, SIGNAL_EXIT)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNAL_EXIT)


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
) -> dict[str, Any]:
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
    outcome = "its child process was stopped and its scratch folder " + ("kept" if keep_scratch else "removed")
    with _stopped_by_signals(outcome), Registry(home.registry) as registry:
        experiments.register(home, registry, config)
        with files.lock():
            # trains the experiment's tokenizer once if it has none
            prepared = prepare(home, config, files.tokenizer, reporter, first_step=False)
        result = _in_scratch(
            _plan(home, config, splits, final, sizes), prepared, keep_scratch, report, segments or QuietSegments()
        )
        shown: int | list[int] = sizes[0] if len(sizes) == 1 else sizes
        result.update({"id": experiment_id, "split_at": splits, "until": final, "nproc": shown})
        registry.add_verification(experiment_id, "verify-resume", result["verdict"], result)
        return result


def _plan(home: Home, config: Config, splits: list[int], final: int, sizes: list[int]) -> Plan:
    # Both runs checkpoint only where they must: at the splits (by --until) and at the end.
    scratch = config.with_keys({"checkpoint.interval": final, "checkpoint.keep": len(splits) + 1})
    tokenizer = ExperimentFiles(home, config.id).tokenizer
    cadence = (to_yaml(scratch), tokenizer, splits, final, data_root(home), home.cache)
    return Plan(config.id, *cadence, home.root, config.init.checkpoint, tuple(sizes))


@dataclass(frozen=True)
class Plan:
    """The two runs to compare: (a) 0 -> until in one process; (b) split at ``splits``."""

    experiment_id: str
    config_text: str
    tokenizer: Path
    splits: list[int]
    until: int
    data_root: Path
    cache: Path
    home: Path  # the experiment's own home: a fork's parent checkpoint (init.checkpoint) is linked from it
    init_checkpoint: str = ""
    sizes: tuple[int, ...] = (1,)  # ranks of (a), then of each segment of (b), cycling

    def size_of(self, segment: int) -> int:
        """The ranks of segment ``segment``: 0 is (a), 1 ... of (b)."""
        return self.sizes[segment % len(self.sizes)]


def _in_scratch(
    plan: Plan, prepared: PreparedData, keep_scratch: bool, report: Callable[[str], None], segments: Segments
) -> dict[str, Any]:
    scratch: Path | None = None
    signal.pthread_sigmask(signal.SIG_BLOCK, SIGNAL_EXIT)  # no signal until the cleanup knows the folder
    try:
        scratch = Path(tempfile.mkdtemp(prefix=f"octlm-verify-{plan.experiment_id}-"))
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNAL_EXIT)
        result = _both_runs(scratch, plan, prepared, segments)
    finally:
        with _signals_held():  # the folder goes entirely, even if a signal arrives meanwhile
            if scratch is not None and keep_scratch:
                report(f"scratch kept at {scratch}")
            elif scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)
    return result


def _both_runs(scratch: Path, plan: Plan, prepared: PreparedData, segments: Segments) -> dict[str, Any]:
    a = _scratch_home(scratch / "a", plan)
    b = _scratch_home(scratch / "b", plan)
    bounds = [0, *plan.splits, plan.until]
    seconds = {"a": _run_segment(a, plan, 0, 0, plan.until, segments), "b": 0.0}
    for index, (begin, stop) in enumerate(zip(bounds, bounds[1:], strict=False)):
        seconds["b"] += _run_segment(b, plan, index + 1, begin, stop, segments)
    result = _verdict(prepared, _final(a, plan), _final(b, plan), a, b, plan.experiment_id)
    result["seconds"] = {k: round(v, 2) for k, v in seconds.items()}
    return result


def _run_segment(home: Home, plan: Plan, segment: int, begin: int, stop: int, segments: Segments) -> float:
    """Segment ``segment`` (0: (a); 1 ...: (b1) ...) on its world size."""
    label, size = "(a)" if segment == 0 else f"(b{segment})", plan.size_of(segment)
    label += f" x{size}" if len(set(plan.sizes)) > 1 else ""
    segments.begin(label, begin, stop)
    verb = "resume" if begin else "train"
    ranks = ["--nproc", str(size)] if size > 1 else []
    return _segment(home, [verb, plan.experiment_id, "--until", str(stop), *ranks], plan, label, segments)


def _final(home: Home, plan: Plan) -> checkpoint.Loaded:
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
) -> dict[str, Any]:
    ra, rb = loaded_a.record, loaded_b.record
    pieces = bool(prepared.config.training.micro_batches)  # every rank's streams alike: compared once per side
    checks = [
        compare.section("model", ra.model, rb.model),
        compare.section("optimizer", ra.optimizer, rb.optimizer),
        compare.section("rng", compare.streams(ra, pieces), compare.streams(rb, pieces)),
        compare.section("data order", ra.receipt, rb.receipt),  # the blocks read so far and their rolling digest
    ]
    if ra.guard or rb.guard:  # the spike guard's window and skipped steps
        checks.append(compare.section("guard", ra.guard, rb.guard))
    if ra.scaler or rb.scaler:  # fp16 only
        checks.append(compare.section("scaler", {"scaler": ra.scaler}, {"scaler": rb.scaler}))
    if ra.log_accumulator or rb.log_accumulator:  # a loss sum pending between two logged steps
        checks.append(compare.section("log", {"log": ra.log_accumulator}, {"log": rb.log_accumulator}))
    loss_check = _loss_check(prepared, loaded_a, loaded_b)
    run_file_check, first_step = _run_file_check(a, b, experiment_id)
    checks += [loss_check, run_file_check]
    identical = all(not check["differing"] for check in checks)
    summary = ("identical: " if identical else "DIFFERENT: ") + ", ".join(
        f"{c['check']} {c['compared'] - len(c['differing'])}/{c['compared']}" for c in checks
    )
    return {
        "verdict": "pass" if identical else "fail",
        "identical": identical,
        "checks": checks,
        "next_loss": loss_check["values"][0],
        "first_differing_step": first_step,
        "summary": summary,
    }


def _loss_check(prepared: PreparedData, loaded_a: checkpoint.Loaded, loaded_b: checkpoint.Loaded) -> dict[str, Any]:
    """The loss of the batch after the last step, from each final checkpoint."""
    loss_a, loss_b = _next_loss(prepared, loaded_a), _next_loss(prepared, loaded_b)
    differing = [] if loss_a == loss_b else [{"name": "loss", "max_abs_diff": abs(loss_a - loss_b)}]
    return {"check": "next-batch loss", "compared": 1, "differing": differing, "values": [loss_a, loss_b]}


def _run_file_check(a: Home, b: Home, experiment_id: str) -> tuple[dict[str, Any], Any]:
    """The two run files, timings aside, and the first step where they differ (None when equal)."""
    records_a = runfile.without_timings(runfile.read(a.run_file(experiment_id)))
    records_b = runfile.without_timings(runfile.read(b.run_file(experiment_id)))
    pairs = zip(records_a, records_b, strict=False)
    first_step = next((left.get("step") for left, right in pairs if left != right), None)
    if first_step is None and len(records_a) != len(records_b):
        first_step = "length differs"
    differing = [] if first_step is None else [{"name": f"first differing step: {first_step}", "max_abs_diff": None}]
    check = {"check": "run file", "compared": max(len(records_a), len(records_b)), "differing": differing}
    return check, first_step
