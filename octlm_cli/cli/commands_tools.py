"""Maintenance and measurement: ``doctor`` and ``bench``."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from . import render
from .app import JsonOption, app, handled, state


@app.command()
@handled
def doctor(
    repair: Annotated[bool, typer.Option("--repair", help="Fix what can be fixed: rebuild lost rows from experiments/*.yaml and the checkpoints.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Check the registry against the files (missing, orphaned or corrupt checkpoints, stuck runs)."""
    from .. import doctor as doctors

    report = doctors.run(state.home, repair=repair)
    if as_json:
        render.emit_json(report)
    else:
        if report["problems"]:
            render.print_table(("problem", "where", "detail", "repaired"),
                               ((p["kind"], p["where"], p["detail"], "yes" if p["repaired"] else "no") for p in report["problems"]),
                               title=f"doctor {report['home']}")
        print("healthy" if report["healthy"] else "problems found: run `octlm doctor --repair`")
    if not report["healthy"]:
        raise typer.Exit(1)


@app.command()
@handled
def bench(
    experiment_id: Annotated[Optional[str], typer.Argument(metavar="[ID]", help="Experiment whose model to time (default: EXP-008, else --preset).", show_default=False)] = None,
    preset: Annotated[Optional[str], typer.Option("--preset", metavar="NAME", help="Time a preset's model instead (day1 ... day4).", show_default=False)] = None,
    steps: Annotated[int, typer.Option("--steps", metavar="N", help="Training steps to time (after 2 warm-up steps).")] = 10,
    precision: Annotated[Optional[str], typer.Option("--precision", metavar="P[,P2]", help="fp32, bf16, fp16, or a list such as fp32,bf16 (default: the config's).", show_default=False)] = None,
    compile: Annotated[Optional[bool], typer.Option("--compile/--no-compile", help="Time with or without torch.compile (default: the config's training.compile).", show_default=False)] = None,
    as_json: JsonOption = False,
) -> None:
    """Time training steps against this machine's measured matmul peak (MFU), checkpoints and resume."""
    from .. import bench as benches
    from .. import config as cfg
    from .. import experiments
    from ..errors import BadInput
    from ..presets import preset as preset_raw

    home = state.home
    if preset and experiment_id:
        raise BadInput("give an experiment ID or --preset, not both")
    if preset:
        config = cfg.from_dict(preset_raw(preset), f"preset {preset}")
    else:
        chosen = experiment_id or "EXP-008"
        if experiment_id is None and not home.config_path(chosen).exists():
            config = cfg.from_dict(preset_raw("day1"), "preset day1")
        else:
            config = experiments.load(home, chosen)
    if steps <= 0:
        raise BadInput(f"--steps {steps}: must be positive")
    precisions = [p.strip() for p in (precision or config.training.precision).split(",") if p.strip()]
    for item in precisions:
        if item not in cfg.PRECISIONS:
            raise BadInput(f"--precision {item}: must be one of {', '.join(cfg.PRECISIONS)}")
    report = benches.run(config, precisions, steps, compile)
    if as_json:
        render.emit_json(report)
        return
    render.print_table(
        ("precision", "ms/step", "tokens/s", "model GFLOP/s", "matmul peak GFLOP/s", "MFU", "ckpt MB", "save s", "load s", "ckpt cost %",
         "1st step fresh s", "1st step resumed s"),
        ((r["precision"], r["ms_per_step"], r["tokens_per_second"], r["model_flops_per_second"] / 1e9,
          r["matmul_peak_flops_per_second"] / 1e9, r["mfu"], r["checkpoint_bytes"] / 1e6, r["checkpoint_save_seconds"],
          r["checkpoint_load_seconds"], 100 * r["checkpoint_cost_at_interval"], r["first_step_fresh_seconds"], r["first_step_resumed_seconds"]) for r in report["results"]),
        title=f"bench {config.id or config.preset}: {report['parameters']:,} parameters, {report['tokens_per_step']} tokens/step, "
              f"{'compiled' if report['compile'] else 'eager'}, "
              f"{report['machine']['threads']} threads, {report['machine']['device']}")
    if "bf16_over_fp32_tokens_per_second" in report:
        print(f"bf16 / fp32 tokens/s: {report['bf16_over_fp32_tokens_per_second']}x "
              f"(matmul peak ratio {report['bf16_over_fp32_matmul_peak']}x)")
