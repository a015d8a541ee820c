"""One invocation that trains: its registry row, signals, checkpoints and run file.

A ``Session`` is what turns the loop's events into durable state. The loop stays pure;
the runner composes a session with prepared data for each command.
"""

from __future__ import annotations

import os
import platform
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from . import __version__, checkpoint, runfile
from .config import Config
from .errors import OctlmError, Refused
from .home import Home
from .loop import LoopHooks, LoopResult, TrainState
from .registry import Registry

SIGNAL_EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143}


class Reporter(Protocol):
    def start(self, info: dict[str, Any]) -> None: ...
    def step(self, step: int) -> None: ...
    def eval(self, record: dict[str, Any]) -> None: ...
    def checkpoint(self, step: int, path: Path) -> None: ...
    def note(self, message: str) -> None: ...
    def warn(self, message: str) -> None: ...
    def finish(self) -> None: ...


class QuietReporter:
    def start(self, info: dict[str, Any]) -> None: pass
    def step(self, step: int) -> None: pass
    def eval(self, record: dict[str, Any]) -> None: pass
    def checkpoint(self, step: int, path: Path) -> None: pass
    def note(self, message: str) -> None: pass
    def warn(self, message: str) -> None: pass
    def finish(self) -> None: pass


class Interrupted(OctlmError):
    """Stopped by SIGINT or SIGTERM; exit 130 or 143."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class Track:
    """Where one kind of run keeps its checkpoints and run file."""

    folder: Path
    run_file: Path


class SignalGuard:
    """First SIGINT/SIGTERM: finish the step, checkpoint, exit 130/143. Second: stop at once."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.previous: dict[int, Any] = {}

    def __enter__(self) -> "SignalGuard":
        for signum in SIGNAL_EXIT:
            self.previous[signum] = signal.signal(signum, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received is not None:
            raise Interrupted(f"stopped at once by a second {signal.Signals(signum).name}; "
                              "the previous checkpoint is intact", SIGNAL_EXIT[signum])
        self.received = signum

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)

    @property
    def stop_requested(self) -> bool:
        return self.received is not None


def git_state(folder: Path) -> tuple[str | None, int | None]:
    try:
        commit = subprocess.run(["git", "-C", str(folder), "rev-parse", "HEAD"], capture_output=True,
                                text=True, timeout=5)
        if commit.returncode != 0:
            return None, None
        dirty = subprocess.run(["git", "-C", str(folder), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
        return commit.stdout.strip(), int(bool(dirty.stdout.strip()))
    except (OSError, subprocess.SubprocessError):
        return None, None


class Session:
    def __init__(self, *, home: Home, registry: Registry, config: Config, kind: str, track: Track,
                 data_hash: str, tokenizer_hash: str, reporter: Reporter, argv: list[str]):
        self.home, self.registry, self.config, self.kind, self.track = home, registry, config, kind, track
        self.data_hash, self.tokenizer_hash = data_hash, tokenizer_hash
        self.reporter, self.argv = reporter, argv
        self.run_id: int | None = None
        self.saved_step: int | None = None
        self.last_checkpoint: Path | None = None
        self.latest: dict[str, Any] = {}
        self.started = time.perf_counter()
        self.start_step = 0
        self.base_elapsed = 0.0

    # ------------------------------------------------------------------ checkpoints

    def state_for(self, state: TrainState) -> dict[str, Any]:
        return {
            "format": checkpoint.FORMAT,
            "experiment": self.config.id,
            "kind": self.kind,
            **state.state_dict(),
            "config_hash": self.config.fingerprint,
            "data_hash": self.data_hash,
            "tokenizer_hash": self.tokenizer_hash,
            "config": self.config.to_dict(),
            "environment": checkpoint.environment(state.device, self.config.training.precision, state.impl),
            "metrics": self.latest,
        }

    def save(self, state: TrainState) -> None:
        if self.saved_step == state.step:
            return
        state.elapsed = self.base_elapsed + (time.perf_counter() - self.started)
        path = checkpoint.path_for(self.track.folder, state.step)
        try:
            digest, size = checkpoint.save(path, self.state_for(state))
        except OSError as error:
            raise Refused(
                f"cannot write checkpoint {path.name}: {error.strerror or error}; the previous checkpoint is intact"
            ) from None
        self.registry.add_checkpoint(
            experiment_id=self.config.id, run_id=self.run_id, step=state.step,
            path=str(path.relative_to(self.home.root)), sha256=digest, size=size, tokens=state.tokens,
            config_hash=self.config.fingerprint, data_hash=self.data_hash, tokenizer_hash=self.tokenizer_hash,
            metrics=self.latest,
        )
        self.saved_step, self.last_checkpoint = state.step, path
        self.registry.update_run(self.run_id, end_step=state.step)
        self.prune()
        self.reporter.checkpoint(state.step, path)

    def prune(self) -> None:
        """Keep the newest ``checkpoint.keep`` and the final one; only ever after a newer one is durable."""
        found = checkpoint.listing(self.track.folder)
        keep = {step for step, _ in found[-self.config.checkpoint.keep:]} | {self.config.training.steps}
        for step, path in found:
            if step not in keep:
                self.registry.remove_checkpoint(str(path.relative_to(self.home.root)))
                checkpoint.remove(path)

    # ------------------------------------------------------------------ the run

    def drive(self, state: TrainState, *, until: int, train_blocks: Any, eval_blocks: Any, pad_id: int,
              resumed_from: Path | None, checkpoint_interval: int | None = None) -> LoopResult:
        from . import loop

        self.start_step = state.step
        self.base_elapsed = state.elapsed
        if resumed_from is not None:  # already durable: a stop before the first step rewrites nothing
            self.saved_step, self.last_checkpoint = state.step, resumed_from
        runfile.cut(self.track.run_file, state.step)
        commit, dirty = git_state(self.home.root)
        environment = checkpoint.environment(state.device, self.config.training.precision, state.impl)
        self.run_id = self.registry.start_run(
            self.config.id, self.kind, start_step=state.step, end_step=state.step, target_step=until,
            argv=self.argv, octlm_version=__version__, python_version=platform.python_version(),
            torch_version=str(torch.__version__), device=environment["device"], dtype=environment["dtype"],
            threads=environment["threads"], git_commit=commit, git_dirty=dirty,
            config_hash=self.config.fingerprint, data_hash=self.data_hash, tokenizer_hash=self.tokenizer_hash,
            resumed_from=str(resumed_from.relative_to(self.home.root)) if resumed_from else None,
        )
        self.reporter.start({"id": self.config.id, "kind": self.kind, "start": state.step, "until": until,
                             "parameters": state.model.parameter_count(), "device": str(state.device),
                             "precision": self.config.training.precision})
        tokens_per_step = state.tokens_per_step

        def on_eval(record: dict[str, Any]) -> None:
            elapsed = time.perf_counter() - self.started
            record = {**record, "elapsed_seconds": round(self.base_elapsed + elapsed, 3),
                      "tokens_per_second": round((state.step - self.start_step) * tokens_per_step / max(elapsed, 1e-9), 1)}
            self.latest = record
            runfile.append(self.track.run_file, record)
            self.registry.update_run(self.run_id, latest_metrics=record, end_step=state.step)
            self.reporter.eval(record)

        try:
            with SignalGuard() as guard:
                result = loop.run(
                    state, until=until, train_blocks=train_blocks, eval_blocks=eval_blocks, pad_id=pad_id,
                    eval_interval=self.config.training.eval_interval,
                    checkpoint_interval=checkpoint_interval or self.config.checkpoint.interval,
                    hooks=LoopHooks(on_step=self.reporter.step, on_eval=on_eval, on_checkpoint=self.save,
                                    should_stop=lambda: guard.stop_requested),
                )
                received = guard.received
        except BaseException as error:
            self.reporter.finish()
            status = "interrupted" if isinstance(error, (Interrupted, KeyboardInterrupt)) else "failed"
            message = str(error) or type(error).__name__
            try:
                self.registry.finish_run(self.run_id, status, end_step=self.saved_step if self.saved_step is not None else self.start_step,
                                         error=message, final_metrics=self.latest or None)
            except Exception:
                pass  # the registry may be what failed; the run reads as crashed and doctor can fix it
            raise
        self.reporter.finish()
        if result.stopped:
            name = signal.Signals(received).name
            self.registry.finish_run(self.run_id, "interrupted", end_step=state.step, final_metrics=self.latest or None,
                                     error=f"stopped by {name}")
            raise Interrupted(
                f"stopped by {name} at step {state.step}; checkpoint {self.last_checkpoint.name} written; "
                f"continue with `octlm resume {self.config.id}`", SIGNAL_EXIT[received])
        self.registry.finish_run(self.run_id, "completed", end_step=state.step, final_metrics=self.latest or None)
        return result

    def summary(self, state: TrainState) -> dict[str, Any]:
        elapsed = time.perf_counter() - self.started
        tokens = (state.step - self.start_step) * state.tokens_per_step
        return {
            "id": self.config.id, "kind": self.kind, "status": "completed", "run_id": self.run_id,
            "start_step": self.start_step, "end_step": state.step, "steps": self.config.training.steps,
            "tokens": state.tokens, "seconds": round(elapsed, 3), "tokens_per_second": round(tokens / max(elapsed, 1e-9), 1),
            "checkpoint": str(self.last_checkpoint) if self.last_checkpoint else None,
            "metrics": self.latest, "data_hash": self.data_hash, "tokenizer_hash": self.tokenizer_hash,
            "config_hash": self.config.fingerprint,
        }


def argv() -> list[str]:
    return [os.path.basename(sys.argv[0]), *sys.argv[1:]]
