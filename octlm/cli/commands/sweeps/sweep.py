"""The ``octlm sweep`` group: ``new`` (its ``--sampler`` choices and their words read from the samplers' table),
``status`` (the queue, halving's decisions and the sweep's history in its commands' words), ``extend``, ``retry``,
``pack`` and ``unpack`` (a job array's node-local homes). Torch-free at import.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from octlm.store.sweeps.records import DecisionRow, Extended, Retried

from octlm.cli import render
from octlm.cli.common import JsonOption, SetOption, handled, home_of
from octlm.core.errors import BadInput
from octlm.core.home import DEFAULT_PREFIX, validate_prefix
from octlm.core.reporting import counted
from octlm.tasks.sweeps.planning import samplers  # torch-free: the --sampler option is made from its table

NameArgument = Annotated[str, typer.Argument(metavar="NAME", help="The sweep, e.g. lr-2026 (lowercase).")]
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
        help="A numeric key drawn between LOW and HIGH (log-uniformly with :log), by --sampler "
        f"{samplers.readers('ranges')} (--random N chooses random).",
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
        metavar="|".join(samplers.SAMPLERS),
        help="; ".join(f"{name}: {sampler.help}" for name, sampler in samplers.SAMPLERS.items())
        + " (default: random with --random N, else grid).",
        show_default=False,
    ),
]
TrialsOption = Annotated[
    int | None,
    typer.Option(
        "--trials",
        metavar="N",
        help=f"With --sampler {samplers.readers('trials')}: configurations in all.",
        show_default=False,
    ),
]
ParallelOption = Annotated[
    int,
    typer.Option(
        "--parallel",
        metavar="K",
        help=f"With --sampler {samplers.readers('parallel')}: configurations asked for ahead.",
    ),
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
SweepSeedOption = Annotated[
    int, typer.Option("--seed", metavar="N", help=f"Seed of the draws of --sampler {samplers.readers('seed')}.")
]
PrefixOption = Annotated[
    str | None,
    typer.Option(
        "--id-prefix", metavar="PREFIX", help="The trials' IDs: PREFIX then NNN (default: EXP-).", show_default=False
    ),
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
    from octlm.tasks.sweeps.planning import plan
    from octlm.tasks.sweeps.planning.spec import SweepRequest

    request = SweepRequest(
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
    from octlm.tasks.sweeps.upkeep import mending

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
    from octlm.tasks.sweeps.upkeep import mending

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

    from octlm.tasks.sweeps.upkeep import shipping

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

    from octlm.tasks.sweeps.upkeep import shipping

    result = shipping.unpack(home_of(ctx), Path(folder))
    if as_json:
        render.emit_json(result)
        return
    counts = {state: sum(1 for v in result["trials"].values() if v == state) for state in ("new", "further", "kept")}
    said = ", ".join(f"{n} {state}" for state, n in counts.items() if n) or "no trials"
    render.info(f"sweep {result['sweep']}: {said}" + ("" if result["changed"] else "; nothing changed"))
