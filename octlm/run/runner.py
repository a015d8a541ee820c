"""Use cases that train: ``train`` and ``resume`` here, ``overfit`` in its own module, variations of one skeleton.

``run_experiment`` is that skeleton: load and register the config, take the experiment's lock,
let the variation validate and decide where to start (``Start``), prepare the data, hand the other
ranks of a data-parallel run what to train (``handoff``), drive one ``Session`` and report. Nothing
is deleted before everything is validated: a variation's ``discard`` (``--restart``, overfit's old
folder) runs only once the data is prepared and the state is built, so a typo in ``data.sources`` or
a device that is missing costs nothing. Ranks other than 0 skip all of it and follow rank 0. CLI
commands call exactly one of these and render what comes back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path

from octlm.config import Config
from octlm.core import layout
from octlm.core.errors import BadInput, Refused
from octlm.core.home import Home
from octlm.core.reporting import QuietReporter, Reporter
from octlm.data import fingerprints
from octlm.data.pipeline import PreparedData, prepare
from octlm.run.files import ExperimentFiles, Track
from octlm.run.handoff import Handoff, Relay, check_world_size, exit_code, follow
from octlm.run.keeper import CheckpointCadence, CheckpointKeeper
from octlm.run.restore import init_from, parent_records, restore
from octlm.run.session import Bookkeeping, Session
from octlm.run.summary import RunSummary
from octlm.runtime import distributed
from octlm.runtime import machine as runtime
from octlm.store import experiments
from octlm.store.registry import Registry
from octlm.train import canary, checkpoint
from octlm.train.state import TrainState

RESTART_TOKENIZER = "tokenizer.restart.json"  # where --restart trains the new tokenizer before the old one goes


@dataclass(frozen=True)
class Context:
    """What a variation of the skeleton may use while holding the experiment's lock."""

    home: Home
    registry: Registry
    files: ExperimentFiles
    config: Config
    reporter: Reporter
    relay: Relay


@dataclass
class Start:
    """Where a run starts: built by a variation once its input is validated."""

    track: Track
    until: int
    loaded: checkpoint.Loaded | None = None  # resume from this checkpoint, else step 0
    batch_size: int | None = None  # overfit trains on one block
    checkpoint_interval: int | None = None
    done: RunSummary | None = None  # nothing to train: report this instead
    select: Callable[[PreparedData], PreparedData] = field(default=lambda prepared: prepared)
    discard: Callable[[], None] | None = None  # what goes once everything is validated, before training
    tokenizer: Path | None = None  # where prepare finds or trains the tokenizer (default: the experiment's)
    reshard: bool = False  # continue a checkpoint of another world size (``resume --reshard``)
    also: frozenset[int] = frozenset()  # steps to checkpoint at besides the cadence (``train --checkpoint-at``)

    def cadence(self, config: Config) -> CheckpointCadence:
        """When this run checkpoints: every ``checkpoint.interval`` steps (overfit: at its end), at ``also`` and at
        ``until``."""
        return CheckpointCadence(self.checkpoint_interval or config.checkpoint.interval, self.until, self.also)


@dataclass
class Outcome:
    """What the skeleton ends with: a finished session, or a report when there was nothing to train."""

    done: RunSummary | None = None
    session: Session | None = None
    state: TrainState | None = None
    prepared: PreparedData | None = None
    follower: bool = False  # a rank other than 0: it trained what rank 0 handed it, and reports nothing
    rank: int = 0

    def report(self) -> RunSummary | None:
        if self.done is not None or self.follower:
            return self.done
        assert self.session is not None and self.state is not None
        return self.session.summary(self.state)


def run_experiment(
    home: Home,
    experiment_id: str,
    reporter: Reporter | None,
    kind: str,
    plan: Callable[[Context], Start],
    config: Config | None = None,
    registered: Config | None = None,
) -> Outcome:
    """The one skeleton of a training command: rank 0 (the only rank of one process) runs it, the other
    ranks of a data-parallel run follow what rank 0 hands them (``follow``). ``registered``: the experiment's
    config when the command has loaded it already (it is loaded once); ``config``: the variant to train when it
    is not that one (``overfit --steps``)."""
    ranks = distributed.current()
    relay, orderly = Relay(ranks), True  # orderly: every rank ends together, so leave after a barrier
    try:
        if not ranks.leader:
            follow(ranks)
            return Outcome(follower=True, rank=ranks.rank)
        try:
            outcome = _lead(home, experiment_id, reporter or QuietReporter(), kind, plan, (config, registered), relay)
        except BaseException as error:
            relay.stop(exit_code(error))
            raise
        relay.stop(0)  # nothing was trained: the other ranks end too
        return outcome
    except BaseException as error:
        orderly = distributed.orderly(error) or (ranks.leader and not relay.handed_off)
        raise error if orderly or not ranks.parallel else distributed.lost(error, ranks) from None
    finally:
        distributed.leave(wait=orderly)


def _lead(
    home: Home,
    experiment_id: str,
    reporter: Reporter,
    kind: str,
    plan: Callable[[Context], Start],
    configs: tuple[Config | None, Config | None],
    relay: Relay,
) -> Outcome:
    registered = configs[1] or experiments.load(home, experiment_id)
    config = configs[0] or registered  # overfit --steps trains a variant; the registry keeps the file's config
    home.ensure_writable()
    with Registry(home.registry) as registry:
        experiments.register(home, registry, registered)
        files = ExperimentFiles(home, experiment_id)
        with files.lock():
            context = Context(home, registry, files, config, reporter, relay)
            start = plan(context)
            if start.done is not None:
                return Outcome(done=start.done)
            config.training.check_split(relay.ranks.world_size, start.batch_size)
            return _train_session(context, start, kind)


def _train_session(context: Context, start: Start, kind: str) -> Outcome:
    """Prepare the data and build the state (validating everything), discard, then train in one session."""
    try:
        tokenizer = start.tokenizer or context.files.tokenizer
        device = runtime.prepare_process(context.config)  # device, profile, threads, determinism, allocator
        canary.require_golden(context.config)  # under a tier with golden digests: this machine computes its bits
        if (taken := runtime.threads_taken()) is not None:
            context.reporter.note(
                f"{taken.said()}: canonical pieces train the same bits at any thread count, so each start takes the "
                "cores free then (training.threads or OMP_NUM_THREADS fixes the count)"
            )
        prepared = start.select(prepare(context.home, context.config, tokenizer, context.reporter, device=device))
        prepared = dataclasses.replace(prepared, world_size=context.relay.ranks.world_size)
        state, forked = _build_state(context, start, prepared)
        if start.discard is not None:  # only now: everything above validated what it could
            start.discard()
    except BaseException:
        if start.tokenizer is not None:  # a tokenizer trained for a restart that did not go ahead
            start.tokenizer.unlink(missing_ok=True)
        raise
    for note in prepared.notes:
        moved = start.tokenizer is not None  # the tokenizer a restart trained is the experiment's now
        context.reporter.note(note.replace(str(start.tokenizer), str(context.files.tokenizer)) if moved else note)
    _hand_off(context, start, prepared, state)
    books = Bookkeeping(context.home.registry, context.reporter)
    try:
        session = _session(context, start, kind, prepared, books)
        session.run(
            state,
            train_blocks=prepared.train_blocks,
            eval_blocks=prepared.eval_blocks,
            resumed_from=start.loaded.path if start.loaded else None,
            forked_from=forked,
            inherited=parent_records(context.home, prepared.config) if forked else None,
        )
    finally:
        books.close()
    return Outcome(session=session, state=state, prepared=prepared)


def _hand_off(context: Context, start: Start, prepared: PreparedData, state: TrainState) -> None:
    """The other ranks of a data-parallel run (if any) learn what to train, once everything is validated."""
    if context.relay.ranks.parallel:
        handoff = Handoff.of(
            state,
            prepared.train_blocks,
            cadence=start.cadence(context.config),
            batch_size=start.batch_size,
            loaded=start.loaded,
            reshard=start.reshard,
        )
        context.relay.hand_off(handoff)


def _build_state(context: Context, start: Start, prepared: PreparedData) -> tuple[TrainState, Path | None]:
    """The state to train from: a checkpoint's, a fork's step 0 (``init``, main track only), or fresh."""
    ranks = context.relay.ranks
    if start.loaded is not None:
        return restore(prepared, start.loaded, context.reporter, ranks, start.reshard, context.home), None
    state = TrainState.fresh(prepared.config, prepared.device, len(prepared.train_blocks), start.batch_size, ranks)
    if not prepared.config.init.sha256 or start.track.kind != context.files.main.kind:
        return state, None
    return state, init_from(state, context.home, prepared.fingerprints, context.reporter)


def _session(context: Context, start: Start, kind: str, prepared: PreparedData, books: Bookkeeping) -> Session:
    cadence = start.cadence(context.config)
    keeper = CheckpointKeeper(context.files, start.track, books, context.config, prepared.fingerprints, cadence)
    session = Session(
        registry=books,
        config=context.config,
        kind=kind,
        track=start.track,
        keeper=keeper,
        fingerprints=prepared.fingerprints,
        reporter=context.reporter,
        home_root=context.home.root,
        ranks=context.relay.ranks,
        resharded_from=start.loaded.record.world_size if start.loaded is not None and start.reshard else None,
        eval_split=prepared.eval_split,
    )
    if start.loaded is not None:
        session.latest = start.loaded.record.metrics
    return session


def check_until(until: int | None, config: Config, start: int = 0) -> int:
    if until is None:
        return config.training.steps
    if not start < until <= config.training.steps:
        raise BadInput(
            f"--until {until}: must be above the current step {start} "
            f"and at most training.steps ({config.training.steps})"
        )
    return until


# ---------------------------------------------------------------- train


def train(
    home: Home,
    experiment_id: str,
    *,
    restart: bool = False,
    until: int | None = None,
    reporter: Reporter | None = None,
    confirm: Callable[[list[str]], bool] | None = None,
    config: Config | None = None,
    checkpoint_at: Collection[int] = (),
) -> RunSummary | None:
    """Train from step 0. ``--restart`` discards the experiment's files once everything is validated;
    ``confirm`` sees the list first (paths relative to the home) and may cancel; the result's
    ``discarded`` lists what went. ``config``: the experiment's, when the caller has loaded it (None on a rank
    other than 0, which reports nothing). ``checkpoint_at``: steps to checkpoint at besides the cadence."""
    discarded: list[str] = []

    def plan(context: Context) -> Start:
        files = context.files
        existing = layout.checkpoints(files.folder)
        if existing and not restart:
            raise Refused(
                f"{experiment_id} already has checkpoints (newest: step {existing[-1][0]}): continue with "
                f"`octlm resume {experiment_id}` or discard them with `octlm train {experiment_id} --restart`"
            )
        final = check_until(until, context.config)  # bad input must not cost the user their checkpoints
        runtime.device_for(context.config)
        also = CheckpointCadence.steps(checkpoint_at, final)
        if not restart:
            return Start(files.main, final, also=also)
        fresh = files.folder / RESTART_TOKENIZER  # trained while the old one still stands
        fresh.unlink(missing_ok=True)  # left by a restart that stopped halfway
        return Start(
            files.main, final, discard=lambda: _discard(context, fresh, confirm, discarded), tokenizer=fresh, also=also
        )

    result = run_experiment(home, experiment_id, reporter, "train", plan, registered=config).report()
    return dataclasses.replace(result, discarded=tuple(discarded)) if result and restart else result


def _discard(context: Context, fresh: Path, confirm: Callable[[list[str]], bool] | None, out: list[str]) -> None:
    """``--restart``'s discard, once asked: the old files go and the freshly trained tokenizer takes their place."""
    files = context.files
    listed = [item for item in files.discardable() if item != files.relative(fresh)]
    if listed and confirm is not None and not confirm(listed):
        fresh.unlink(missing_ok=True)
        raise Refused("--restart cancelled: nothing was discarded")
    files.discard(context.registry)
    fresh.replace(files.tokenizer)
    out.extend(listed)
    for item in listed or ["--restart: nothing to discard"]:  # said now, before the new run's first checkpoint
        context.reporter.note(f"discarded {item}" if listed else item)


# ---------------------------------------------------------------- resume


def resume(
    home: Home,
    experiment_id: str,
    *,
    step: int | None = None,
    until: int | None = None,
    reshard: bool = False,
    reporter: Reporter | None = None,
    config: Config | None = None,
) -> RunSummary | None:
    """Continue from the newest valid checkpoint (or ``step``). A checkpoint of another world size is refused
    unless ``reshard``: then it continues (model, optimizer, sampler) with every rank's streams reseeded."""

    def plan(context: Context) -> Start:
        files, config = context.files, context.config
        for leftover in layout.clean_leftovers(files.folder):
            context.reporter.note(f"removed leftover {leftover.name}")
        loaded = files.newest_valid(context.registry, step)
        if loaded is None:
            context.reporter.note(f"{experiment_id} has no checkpoint: starting from step 0")
            return Start(files.main, check_until(until, config))
        for reason in loaded.skipped:
            context.reporter.warn(f"skipped an invalid checkpoint: {reason}; falling back to {loaded.path.name}")
        check_owner(loaded, experiment_id, former=context.registry.former_ids(experiment_id))
        if loaded.record.step >= config.training.steps and until is None:
            return Start(files.main, loaded.record.step, done=_complete(context, loaded))
        final = check_until(until, config, loaded.record.step)
        resharded = check_world_size(loaded, context.relay.ranks.world_size, reshard)
        return Start(files.main, final, loaded=loaded, reshard=resharded)

    return run_experiment(home, experiment_id, reporter, "resume", plan, registered=config).report()


def check_owner(
    loaded: checkpoint.Loaded, experiment_id: str, kind: str = "train", former: Collection[str] = ()
) -> None:
    """Refuse a checkpoint that another experiment wrote, or another track (an overfit one in the main
    folder). An empty ``experiment`` (an early v1 file) names no owner and is not refused for it; nor does one
    of ``former``, the IDs this experiment had before it was unpacked under its own (``unpack --as``, recorded
    in the registry: ``Registry.former_ids``)."""
    record, name = loaded.record, loaded.path.name
    if record.experiment and record.experiment != experiment_id and record.experiment not in former:
        raise Refused(
            f"{name} belongs to {record.experiment}, not {experiment_id}: it will not be used; "
            f"move it out of {loaded.path.parent}"
        )
    if record.kind != kind:
        raise Refused(
            f"{name} was written by {experiment_id}'s {record.kind} run, not its {kind} run: it will not be used; "
            f"move it out of {loaded.path.parent}"
        )


def _complete(context: Context, loaded: checkpoint.Loaded) -> RunSummary:
    """The final checkpoint, once it is shown to be this config's, data's and tokenizer's."""
    record, config = loaded.record, context.config
    current = fingerprints.now(context.home, config, context.files.tokenizer)
    current = dataclasses.replace(current, config=config.fingerprint_at(record.world_size))
    checkpoint.check_fingerprints(record, config=config, current=current, path=loaded.path)
    context.reporter.note(f"{config.id} is already complete at step {record.step}: nothing to do")
    return RunSummary(
        id=config.id,
        kind="resume",
        status="complete",
        start_step=record.step,
        end_step=record.step,
        steps=config.training.steps,
        tokens=record.tokens,
        seconds=0.0,
        tokens_per_second=None,
        checkpoint=loaded.path,
        metrics=record.metrics,
        fingerprints=record.fingerprints,
    )
