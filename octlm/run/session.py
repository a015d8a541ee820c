"""One invocation that trains: its registry run row, run file, signals and timing.

A ``Session`` turns the loop's events into durable state: ``start`` opens the run row and cuts
the run file back to the starting step, ``on_eval`` appends a record, ``on_checkpoint`` hands the
state to the track's ``CheckpointKeeper``, and ``finish`` / ``fail`` close the row. The loop
itself stays pure. Neither the registry (``Bookkeeping``) nor the reporter can stop a run: a locked
registry defers its rows, and output that nobody reads any more is the reporter's to drop; nor can the live
tracker's writer (``training.tensorboard``: ``run.live``), on a thread of its own.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import torch

from octlm.config import Config
from octlm.core import provenance
from octlm.core.errors import Diverged, Interrupted, Relayed
from octlm.core.records import TOTALS, RunRecord, RunTotals
from octlm.core.records.freeform import StateDict
from octlm.core.reporting import Reporter
from octlm.core.signals import SIGNAL_EXIT, SignalGuard
from octlm.data.blocks import TokenBlocks
from octlm.data.fingerprints import Fingerprints
from octlm.run.files import Track
from octlm.run.keeper import CheckpointCadence, CheckpointKeeper
from octlm.run.live import OFF, LiveEvents, Off, live_events
from octlm.run.summary import RunSummary, Stopped
from octlm.runtime import load, rng
from octlm.runtime import machine as runtime
from octlm.runtime.distributed import Ranks
from octlm.store.bookkeeping import BOOKKEEPING_TIMEOUT_S, SETTLE_TIMEOUT_S, Bookkeeping
from octlm.store.runs import evalblocks, runfile
from octlm.train import loop
from octlm.train.evaluation import PerBlock
from octlm.train.loop import LoopHooks
from octlm.train.state import TrainState

__all__ = ["Bookkeeping", "RankSession", "RunSummary", "Session", "Stopped"]


class _Steps:
    """What every rank of a run does: the loop under a signal guard, the stop agreed by all ranks before each
    step (so they stop at the same step, for the same signal), and every rank's random state gathered at each
    checkpoint, which ``save`` (rank 0) writes before all ranks go on together."""

    def __init__(self, config: Config, ranks: Ranks):
        self.config, self.ranks = config, ranks
        self.saved_step: int | None = None
        self.stop_signal = 0

    def save(self, state: TrainState, rng_states: list[StateDict]) -> None:
        """Rank 0 writes the checkpoint; other ranks have nothing to write."""

    def on_eval(self, state: TrainState, record: RunRecord) -> None:
        """Rank 0 records a logged record; the loop calls it nowhere else."""

    def on_step(self, step: int) -> None:
        """Rank 0 shows progress."""

    def on_blocks(self, step: int, per_block: PerBlock) -> None:
        """Rank 0 keeps an evaluation block by block."""

    def on_checkpoint(self, state: TrainState) -> None:
        if self.saved_step == state.step:
            return
        rng_states = self.ranks.gather(rng.capture())  # every rank's, in rank order
        self.save(state, rng_states)
        self.ranks.barrier()  # the checkpoint is durable before any rank goes on
        self.saved_step = state.step

    def _agreed_stop(self, guard: SignalGuard) -> bool:
        self.stop_signal = self.ranks.agree(guard.received or 0)
        return self.stop_signal != 0

    def _train(
        self, guard: SignalGuard, state: TrainState, cadence: CheckpointCadence, blocks: tuple[TokenBlocks, TokenBlocks]
    ) -> bool:
        """The loop to ``cadence.until``, checkpointing where the cadence says; True when the ranks agreed to stop
        early (``stop_signal`` says why)."""
        hooks = LoopHooks(
            on_step=self.on_step,
            on_eval=lambda record: self.on_eval(state, record),
            on_blocks=self.on_blocks,
            on_checkpoint=self.on_checkpoint,
            checkpoint_due=cadence.due,
            should_stop=lambda: self._agreed_stop(guard),
        )
        return loop.train_until(state, until=cadence.until, train_blocks=blocks[0], eval_blocks=blocks[1], hooks=hooks)


class RankSession(_Steps):
    """A rank other than 0: the same steps, agreements and gathered random states; no files, rows or output.
    It ends as rank 0 does: a stop by a signal is ``Relayed`` with rank 0's exit code."""

    def __init__(self, config: Config, ranks: Ranks, resumed: bool, start_step: int):
        super().__init__(config, ranks)
        if resumed:  # as rank 0's session: a stop before the first step rewrites nothing
            self.saved_step = start_step

    def run(self, state: TrainState, *, cadence: CheckpointCadence, train_blocks: TokenBlocks) -> None:
        try:
            with SignalGuard() as guard:
                stopped = self._train(guard, state, cadence, (train_blocks, train_blocks))
        except Diverged as error:  # every rank sees the same loss and norm, and stops at the same step
            raise Relayed(error.exit_code) from None
        if stopped:
            raise Relayed(SIGNAL_EXIT[signal.Signals(self.stop_signal)])


class Session(_Steps):
    """Rank 0's session (the only one of a single process): run row, run file, checkpoints, output."""

    def __init__(
        self,
        *,
        registry: Bookkeeping,
        config: Config,
        kind: str,
        track: Track,
        keeper: CheckpointKeeper,
        fingerprints: Fingerprints,
        reporter: Reporter,
        home_root: Path,
        ranks: Ranks | None = None,
        resharded_from: int | None = None,
        eval_split: str = "validation",
    ):
        super().__init__(config, ranks or Ranks())
        self.eval_split = eval_split  # what the evaluations read ("training": no validation documents)
        self.registry, self.kind, self.track, self.resharded_from = registry, kind, track, resharded_from
        self.keeper, self.fingerprints, self.reporter, self.home_root = keeper, fingerprints, reporter, home_root
        self.run_id: int | None = None
        self.last_checkpoint: Path | None = None
        self.latest: RunRecord = {}
        self.started = time.perf_counter()
        self.start_step = 0
        self.base_elapsed = 0.0
        self.eval_seconds = 0.0  # what this session's evaluations took
        self.eval_split = eval_split  # what they read (``data.pipeline.PreparedData.eval_split``)
        self.totals: RunTotals | None = None  # the whole session's figures, taken as it finishes
        self.live: LiveEvents | Off = OFF  # training.tensorboard's writer (``run.live``), never part of the run

    def _row(self) -> int:
        assert self.run_id is not None, "the run row is opened by start()"
        return self.run_id

    def start(
        self,
        state: TrainState,
        until: int,
        resumed_from: Path | None,
        forked_from: Path | None = None,
        inherited: list[RunRecord] | None = None,
    ) -> None:
        """Open the run row; a resume cuts the run file and the metrics back to its checkpoint's step.
        A fork's first run records the parent checkpoint (path and sha256) where a resume records its own."""
        self.start_step, self.base_elapsed = state.step, state.elapsed
        if resumed_from is not None:  # already durable: a stop before the first step rewrites nothing
            self.saved_step, self.last_checkpoint = state.step, resumed_from
        runfile.cut(self.track.run_file, state.step)
        evalblocks.cut(evalblocks.path_for(self.track.run_file), state.step)
        self.registry.cut_metrics(self.config.id, self.track.kind, state.step)
        self.live = live_events(self.config, self.track.kind, self.home_root, state.step, self.reporter.warn)
        self.live.start(self.config, self.fingerprints)
        for record in inherited or []:  # a fork continuing its parent's run: the parent's records so far
            runfile.append(self.track.run_file, record)
            self.live.record(record)
            self.registry.add_metrics(self.config.id, self.track.kind, None, record)
            self.latest = {**self.latest, **record}
        self.run_id = self.registry.start_run(
            self.config.id, self.kind, **self._run_fields(state, until, resumed_from, forked_from)
        )
        self.reporter.start(
            {
                "id": self.config.id,
                "kind": self.kind,
                "start": state.step,
                "until": until,
                "parameters": state.model.parameter_count(),
                "device": str(state.device),
                "precision": self.config.training.precision,
                "ranks": self.ranks.world_size,
            }
        )
        busy = load.oversubscribed(
            torch.get_num_threads(), load.others_since_begin(), runtime.threads_came(self.config)
        )
        if busy:
            self.reporter.warn(busy, again=True)
        slower = runtime.bf16_warning(self.config, state.device) if self.ranks.leader else None
        if slower:
            self.reporter.warn(slower, again=True)

    def _run_fields(
        self, state: TrainState, until: int, resumed_from: Path | None, forked_from: Path | None
    ) -> dict[str, Any]:
        """The new run row: where it starts, what it trains under, on how many ranks, and its provenance."""
        origin = str(resumed_from.relative_to(self.home_root)) if resumed_from else None
        if forked_from is not None:
            origin = f"{forked_from.relative_to(self.home_root)} (init, sha256 {self.config.init.sha256})"
        environment = runtime.environment(state.device, self.config.training.precision, state.optimizer_impl)
        return {
            "start_step": state.step,
            "end_step": state.step,
            "target_step": until,
            "device": environment["device"],
            "dtype": environment["dtype"],
            "threads": environment["threads"],
            "config_hash": self.fingerprints.config,
            "data_hash": self.fingerprints.data,
            "tokenizer_hash": self.fingerprints.tokenizer,
            **provenance.run_fields(self.home_root),
            "resumed_from": origin,
            "load_average": load.load_average(),
            "world_size": self.ranks.world_size,
            "nnodes": self.ranks.nnodes,
            "backend": self.ranks.backend(state.device),
            "resharded_from": self.resharded_from,
        }

    def on_step(self, step: int) -> None:
        self.reporter.step(step)

    def on_eval(self, state: TrainState, record: RunRecord) -> None:
        """A logged record (with an evaluation at evaluation steps): run file, metrics table, run row."""
        self.keeper.files.check_lock()  # the lock removed or replaced: stop before writing anything more
        elapsed = time.perf_counter() - self.started
        trained = (state.step - self.start_step) * state.tokens_per_step
        record = {
            **record,
            "elapsed_seconds": round(self.base_elapsed + elapsed, 3),
            "tokens_per_second": round(trained / max(elapsed, 1e-9), 1),
        }
        self.latest = {**self.latest, **record}  # the newest value of each field: evaluations are rarer than logs
        self.eval_seconds += record.get("eval_seconds") or 0.0
        runfile.append(self.track.run_file, record)
        self.live.record(record)
        self.registry.add_metrics(self.config.id, self.track.kind, self.run_id, record)
        self.registry.update_run(self._row(), latest_metrics=self.latest, end_step=state.step)
        if "eval_loss" in record:  # the reporter shows evaluations; the bar moves with every step
            self.reporter.eval(record)

    def on_blocks(self, step: int, per_block: PerBlock) -> None:
        """The main track's evaluations, block by block, beside its run file (``store.runs.evalblocks``); an overfit's
        one block has nothing to pair."""
        if self.track.kind != "train":
            return
        clusters = None if per_block.cluster_unit == "blocks" else per_block.clusters.tolist()
        arrays = (per_block.nats.tolist(), per_block.targets.tolist(), per_block.target_bytes.tolist())
        kept = evalblocks.BlockEvaluation(step, per_block.digest, *arrays, clusters, per_block.cluster_unit)
        evalblocks.append(evalblocks.path_for(self.track.run_file), kept)

    def save(self, state: TrainState, rng_states: list[StateDict]) -> None:
        state.elapsed = self.base_elapsed + (time.perf_counter() - self.started)
        path = self.keeper.save(state, self.latest, self.run_id, rng_states)
        self.last_checkpoint = path
        self.registry.update_run(self._row(), end_step=state.step)
        self.reporter.checkpoint(state.step, path)

    def run(
        self,
        state: TrainState,
        *,
        train_blocks: TokenBlocks,
        eval_blocks: TokenBlocks,
        resumed_from: Path | None,
        forked_from: Path | None = None,
        inherited: list[RunRecord] | None = None,
    ) -> None:
        """Start, train to the keeper's ``cadence.until`` under a signal guard, finish; raises ``Interrupted`` on a
        signal. ``inherited``: the run-file records a fork takes over from the run it continues."""
        cadence = self.keeper.cadence
        try:
            with SignalGuard() as guard:
                self.start(state, cadence.until, resumed_from, forked_from, inherited)
                stopped = self._train(guard, state, cadence, (train_blocks, eval_blocks))
        except Diverged as error:
            self.fail(error)
            saved = (
                f"the last good checkpoint, {self.last_checkpoint.name}, is intact"
                if self.last_checkpoint
                else "no checkpoint was written before it"
            )
            raise Diverged(
                f"{self.config.id} {error}; {saved}. Training is deterministic, "
                "so a resume diverges again here: change the config (a lower training.learning_rate, or "
                "training.spike_guard) in a new experiment (`octlm new --from` or `--init-from`)"
            ) from None
        except Interrupted as error:  # a second signal: stopped at once, the previous checkpoint kept
            self.fail(error)
            kept = self.saved_step if self.saved_step is not None else self.start_step
            raise Stopped(str(error), error.exit_code, self.summary(state, "interrupted", kept)) from None
        except BaseException as error:
            self.fail(error)
            raise
        self.finish(state, self.stop_signal if stopped else None)

    def fail(self, error: BaseException) -> None:
        """Close the row as ``interrupted`` or ``failed`` (as far as the registry lets us), then the reporter."""
        status = "interrupted" if isinstance(error, (Interrupted, KeyboardInterrupt)) else "failed"
        status = "diverged" if isinstance(error, Diverged) else status
        end = self.saved_step if self.saved_step is not None else self.start_step
        try:
            if self.run_id is not None:
                message = str(error) or type(error).__name__
                self.registry.finish_run(
                    self.run_id,
                    status,
                    end_step=end,
                    error=message,
                    final_metrics=self.latest or None,
                    peak_rss=runtime.peak_rss(),
                )
            self.registry.settle(BOOKKEEPING_TIMEOUT_S)
        except Exception:
            pass  # the registry may be what failed; the run reads as crashed and doctor can fix it
        self.live.close()
        self.reporter.finish()

    def finish(self, state: TrainState, received: int | None) -> None:
        """The registry first (the run is over whatever the terminal does), then the reporter."""
        status, name = (self.status(state), "") if received is None else ("interrupted", signal.Signals(received).name)
        error = {"error": f"stopped by {name}"} if name else {}
        self.totals = self._totals(state)
        self.registry.finish_run(
            self._row(),
            status,
            end_step=state.step,
            final_metrics={**self.latest, TOTALS: self.totals},  # what the summary says, for ``show``'s headline
            peak_rss=runtime.peak_rss(),
            **error,
        )
        self.registry.settle(SETTLE_TIMEOUT_S if received is None else BOOKKEEPING_TIMEOUT_S)
        self.live.close()
        self.reporter.finish()
        if received is None:
            return
        saved = self.last_checkpoint.name if self.last_checkpoint else "none"
        raise Stopped(
            f"stopped by {name} at step {state.step}; checkpoint {saved} written; "
            f"continue with `octlm resume {self.config.id}`",
            SIGNAL_EXIT[signal.Signals(received)],
            self.summary(state, "interrupted"),
        )

    def status(self, state: TrainState) -> str:
        """``completed`` only at the config's last step; a run that ended by ``--until`` before it is ``stopped``."""
        return "completed" if state.step >= self.config.training.steps else "stopped"

    def _totals(self, state: TrainState, end: int | None = None) -> RunTotals:
        seconds = time.perf_counter() - self.started
        trained = ((state.step if end is None else end) - self.start_step) * state.tokens_per_step
        rate = round(trained / max(seconds, 1e-9), 1)
        return {
            "seconds": seconds,
            "tokens_per_second": rate,
            "eval_seconds": self.eval_seconds,
            "eval_split": self.eval_split,
        }

    def summary(self, state: TrainState, status: str | None = None, step: int | None = None) -> RunSummary:
        """What ``train`` and ``resume`` report: ``completed`` or ``stopped`` at the state's step, or (a signal)
        ``status`` ``interrupted`` at ``step``, that of the checkpoint kept; the figures the run row keeps
        (``finish``), so that ``show`` says the same."""
        end = state.step if step is None else step
        totals = self.totals or self._totals(state, end)
        return RunSummary(
            id=self.config.id,
            kind=self.kind,
            status=status or self.status(state),
            start_step=self.start_step,
            end_step=end,
            steps=self.config.training.steps,
            tokens=end * state.tokens_per_step,
            seconds=totals["seconds"],
            tokens_per_second=totals["tokens_per_second"],
            checkpoint=self.last_checkpoint,
            metrics=self.latest,
            fingerprints=self.fingerprints,
            run_id=self.run_id,
            eval_seconds=totals["eval_seconds"],
            eval_split=totals["eval_split"],
        )
