"""Maintenance and measurement: ``doctor`` and ``bench``.

``doctor`` and ``bench`` import their modules inside the command: both import torch (doctor through
``checkpoint``), which ``octlm --help``, ``show`` and ``new`` must never load.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from ..errors import BadInput
from ..home import validate_id
from . import render
from .common import JsonOption, complete_ids, handled, home_of

RepairOption = Annotated[
    bool,
    typer.Option(
        "--repair", help="Fix what can be fixed: rebuild lost rows from experiments/*.yaml and the checkpoints."
    ),
]
OtherHostsOption = Annotated[
    bool,
    typer.Option(
        "--other-hosts",
        help="With --repair: also mark crashed the runs left running by another host (octlm cannot check "
        "a process there; use it when you know they stopped).",
    ),
]
BenchIdArgument = Annotated[
    str | None,
    typer.Argument(
        metavar="[ID]",
        help="Experiment whose model to time (default: EXP-008, else --preset).",
        show_default=False,
        autocompletion=complete_ids,
    ),
]
BenchPresetOption = Annotated[
    str | None,
    typer.Option("--preset", metavar="NAME", help="Time a preset's model instead (day1 ... day4).", show_default=False),
]
BenchStepsOption = Annotated[
    int, typer.Option("--steps", metavar="N", help="Training steps to time (after 2 warm-up steps).")
]
PrecisionOption = Annotated[
    str | None,
    typer.Option(
        "--precision",
        metavar="P[,P2]",
        help="fp32, bf16, fp16, or a list such as fp32,bf16 (default: the config's).",
        show_default=False,
    ),
]
CompileOption = Annotated[
    bool | None,
    typer.Option(
        "--compile/--no-compile",
        help="Time with or without torch.compile (default: the config's training.compile).",
        show_default=False,
    ),
]
BENCH_HEADERS = (
    "precision", "ms/step", "tokens/s", "model GFLOP/s", "matmul peak GFLOP/s", "MFU", "ckpt MB", "save s", "load s",
    "ckpt cost %", "1st step fresh s", "1st step resumed s",
)  # fmt: skip
BENCH_DROPPABLE = (
    "1st step resumed s", "1st step fresh s", "matmul peak GFLOP/s", "load s", "save s", "ckpt cost %",
    "model GFLOP/s",
)  # fmt: skip


@handled
def doctor(
    ctx: typer.Context, repair: RepairOption = False, other_hosts: OtherHostsOption = False, as_json: JsonOption = False
) -> None:
    """Check the registry against the files (missing, orphaned, foreign or corrupt checkpoints, checksums that
    disagree, malformed rows, stuck runs). Checking reads only; --repair fixes what it can."""
    from .. import doctor as doctors  # imports torch (through checkpoint)

    if other_hosts and not repair:
        raise BadInput("--other-hosts marks runs of other hosts crashed: give it with --repair")
    report = doctors.run(home_of(ctx), repair=repair, other_hosts=other_hosts)
    if as_json:
        render.emit_json(report)
    else:
        if report["problems"]:
            rows = ((p["kind"], p["where"], p["detail"], "yes" if p["repaired"] else "no") for p in report["problems"])
            render.print_table(("problem", "where", "detail", "repaired"), rows, title=f"doctor {report['home']}")
        print("healthy" if report["healthy"] else report.get("advice") or "problems found")
    if not report["healthy"]:
        raise typer.Exit(1)


@handled
def bench(
    ctx: typer.Context,
    experiment_id: BenchIdArgument = None,
    preset: BenchPresetOption = None,
    steps: BenchStepsOption = 10,
    precision: PrecisionOption = None,
    compile: CompileOption = None,
    as_json: JsonOption = False,
) -> None:
    """Time training steps against this machine's measured matmul peak (MFU), checkpoints and resume."""
    if steps <= 0:
        raise BadInput(f"--steps {steps}: must be positive")
    if experiment_id is not None:
        validate_id(experiment_id)  # `bench ''` is no ID (checked before torch loads)
    from .. import bench as benches  # imports torch

    config = benches.resolve_config(home_of(ctx), experiment_id, preset)
    report = benches.run(config, benches.parse_precisions(precision, config), steps, compile)
    if as_json:
        render.emit_json(report)
        return
    print_bench(report, config.id or config.preset)


def print_bench(report: dict[str, Any], name: str) -> None:
    """The bench table (whole numbers always; low-priority columns dropped, named, on a narrow terminal)."""
    title = (
        f"bench {name}: {report['parameters']:,} parameters, "
        f"{report['tokens_per_step']:,} tokens/step, {'compiled' if report['compile'] else 'eager'}, "
        f"{report['machine']['threads']} threads, {report['machine']['device']}"
    )
    rows = [_bench_row(r) for r in report["results"]]
    render.print_table(BENCH_HEADERS, rows, title=title, droppable=BENCH_DROPPABLE)
    if "bf16_over_fp32_tokens_per_second" in report:
        print(
            f"bf16 / fp32 tokens/s: {report['bf16_over_fp32_tokens_per_second']}x "
            f"(matmul peak ratio {report['bf16_over_fp32_matmul_peak']}x)"
        )


def _bench_row(r: dict[str, Any]) -> tuple[Any, ...]:
    return (
        r["precision"], r["ms_per_step"], r["tokens_per_second"], r["model_flops_per_second"] / 1e9,
        r["matmul_peak_flops_per_second"] / 1e9, r["mfu"], r["checkpoint_bytes"] / 1e6, r["checkpoint_save_seconds"],
        r["checkpoint_load_seconds"], 100 * r["checkpoint_cost_at_interval"], r["first_step_fresh_seconds"],
        r["first_step_resumed_seconds"],
    )  # fmt: skip
