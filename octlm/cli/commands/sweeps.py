"""Many experiments: ``sweep new``, ``sweep status``, ``sweep pack`` / ``sweep unpack`` (a job array's node-local
homes), ``work`` (the queue's workers) and ``watch`` (the live view). Torch-free at import: ``work`` imports its
worker (and torch) inside the command, after pinning the trials' determinism profile.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from octlm.store.sweeps.records import DecisionRow, Extended, Retried
    from octlm.tasks.sweeps.trial_log import Tally

from octlm.cli import render
from octlm.cli.common import JsonOption, QuietOption, SetOption, handled, home_of
from octlm.core.errors import BadInput, Interrupted
from octlm.core.home import DEFAULT_PREFIX, Home, validate_prefix
from octlm.core.reporting import counted

NameArgument = Annotated[str, typer.Argument(metavar="NAME", help="The sweep, e.g. lr-2026 (lowercase).")]
SweepsArgument = Annotated[
    list[str] | None,
    typer.Argument(metavar="[SWEEP]...", help="The sweeps to work on (default: every sweep).", show_default=False),
]
FromOption = Annotated[str, typer.Option("--from", metavar="ID", help="The experiment every trial is made from.")]
GridOption = Annotated[
    list[str] | None,
    typer.Option(
        "--grid",
        metavar="KEY=V1,V2,...",
        help="Try each value of KEY (repeatable: the product of every --grid).",
        show_default=False,
    ),
]
RangeOption = Annotated[
    list[str] | None,
    typer.Option(
        "--range",
        metavar="KEY=LOW:HIGH[:log]",
        help="A numeric key drawn between LOW and HIGH (log-uniformly with :log), by --random N or --sampler tpe.",
        show_default=False,
    ),
]
RandomOption = Annotated[
    int, typer.Option("--random", metavar="N", help="N seeded draws of the --range keys (crossed with the grid).")
]
SeedsOption = Annotated[
    int, typer.Option("--seeds", metavar="S", help="Replicates of each configuration, differing only in training.seed.")
]
SamplerOption = Annotated[
    str | None,
    typer.Option(
        "--sampler",
        metavar="grid|random|tpe",
        help="grid and random make every trial now; tpe (Optuna) asks for new ones as earlier ones finish.",
        show_default=False,
    ),
]
TrialsOption = Annotated[
    int | None,
    typer.Option("--trials", metavar="N", help="With --sampler tpe: configurations in all.", show_default=False),
]
ParallelOption = Annotated[
    int, typer.Option("--parallel", metavar="K", help="With --sampler tpe: configurations asked for ahead.")
]
MetricOption = Annotated[
    str,
    typer.Option("--metric", metavar="NAME", help="What ranks trials, lower is better: eval_loss, bits_per_byte, ..."),
]
HalvingOption = Annotated[
    str | None,
    typer.Option(
        "--halving",
        metavar="RUNG,RUNG,...",
        help="Successive halving: every trial trains to the first rung, the best --keep fraction resumes to the "
        "next (training.steps becomes the last rung; each rung a multiple of training.eval_interval).",
        show_default=False,
    ),
]
KeepOption = Annotated[float, typer.Option("--keep", metavar="FRACTION", help="With --halving: the share promoted.")]
SweepSeedOption = Annotated[int, typer.Option("--seed", metavar="N", help="Seed of the random draws and of Optuna.")]
PrefixOption = Annotated[
    str | None,
    typer.Option(
        "--id-prefix", metavar="PREFIX", help="The trials' IDs: PREFIX then NNN (default: EXP-).", show_default=False
    ),
]
WorkersOption = Annotated[
    int,
    typer.Option("--workers", metavar="N", help="Workers on this box, each with its share of the cores (or a GPU)."),
]
ThreadsOption = Annotated[
    int | None,
    typer.Option(
        "--threads", metavar="N", help="Threads of each worker (default: the cores // --workers).", show_default=False
    ),
]
UntilEmptyOption = Annotated[
    bool, typer.Option("--until-empty", help="Stop once no trial is queued or running (default: wait for more).")
]


def _prefix(option: str | None) -> str:
    if option is not None:
        return validate_prefix(option, "--id-prefix")
    variable = os.environ.get("OCTLM_ID_PREFIX", "")
    return validate_prefix(variable, "OCTLM_ID_PREFIX") if variable else DEFAULT_PREFIX


@handled
def sweep_new(
    ctx: typer.Context,
    name: NameArgument,
    base: FromOption,
    grid: GridOption = None,
    ranges: RangeOption = None,
    random: RandomOption = 0,
    seeds: SeedsOption = 1,
    sampler: SamplerOption = None,
    trials: TrialsOption = None,
    parallel: ParallelOption = 2,
    metric: MetricOption = "eval_loss",
    halving: HalvingOption = None,
    keep: KeepOption = 0.5,
    seed: SweepSeedOption = 0,
    overrides: SetOption = None,
    id_prefix: PrefixOption = None,
    as_json: JsonOption = False,
) -> None:
    """Create a sweep: its trials as experiments (tagged sweep:NAME, each its own config), in one transaction."""
    from octlm.tasks.sweeps import plan, samplers
    from octlm.tasks.sweeps.spec import Request

    request = Request(
        name=name,
        base=base,
        grid=grid or (),
        ranges=ranges or (),
        random=random,
        seeds=seeds,
        sampler=sampler,
        trials=trials,
        parallel=parallel,
        metric=metric,
        halving=halving,
        keep=keep,
        seed=seed,
        overrides=overrides or (),
        prefix=_prefix(id_prefix),
    )
    made = plan.create(home_of(ctx), request)
    if as_json:
        render.emit_json(made)
        return
    for trial in made["trials"]:
        print(trial["id"])
    asks = " (more are asked for as these finish)" if samplers.SAMPLERS[made["spec"]["sampler"]].asks else ""
    them = "it" if len(made["trials"]) == 1 else "them"
    render.info(f"sweep {name}: {counted(len(made['trials']), 'trial')}{asks}; train {them} with `octlm work {name}`")


@handled
def sweep_status(ctx: typer.Context, name: NameArgument, as_json: JsonOption = False) -> None:
    """Show a sweep's queue: queued, running (where), done, failed (with its log's last lines), stopped."""
    from octlm.views.sweeps import status

    found = status.status(home_of(ctx), name)
    if as_json:
        render.emit_json(found)
        return
    counts = ", ".join(f"{state} {n}" for state, n in found["counts"].items() if n or state != "lost")
    print(render.plain(f"sweep {found['name']} (from {found['base']}): {found['description']}; {counts}"))
    rows = [
        (t["id"], t["status"], _steps(t), t["rung"], t["value"], _params(t["params"]), t["seed"], t["where"] or "-")
        for t in found["trials"]
    ]
    render.print_table(("ID", "status", "step", "rung", "value", "params", "seed", "where"), rows)
    for decision in found["decisions"]:
        print(render.plain(_decision(decision)))
    for event in found["spec"].get("history", []):
        print(render.plain(_event(event), multiline=True))
    for trial in found["trials"]:
        if trial["status"] == "failed" and trial["error"]:
            tail = "\n".join(f"  {line}" for line in trial["error"].splitlines()[-5:])
            print(
                render.plain(f"{trial['id']} failed; the last lines of runs/{trial['id']}.log:\n{tail}", multiline=True)
            )


@handled
def sweep_extend(
    ctx: typer.Context,
    name: NameArgument,
    seeds: Annotated[
        int | None,
        typer.Option("--seeds", metavar="S", help="Seeds per configuration, in all (more than the sweep has)."),
    ] = None,
    grid: Annotated[
        list[str] | None,
        typer.Option(
            "--grid", metavar="KEY=V1,V2,...", help="More values of one of the sweep's grid keys (repeatable)."
        ),
    ] = None,
    draws: Annotated[int, typer.Option("--random", metavar="N", help="N more seeded draws of the --range keys.")] = 0,
    as_json: JsonOption = False,
) -> None:
    """Grow a sweep: more seeds, grid values or draws, as new trials; nothing done is renumbered or trained again."""
    from octlm.tasks.sweeps import mending

    if seeds is None and not grid and not draws:
        raise BadInput("sweep extend: give --seeds S, --grid KEY=V1,V2,... or --random N")
    event = mending.extend(home_of(ctx), name, seeds, tuple(grid or ()), draws)
    if as_json:
        render.emit_json(event)
        return
    for experiment_id in event["trials"]:
        print(experiment_id)
    made = counted(len(event["trials"]), "new trial") if event["trials"] else "no new trial (it has them all)"
    them = "it" if len(event["trials"]) == 1 else "them"
    render.info(f"sweep {name}: {made}; train {them} with `octlm work {name}`")


@handled
def sweep_retry(
    ctx: typer.Context,
    name: NameArgument,
    failed: Annotated[bool, typer.Option("--failed", help="Queue the failed trials again (the default).")] = False,
    stopped: Annotated[
        bool, typer.Option("--stopped", help="Queue the trials halving stopped again, to the last rung.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Queue a sweep's failed (or stopped) trials to run once more, each from its newest checkpoint."""
    from octlm.tasks.sweeps import mending

    chosen = tuple(status for status, asked in (("failed", failed), ("stopped", stopped)) if asked) or ("failed",)
    event = mending.retry(home_of(ctx), name, chosen)
    if as_json:
        render.emit_json(event)
        return
    for line in _retried(event):  # one line a trial: its ID first, then why it had stopped
        print(render.plain(line))
    if not event["trials"]:
        render.info(f"sweep {name}: no {' or '.join(chosen)} trial to retry (nothing was changed)")
        return
    count = len(event["trials"])
    them = "it" if count == 1 else "them"
    render.info(f"sweep {name}: {counted(count, 'trial')} queued again; train {them} with `octlm work {name}`")


def _retried(event: Retried) -> list[str]:
    """Each trial ``sweep retry`` queued again, on one line: ``EXP-003 (failed): why``, the reason once and short
    (an older octlm's event kept its log's whole last line)."""
    from octlm.store.sweeps.queue import reason_of

    return [
        f"{i} (failed): {reason_of(t['reason'])}"
        if t["was"] == "failed"
        else f"{i} ({t['was']}): on to step {t['target_step']}"
        for i, t in event["trials"].items()
    ]


def _event(event: Retried | Extended) -> str:
    """A sweep's history in its commands' own words: ``extend --seeds 3 --grid KEY=V1,V2 (4 new trials)``, or
    ``retry --failed`` and each trial it queued again, on a line of its own."""
    if event["event"] == "extended":
        return f"{event['at']}: {_extended(event)}"
    asked = event.get("asked") or sorted({t["was"] for t in event["trials"].values()})
    head = f"{event['at']}: retry {' '.join(f'--{status}' for status in asked)}"
    return "\n".join([head, *(f"  {line}" for line in _retried(event))])


def _extended(event: Extended) -> str:
    """``extend --seeds 3 --grid training.learning_rate=0.0003,0.001 (4 new trials)``, as the options were given
    (an older octlm's event says what the sweep had grown to)."""
    added = counted(event["added"], "new trial")
    asked = event.get("asked")
    if asked is None:
        grid = "".join(f", {key}={_values(values)}" for key, values in event["grid"].items())
        return f"extend ({added}; now {counted(event['seeds'], 'seed')}{grid})"
    options = [f"--seeds {asked['seeds']}"] if asked["seeds"] is not None else []
    options += [f"--grid {key}={_values(values)}" for key, values in asked["grid"].items()]
    options += [f"--random {asked['random']}"] if asked["random"] else []
    return f"extend {' '.join(options)} ({added})"


def _values(values: list[Any]) -> str:
    return ",".join(render.shown_value(value) for value in values)


def _decision(decision: DecisionRow) -> str:
    """Successive halving's decision at a rung, in words: who went on, who stopped, by their metric."""
    said: dict[bool, list[str]] = {True: [], False: []}
    for group in decision["ranking"]:
        value = "-" if group["value"] is None else f"{group['value']:.4f}"
        late = ", placed after a retry" if group.get("late") else ""
        said[bool(group.get("promoted"))].append(f"{', '.join(group['trials'])} ({value}{late})")
    promoted, stopped = ("; ".join(said[flag]) or "none" for flag in (True, False))
    return f"rung {decision['rung']} (step {decision['step']}): promoted {promoted}; stopped {stopped}"


def _steps(trial: Any) -> str:
    return f"{trial['step'] or 0}/{trial['target_step']}"


def _params(params: dict[str, Any]) -> str:
    return " ".join(f"{key}={render.shown_value(value)}" for key, value in params.items()) or "-"


@handled
def work(
    ctx: typer.Context,
    sweeps: SweepsArgument = None,
    workers: WorkersOption = 1,
    threads: ThreadsOption = None,
    until_empty: UntilEmptyOption = False,
    as_json: JsonOption = False,
    quiet: QuietOption = False,
) -> None:
    """Train the queue's trials: claim the next one in the registry, train it as resume would, record it, repeat.
    SIGTERM: the running trial checkpoints, its claim is released, exit 143. A trial that failed: exit 5."""
    from octlm.tasks.sweeps import pool
    from octlm.tasks.sweeps.trial_log import Tally

    home, names = home_of(ctx), tuple(sweeps or ())
    if not 1 <= workers <= 256:
        raise BadInput(f"--workers {workers}: give 1 to 256")
    if threads is not None and threads < 1:
        raise BadInput(f"--threads {threads}: give 1 or more")
    if workers > 1:
        code, total = pool.run(home.root, names, workers, threads or 0, until_empty, quiet, render.info)
        if total is not None:
            _worked(total, names, as_json, quiet)
        raise typer.Exit(code)
    _pin(home, names)
    from octlm.tasks.sweeps import worker  # imports torch when the first trial trains

    say = (lambda _: None) if quiet else render.info
    options = worker.Options(names, until_empty, pool.share(1, threads or 0), _device(), worker.POLL_S)
    tally = Tally.resumed()
    try:
        worker.work(home, options, say, tally)
    except Interrupted:
        tally.status = "interrupted"  # --json still says what was done; the signal's own line says the rest
        _worked(tally, names, as_json, quiet)
        raise
    _worked(tally, names, as_json, quiet)
    raise typer.Exit(tally.exit_code)


def _worked(tally: Tally, names: tuple[str, ...], as_json: bool, quiet: bool) -> None:
    """What ``work`` did, once: its document with ``--json``, else one line when the queue is empty (a worker stopped
    by a signal has said so), naming the failed trials and where to look."""
    if as_json:
        render.emit_json(tally.as_json())
        return
    if quiet or tally.status != "empty":
        return
    by = f" by {tally.workers} workers" if tally.workers > 1 else ""
    failed = f"{len(tally.failed)} failed"
    if tally.failed:
        sweep = names[0] if len(names) == 1 else "NAME"
        failed += f": {', '.join(tally.failed)} (why: `octlm sweep status {sweep}`; again: `octlm sweep retry {sweep}`)"
    render.info(f"work: {counted(len(tally.done), 'trial')} done{by}, {failed}; the queue is empty")


def _device() -> str:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    return f"gpu {visible}" if visible and "," not in visible and visible != "-1" else "cpu"


def _pin(home: Home, names: tuple[str, ...]) -> None:
    """Pin the determinism tier of the first queued trial before torch loads; a trial of another tier is left for a
    fresh process of this worker (``worker.runnable``, ``worker.restart``)."""
    from octlm.runtime import determinism
    from octlm.store.registry import Registry
    from octlm.tasks.sweeps import worker

    with Registry(home.registry, create=False) as registry:
        ids = worker.sweep_ids(registry, names) or [row["id"] for row in registry.sweeps()]
        configs = registry.configs()
        queued = [t["experiment_id"] for i in ids for t in registry.trials(i) if t["status"] in ("queued", "running")]
    if queued and configs.get(queued[0]):
        from octlm.config import from_dict
        from octlm.core.errors import OctlmError

        try:
            determinism.pin(from_dict(configs[queued[0]], "registry"))
        except OctlmError:
            return  # its config is wrong: training it says so


FolderOption = Annotated[
    str, typer.Option("--output", "-o", metavar="DIR", help="The folder to write the sweep to (created).")
]
ShardsOption = Annotated[
    int, typer.Option("--shards", metavar="N", help="Split the trials into N folders shard-0 ... (trial i in i mod N).")
]
FolderArgument = Annotated[str, typer.Argument(metavar="DIR", help="A folder written by `octlm sweep pack`.")]


@handled
def sweep_pack(
    ctx: typer.Context, name: NameArgument, output: FolderOption, shards: ShardsOption = 1, as_json: JsonOption = False
) -> None:
    """Write a sweep (its rows and each trial's pack) to a folder, in N shards, for node-local homes."""
    from pathlib import Path

    from octlm.tasks.sweeps import shipping

    if not output.strip():
        raise BadInput("-o '': give the folder to write the sweep to, e.g. -o /shared/lr")
    result = shipping.pack(home_of(ctx), name, Path(output), shards)
    if as_json:
        render.emit_json(result)
    else:
        packed = counted(len(result["trials"]), "trial")
        render.info(f"sweep {name}: {packed} packed into {', '.join(result['folders'])}")


@handled
def sweep_unpack(ctx: typer.Context, folder: FolderArgument, as_json: JsonOption = False) -> None:
    """Add a packed sweep (or one shard of it) to this home: every trial's pack, then its rows (again: nothing)."""
    from pathlib import Path

    from octlm.tasks.sweeps import shipping

    result = shipping.unpack(home_of(ctx), Path(folder))
    if as_json:
        render.emit_json(result)
        return
    counts = {state: sum(1 for v in result["trials"].values() if v == state) for state in ("new", "further", "kept")}
    said = ", ".join(f"{n} {state}" for state, n in counts.items() if n) or "no trials"
    render.info(f"sweep {result['sweep']}: {said}" + ("" if result["changed"] else "; nothing changed"))


WatchArgument = Annotated[
    list[str] | None,
    typer.Argument(
        metavar="[ID | SWEEP]...",
        help="Experiments and sweeps to watch (default: every running experiment and busy sweep).",
        show_default=False,
    ),
]
IntervalOption = Annotated[float, typer.Option("--interval", metavar="SECONDS", help="How often to look again.")]
OnceOption = Annotated[bool, typer.Option("--once", help="Print what it sees once, then exit.")]


@handled
def watch(
    ctx: typer.Context, targets: WatchArgument = None, interval: IntervalOption = 1.0, once: OnceOption = False
) -> None:
    """Watch experiments and sweeps live: step, loss, tokens/s, ETA and a sparkline each; each sweep's queue.
    Read-only, never takes a lock; off a terminal one line per change; Ctrl-C leaves (exit 0)."""
    from octlm.cli.live import watch as live

    if not 0.05 <= interval <= 3600:
        raise BadInput(f"--interval {interval}: give 0.05 to 3600 seconds")
    raise typer.Exit(live.watch(home_of(ctx), tuple(targets or ()), interval, once))


COMMANDS: dict[str, Callable[..., Any]] = {"work": work, "watch": watch}
SWEEP_COMMANDS: dict[str, Callable[..., Any]] = {
    "new": sweep_new,
    "status": sweep_status,
    "extend": sweep_extend,
    "retry": sweep_retry,
    "pack": sweep_pack,
    "unpack": sweep_unpack,
}
