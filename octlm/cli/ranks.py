"""The options that spread a command over several processes (``--nproc``, ``--nnodes``, ``--node-rank``,
``--rdzv-endpoint``), and the step that starts the ranks instead of running the command here.

A rank runs the same command line without these options (``rank_argv``); it finds its place in the
environment the launcher sets, as it does under ``torchrun``.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from octlm.cli.common import home_of
from octlm.config import Config
from octlm.core.errors import BadInput
from octlm.core.reporting import counted
from octlm.runtime import launch
from octlm.store import experiments

NprocOption = Annotated[
    int,
    typer.Option(
        "--nproc",
        metavar="N",
        help="Processes (ranks) on this box; data parallel, training.batch_size stays the global batch.",
    ),
]
NnodesOption = Annotated[
    int, typer.Option("--nnodes", metavar="M", help="Boxes taking part (each runs this command with --nproc).")
]
NodeRankOption = Annotated[
    int, typer.Option("--node-rank", metavar="K", help="This box's place, 0 to M-1; node 0 holds rank 0 and its home.")
]
EndpointOption = Annotated[
    str,
    typer.Option(
        "--rdzv-endpoint",
        metavar="HOST:PORT",
        help="Where the boxes meet: node 0's address and a free port, the same on every node.",
        show_default=False,
    ),
]
LAUNCH_PARAMETERS = frozenset({"nproc", "nnodes", "node_rank", "rdzv_endpoint"})


def start_ranks(ctx: typer.Context, experiment_id: str, spec: launch.Launch, config: Config | None = None) -> None:
    """When more than one rank is asked for and this process is not a rank: check what can be checked here,
    start the ranks, and end with their exit code. Otherwise return and run the command in this process."""
    if launch.launched():
        _check_group(spec)
        return
    if not spec.wanted:
        return
    if spec.node_rank == 0:  # the box with the home: a bad ID or batch is one line before any rank starts
        config = config or experiments.load(home_of(ctx), experiment_id)  # None: the file's error, in one line
        config.training.check_split(spec.world_size)
    raise typer.Exit(launch.run(spec, rank_argv(ctx), f"octlm-{ctx.info_name}-{experiment_id}"))


def _check_group(spec: launch.Launch) -> None:
    """Under ``torchrun`` the options are the launcher's to give; given anyway, they must agree with it."""
    world = launch.world().world_size
    if spec.world_size > 1 and spec.world_size != world:
        raise BadInput(
            f"--nproc {spec.nproc} x --nnodes {spec.nnodes}: this process is one of {counted(world, 'rank')} started "
            "by another launcher; leave the launch options to it"
        )


def rank_argv(ctx: typer.Context) -> list[str]:
    """The command line a rank runs: the root ``--home``, the command and its parameters, less the launch options."""
    home = (ctx.obj or {}).get("home")
    argv = ["--home", str(home)] if home else []
    argv.append(str(ctx.info_name))
    for param in ctx.command.params:
        if param.name in LAUNCH_PARAMETERS or param.name is None:
            continue
        argv += _as_arguments(param, ctx.params.get(param.name))
    return argv


def _as_arguments(param: Any, value: Any) -> list[str]:
    if value is None:
        return []
    if param.param_type_name == "argument":
        return [str(item) for item in value] if isinstance(value, (list, tuple)) else [str(value)]
    if getattr(param, "is_flag", False) and isinstance(value, bool):
        if value:
            return [param.opts[0]]
        return [param.secondary_opts[0]] if param.secondary_opts else []  # --no-compile
    if isinstance(value, (list, tuple)):
        return [part for item in value for part in (param.opts[0], str(item))]
    return [param.opts[0], str(value)]
