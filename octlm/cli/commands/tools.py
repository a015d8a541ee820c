"""Maintenance and measurement: ``doctor``, ``prepare``, ``bench`` and ``canary``.

Each imports its module inside the command: they import torch (doctor through ``checkpoint``), which
``octlm --help``, ``show`` and ``new`` must never load, and ``bench``, ``prepare`` and ``canary`` pin the
determinism profile first (``profile``), which must happen before torch loads.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from octlm.cli import render
from octlm.cli.commands.canary import bench_profiles
from octlm.cli.common import IdArgument, JsonOption, complete_ids, handled, home_of
from octlm.cli.profile import pin_experiment
from octlm.cli.ranks import NprocOption
from octlm.config.schema import DETERMINISMS
from octlm.core.errors import BadInput
from octlm.core.home import validate_id
from octlm.core.reporting import counted
from octlm.runtime import determinism, launch

if TYPE_CHECKING:
    from octlm.config import Config
    from octlm.tasks.bench.records import BenchReport, Measured, RanksReport, RanksRow

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
DeterminismOption = Annotated[
    str | None,
    typer.Option(
        "--determinism",
        metavar="D[,D2]",
        help=f"{', '.join(DETERMINISMS)}, or several ({','.join(DETERMINISMS)}): each tier in processes of its "
        "own, alternating (default: the config's).",
        show_default=False,
    ),
]
RoundsOption = Annotated[
    int,
    typer.Option(
        "--rounds",
        metavar="N",
        help="With several --determinism profiles, or --nproc: alternating processes per profile or variant.",
    ),
]
MicroBatchesOption = Annotated[
    int | None,
    typer.Option(
        "--micro-batches",
        metavar="K",
        help="With --nproc: the canonical pieces to time beside the per-rank mode (default: training.micro_batches, "
        "else N; 0: none).",
        show_default=False,
    ),
]
ThreadsOption = Annotated[
    int | None, typer.Option("--threads", metavar="T", hidden=True, help="(a variant of bench --nproc) threads.")
]
RanksReportOption = Annotated[
    str | None,
    typer.Option("--ranks-report", metavar="FILE", hidden=True, help="(a rank of bench --nproc) rank 0's JSON file."),
]
BENCH_HEADERS = (
    "precision",
    "ms/step",
    "tokens/s",
    "model GFLOP/s",
    "matmul peak GFLOP/s",
    "MFU",
    "ckpt MB",
    "save s",
    "load s",
    "ckpt cost %",
    "1st step fresh s",
    "1st step resumed s",
)
BENCH_DROPPABLE = (
    "1st step resumed s",
    "1st step fresh s",
    "matmul peak GFLOP/s",
    "load s",
    "save s",
    "ckpt cost %",
    "model GFLOP/s",
)


@handled
def doctor(
    ctx: typer.Context, repair: RepairOption = False, other_hosts: OtherHostsOption = False, as_json: JsonOption = False
) -> None:
    """Check the registry against the files (missing, orphaned, foreign or corrupt checkpoints, checksums that
    disagree, malformed rows, stuck runs). Checking reads only; --repair fixes what it can."""
    from octlm.tasks import doctor as doctors  # imports torch (through checkpoint)

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
def prepare(ctx: typer.Context, experiment_id: IdArgument, as_json: JsonOption = False) -> None:
    """Prepare an experiment's data alone (corpus, tokenizer, token file) and say what it cost: the next
    train starts warm."""
    from octlm.cli.live.progress import ConsoleReporter
    from octlm.tasks import prepare as preparation  # imports torch and tokenizers

    pin_experiment(ctx, experiment_id)
    reporter = ConsoleReporter()
    try:
        report = preparation.run(home_of(ctx), experiment_id, reporter)
    finally:
        reporter.close()
    if as_json:
        render.emit_json(report)
        return
    rows = [(p["name"], p.get("seconds"), render.plain(p["detail"])) for p in report["phases"]]
    render.print_table(("phase", "seconds", "detail"), rows, title=f"prepare {experiment_id}")
    tokens, speed = report["tokens"], report["encoding_mb_per_second"]
    print(
        f"{experiment_id}: {tokens['train']:,} training and {tokens['validation']:,} validation tokens in "
        f"{report['seconds']:.1f} s (token file {report['token_file']}"
        + (f", encoded at {speed} MB/s" if speed else "")
        + f"); peak memory {report['peak_rss_mb']:,.0f} MB"
    )


@handled
def bench(
    ctx: typer.Context,
    experiment_id: BenchIdArgument = None,
    preset: BenchPresetOption = None,
    steps: BenchStepsOption = 10,
    precision: PrecisionOption = None,
    compile: CompileOption = None,
    determinism_: DeterminismOption = None,
    rounds: RoundsOption = 2,
    as_json: JsonOption = False,
    nproc: NprocOption = 1,
    micro_batches: MicroBatchesOption = None,
    threads: ThreadsOption = None,
    ranks_report: RanksReportOption = None,
) -> None:
    """Time training steps against this machine's measured matmul peak (MFU), checkpoints and resume.

    With --nproc N: the step on one process and on N ranks (the same global batch), per-rank slices and canonical
    pieces (--micro-batches), each in processes of its own at equal total threads, alternating for --rounds rounds:
    ms/step, tokens/s, the spread over the rounds, the gradient sum's share of the step, the speed-up and the load.
    With --determinism local,portable: each profile in processes of its own, alternating, and the ratio of their
    tokens/s."""
    spec = _checked(experiment_id, steps, rounds, nproc)
    if micro_batches is not None and micro_batches < 0:
        raise BadInput(f"--micro-batches {micro_batches}: must be 0 (none) or more")
    from octlm.tasks.bench import plan as bench_plan  # torch-free: the profile is pinned before torch loads

    config = bench_plan.resolve_config(home_of(ctx), experiment_id, preset)
    profiles = bench_plan.parse_list(determinism_, config.training.determinism, DETERMINISMS, "--determinism")
    precisions = bench_plan.parse_precisions(precision, config)
    model = [experiment_id] if experiment_id else ["--preset", preset] if preset else []
    if len(profiles) > 1:
        bench_profiles(ctx, model, profiles, precisions, steps, compile, rounds, spec, as_json)
        return
    config = bench_plan.with_choices(config, compile, profiles[0])
    if spec.wanted and ranks_report is None:  # the user's process: it times nothing itself
        found = _bench_ranks(ctx, config, model, precisions, steps, spec, rounds, micro_batches)
        _show_ranks(found, config, as_json)
        return
    if launch.launched() or ranks_report is not None:  # a variant's process, or one of its ranks
        mine = _variant_of(config, micro_batches, threads)
        from octlm.tasks.bench import ranks as bench_ranks  # imports torch: after the variant's profile is pinned

        report_file = Path(ranks_report) if ranks_report else None
        _show_ranks(bench_ranks.in_ranks(mine, precisions, steps, report_file), config, as_json)
        return
    determinism.pin(config)
    from octlm.tasks.bench import measure as benches  # imports torch

    report = benches.run(config, precisions, steps)
    if as_json:
        render.emit_json(report)
        return
    print_bench(report, config.id or config.preset)


def _checked(experiment_id: str | None, steps: int, rounds: int, nproc: int) -> launch.Launch:
    """Bench's options that are one line before torch loads (`bench ''` is no ID, `--nproc 0`)."""
    for flag, value in (("--steps", steps), ("--rounds", rounds)):
        if value <= 0:
            raise BadInput(f"{flag} {value}: must be positive")
    if experiment_id is not None:
        validate_id(experiment_id)
    return launch.Launch(nproc)


def _show_ranks(found: RanksReport | None, config: Config, as_json: bool) -> None:
    if found is not None and as_json:
        render.emit_json(found)
    elif found is not None:
        print_bench_ranks(found, config.id or config.preset)


def _variant_of(config: Config, micro_batches: int | None, threads: int | None) -> Config:
    """A variant's config (its pieces and threads), its profile pinned before torch loads."""
    from octlm.tasks.bench import plan as bench_plan  # torch-free

    mine = bench_plan.variant(config, micro_batches, threads)
    determinism.pin(mine)
    return mine


def _bench_ranks(
    ctx: typer.Context,
    config: Config,
    model: list[str],
    precisions: list[str],
    steps: int,
    spec: launch.Launch,
    rounds: int,
    pieces: int | None,
) -> RanksReport:
    """``bench --nproc N`` in the process the user started: every variant in processes of its own, each running
    ``bench`` with ``--micro-batches``, ``--threads`` and ``--ranks-report``."""
    from octlm.tasks.bench import ranks as bench_ranks  # imports torch

    home = (ctx.obj or {}).get("home")
    argv = [*(["--home", str(home)] if home else []), "bench", *model, "--steps", str(steps)]
    argv += ["--precision", ",".join(precisions), "--compile" if config.training.compile else "--no-compile"]
    argv += ["--determinism", config.training.determinism]
    run_id = f"octlm-bench-{config.id or config.preset}"
    try:
        return bench_ranks.compare(config, precisions, steps, spec, argv, run_id, rounds, pieces)
    except bench_ranks.VariantFailed as failed:  # its process said why
        raise typer.Exit(failed.exit_code) from None


RANKS_HEADERS = (
    "precision",
    "mode",
    "ranks",
    "threads",
    "ms/step",
    "tokens/s",
    "spread %",
    "sum ms",
    "sum %",
    "speed-up",
    "load",
)
RANKS_KINDS = ["raw", "raw", "raw", "raw", "metric", "count", "metric", "metric", "metric", "metric", "metric"]


def print_bench_ranks(report: RanksReport, name: str) -> None:
    """The table of ``bench --nproc N``: a row per precision and variant (one process, N ranks, per rank or in
    canonical pieces; threads: each rank's; sum: the gradient sum's time and share; spread: over the rounds; load:
    the 1-minute load average), the columns of least weight left out on a narrow terminal; then what the load and
    the threads make of the figures."""
    title = (
        f"bench {name}: {report['parameters']:,} parameters, "
        f"{report['tokens_per_step']:,} tokens/step (global), {'compiled' if report['compile'] else 'eager'}, "
        f"{counted(report['machine']['cores'] or 0, 'core')}, {report['machine']['device']}, "
        f"{counted(report.get('rounds', 1), 'round')}"
    )
    rows = [_ranks_row(r) for r in report["results"]]
    render.print_table(RANKS_HEADERS, rows, title=title, kinds=RANKS_KINDS, droppable=("sum ms", "load", "spread %"))
    busy = max(r["ranks"] * r["threads_per_rank"] for r in report["results"])
    if report["machine"]["device"] == "cpu" and busy > (report["machine"]["cores"] or busy):
        on = f"{counted(busy, 'thread')} on {counted(report['machine']['cores'] or 0, 'core')}"
        render.info(f"note: {on}: the ranks compete for the cores")
    warning = report.get("load_warning")
    if warning:
        render.warn(warning)


def _ranks_row(r: RanksRow) -> tuple[Any, ...]:
    spread = r.get("spread")
    return (
        r["precision"],
        r.get("mode", "per rank"),
        r["ranks"],
        r["threads_per_rank"],
        r["ms_per_step"],
        r["tokens_per_second"],
        None if spread is None else 100 * spread,
        r["all_reduce_ms"],
        100 * r["all_reduce_share"],
        r["speed_up"],
        r.get("load_average"),
    )


def print_bench(report: BenchReport, name: str) -> None:
    """The bench table (whole numbers always; low-priority columns dropped, named, on a narrow terminal)."""
    title = (
        f"bench {name}: {report['parameters']:,} parameters, "
        f"{report['tokens_per_step']:,} tokens/step, {'compiled' if report['compile'] else 'eager'}, "
        f"{counted(report['machine']['threads'], 'thread')}, {report['machine']['device']}"
    )
    rows = [_bench_row(r) for r in report["results"]]
    render.print_table(BENCH_HEADERS, rows, title=title, droppable=BENCH_DROPPABLE)
    if "bf16_over_fp32_tokens_per_second" in report:
        print(
            f"bf16 / fp32 tokens/s: {report['bf16_over_fp32_tokens_per_second']}x "
            f"(matmul peak ratio {report['bf16_over_fp32_matmul_peak']}x)"
        )


def _bench_row(r: Measured) -> tuple[Any, ...]:
    return (
        r["precision"],
        r["ms_per_step"],
        r["tokens_per_second"],
        r["model_flops_per_second"] / 1e9,
        r["matmul_peak_flops_per_second"] / 1e9,
        r["mfu"],
        r["checkpoint_bytes"] / 1e6,
        r["checkpoint_save_seconds"],
        r["checkpoint_load_seconds"],
        100 * r["checkpoint_cost_at_interval"],
        r["first_step_fresh_seconds"],
        r["first_step_resumed_seconds"],
    )
