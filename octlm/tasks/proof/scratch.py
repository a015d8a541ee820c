"""``verify-resume``'s and ``verify-run``'s scratch homes and the child processes that train in them (torch-free).

A scratch home holds the experiment's config (its checkpoint cadence adjusted), its tokenizer and, for a fork, its
parent's checkpoint; the token cache is the experiment's own, named by ``OCTLM_CACHE_DIR`` in each segment's
environment (never a link inside the scratch home: a linked ``cache/`` is refused as every linked home folder is).

Each segment is a child interpreter started with ``-P`` (no working directory on ``sys.path``) in the scratch
home, so a ``./octlm_cli`` planted where the user stands never runs; the user's own environment (``PYTHONPATH``,
user site-packages) still applies. Each runs in a process group of its own: a signal to ``verify-resume`` stops
the child and its group, removes the scratch folder (unless ``--keep-scratch``) and exits 129/130/143.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from octlm.core.errors import Interrupted, OctlmError
from octlm.core.home import CACHE_VARIABLE, Home
from octlm.core.reporting import Segments
from octlm.core.signals import SIGNAL_EXIT, handling
from octlm.runtime.launch import octlm_command

STOP_GRACE_S = 10.0  # a stopped segment may finish its step; then its process group is killed


@dataclass(frozen=True)
class ResumePlan:
    """The two runs to compare: (a) 0 -> until in one process; (b) split at ``splits``."""

    experiment_id: str
    config_text: str
    tokenizer: Path
    splits: list[int]
    until: int
    data_root: Path
    cache: Path
    home: Path  # the experiment's own home: a fork's parent checkpoint (init.checkpoint) is copied from it
    init_checkpoint: str = ""
    sizes: tuple[int, ...] = (1,)  # ranks of (a), then of each segment of (b), cycling
    threads: int | None = None  # chosen from the free cores (None: the user's setting stands)

    def size_of(self, segment: int) -> int:
        """The ranks of segment ``segment``: 0 is (a), 1 ... of (b)."""
        return self.sizes[segment % len(self.sizes)]

    def environment(self, segment: int) -> dict[str, str]:
        """What a segment's process is given besides this one's environment: the data root, the experiment's token
        cache, and its threads (each rank its share) when they were chosen here."""
        given = {"NO_COLOR": "1", "OCTLM_DATA_ROOT": str(self.data_root), CACHE_VARIABLE: str(self.cache)}
        if self.threads is not None:
            given["OMP_NUM_THREADS"] = str(max(1, self.threads // self.size_of(segment)))
        return given


def scratch_home(root: Path, plan: ResumePlan) -> Home:
    """A home with the experiment's config, its tokenizer and (a fork's) parent checkpoint."""
    home = Home(root)
    home.experiments.mkdir(parents=True)
    home.config_path(plan.experiment_id).write_text(plan.config_text)
    folder = home.checkpoint_dir(plan.experiment_id)
    folder.mkdir(parents=True)
    shutil.copy2(plan.tokenizer, folder / plan.tokenizer.name)
    plan.cache.mkdir(parents=True, exist_ok=True)
    if plan.init_checkpoint:  # a fork starts from its parent's checkpoint, at the same place in the home
        (root / plan.init_checkpoint).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(plan.home / plan.init_checkpoint, root / plan.init_checkpoint)
    return home


def run_segment(
    home: Home, plan: ResumePlan, segment: int, begin: int, stop: int, segments: Segments, also: Sequence[int] = ()
) -> float:
    """Segment ``segment`` (0: (a); 1 ...: (b1) ...) on its world size, in a child process; its seconds. ``also``:
    steps the segment checkpoints at besides its cadence (``train --checkpoint-at``: verify-run's replay, labelled
    ``(replay)``)."""
    label, size = "(a)" if segment == 0 else f"(b{segment})", plan.size_of(segment)
    label = "(replay)" if also else label + (f" x{size}" if len(set(plan.sizes)) > 1 else "")
    segments.begin(label, begin, stop)
    verb = "resume" if begin else "train"
    ranks = ["--nproc", str(size)] if size > 1 else []
    extra = [part for step in also for part in ("--checkpoint-at", str(step))]
    args = [verb, plan.experiment_id, "--until", str(stop), *ranks, *extra]
    return _child(home, args, plan.environment(segment), label, segments)


def _child(home: Home, args: list[str], env: dict[str, str], label: str, segments: Segments) -> float:
    """``octlm args`` in a child process (``env``: what it is given besides this process's environment), its stderr
    lines passed on as they come; its failure is one line, a signal to this process stops it."""
    command = octlm_command(["--home", str(home.root), *args])
    started, said = time.perf_counter(), ["(no output)"]
    with subprocess.Popen(
        command,
        cwd=home.root,
        env={**os.environ, **env},
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
def stopped_by_signals(outcome: str, command: str = "verify-resume") -> Iterator[None]:
    """The first SIGHUP/SIGINT/SIGTERM raises ``Interrupted`` (129/130/143) where it lands, saying that ``command``
    stopped and ``outcome``; later ones are ignored while the command stops its child and cleans up."""
    stopping = False

    def handle(signum: int, frame: object) -> None:
        nonlocal stopping
        if not stopping:
            stopping = True
            name = signal.Signals(signum)
            raise Interrupted(f"{command} stopped by {name.name}; {outcome}", SIGNAL_EXIT[name])

    with handling(handle):
        yield


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Signals wait until the block is done (a cleanup that must not stop halfway), then arrive."""
    signal.pthread_sigmask(signal.SIG_BLOCK, SIGNAL_EXIT)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNAL_EXIT)


Done = TypeVar("Done")  # what the work in the scratch folder gives back


def in_scratch(plan: ResumePlan, keep: bool, report: Callable[[str], None], work: Callable[[Path], Done]) -> Done:
    """``work`` in a new scratch folder, which goes entirely afterwards (unless ``keep``), however ``work`` ends."""
    scratch: Path | None = None
    signal.pthread_sigmask(signal.SIG_BLOCK, SIGNAL_EXIT)  # no signal until the cleanup knows the folder
    try:
        scratch = Path(tempfile.mkdtemp(prefix=f"octlm-verify-{plan.experiment_id}-"))
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNAL_EXIT)
        return work(scratch)
    finally:
        with _signals_held():  # the folder goes entirely, even if a signal arrives meanwhile
            if scratch is not None and keep:
                homes = [f"({home.name}) in {home.name}/" for home in sorted(scratch.iterdir()) if home.is_dir()]
                report(f"scratch kept at {scratch}" + (f": {', '.join(homes)}" if homes else ""))
            elif scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)
