"""``octlm work`` (the queue's workers: one in this process, or a pool of them) and ``octlm watch`` (the live view of
experiments and sweeps). Torch-free at import: ``work`` imports its worker (and torch) inside the command, after
pinning the trials' determinism profile.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from octlm.tasks.sweeps.working.trial_log import Tally

from octlm.cli import render
from octlm.cli.common import JsonOption, QuietOption, handled, home_of
from octlm.core.errors import BadInput, Interrupted
from octlm.core.home import Home
from octlm.core.reporting import counted

SweepsArgument = Annotated[
    list[str] | None,
    typer.Argument(metavar="[SWEEP]...", help="The sweeps to work on (default: every sweep).", show_default=False),
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
RayOption = Annotated[
    str | None,
    typer.Option(
        "--ray",
        metavar="ADDRESS",
        help=(
            "Train the trials as tasks on a Ray cluster: its head's HOST:PORT; auto: RAY_ADDRESS, else the Ray "
            "running on this box; local: a Ray of this box's cores started for the call. Each trial asks for "
            "--threads CPUs (default 1). Needs octlm[ray]."
        ),
        show_default=False,
    ),
]
UntilEmptyOption = Annotated[
    bool, typer.Option("--until-empty", help="Stop once no trial is queued or running (default: wait for more).")
]


@handled
def work(
    ctx: typer.Context,
    sweeps: SweepsArgument = None,
    workers: WorkersOption = 1,
    threads: ThreadsOption = None,
    until_empty: UntilEmptyOption = False,
    ray: RayOption = None,
    as_json: JsonOption = False,
    quiet: QuietOption = False,
) -> None:
    """Train the queue's trials: claim the next one in the registry, train it as resume would, record it, repeat.
    SIGTERM: the running trial checkpoints, its claim is released, exit 143. A trial that failed: exit 5.
    With --ray, each trial is a Ray task on the cluster's nodes, its checkpoints shipped back as it trains."""
    from octlm.tasks.sweeps.working import pool
    from octlm.tasks.sweeps.working.trial_log import Tally

    home, names = home_of(ctx), tuple(sweeps or ())
    if not 1 <= workers <= 256:
        raise BadInput(f"--workers {workers}: give 1 to 256")
    if threads is not None and threads < 1:
        raise BadInput(f"--threads {threads}: give 1 or more")
    if ray is not None:
        if workers > 1:
            raise BadInput("--workers with --ray: Ray places the trials; give --threads for each trial's share")
        _on_ray(home, names, ray, threads or 1, until_empty, as_json, quiet)
    if workers > 1:
        code, total = pool.run(home.root, names, workers, threads or 0, until_empty, quiet, render.info)
        if total is not None:
            _worked(total, names, as_json, quiet)
        raise typer.Exit(code)
    _pin(home, names)
    from octlm.tasks.sweeps.working import worker  # imports torch when the first trial trains

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


def _on_ray(
    home: Home, names: tuple[str, ...], address: str, threads: int, until_empty: bool, as_json: bool, quiet: bool
) -> None:
    """``work --ray``: the driver (``tasks/sweeps/working/driver``) until the queue is empty or a signal stops it, its
    trials in the live view on a terminal (``live/on_ray``), its lines timestamped elsewhere; ``--json``: work's
    document with the Ray path's ``events``."""
    from octlm.cli.live.on_ray import RayView, stdout_to_stderr
    from octlm.runtime.load import cores
    from octlm.tasks.sweeps.working import driver
    from octlm.tasks.sweeps.working.trial_log import Tally

    options = driver.RayOptions(names, address, threads, until_empty, cores())
    tally, view = Tally(events=[]), RayView(home, names, quiet)
    try:
        with stdout_to_stderr():  # Ray's own words never mix with --json's document
            driver.work(home, options, view.say, tally, view.show)
    except Interrupted:
        view.close()
        _worked(tally, names, as_json, quiet)
        raise
    finally:
        view.close()
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
    from octlm.tasks.sweeps.working import worker

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
