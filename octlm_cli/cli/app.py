"""The Typer app: thin commands that parse options, call one use case and render the result.

Exit codes: 0 ok, 1 a check failed, 2 bad input, 3 refused to protect existing state.
Torch and tokenizers are imported only inside the commands that train or sample, so
``octlm --help``, ``octlm show`` and ``octlm new`` start fast.
"""

from __future__ import annotations

import functools
import sys
from typing import Annotated, Any, Callable, Optional

import typer

from .. import __version__
from ..errors import OctlmError
from ..home import Home
from . import render

app = typer.Typer(
    name="octlm",
    help="Train miniature decoder-only language models with a loop that resumes exactly, and prove it.\n\n"
    "Exit codes: 0 ok, 1 a check failed, 2 bad input, 3 refused to protect existing state.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


class State:
    home_option: Optional[str] = None

    @property
    def home(self) -> Home:
        return Home.locate(self.home_option)


state = State()


def _version(value: bool) -> None:
    if value:
        print(f"octlm {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    home: Annotated[Optional[str], typer.Option("--home", help="Home folder (default: OCTLM_HOME, else the nearest folder with experiments/ or registry.db, else the current one).", show_default=False)] = None,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")] = False,
) -> None:
    state.home_option = home


def handled(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Map domain errors to one line on stderr and their exit code; never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except OctlmError as exc:
            if exc.exit_code in (130, 143):
                render.info(f"octlm: {exc}")
            else:
                render.error(str(exc))
            raise typer.Exit(exc.exit_code) from None

    return wrapper


# ---------------------------------------------------------------------------- new / show

SetOption = Annotated[Optional[list[str]], typer.Option("--set", help="Override a config key: SECTION.KEY=VALUE (repeatable).", show_default=False)]
JsonOption = Annotated[bool, typer.Option("--json", help="Write machine-readable JSON on stdout.")]


@app.command()
@handled
def new(
    experiment_id: Annotated[Optional[str], typer.Argument(metavar="[ID]", help="EXP-<digits>; omitted: the next free EXP-NNN.", show_default=False)] = None,
    preset: Annotated[Optional[str], typer.Option("--preset", help="day1 (default), day2, day3 or day4.", show_default=False)] = None,
    from_id: Annotated[Optional[str], typer.Option("--from", help="Copy the config of an existing experiment.", show_default=False)] = None,
    overrides: SetOption = None,
    description: Annotated[Optional[str], typer.Option("--description", help="One line saying what this experiment tries.", show_default=False)] = None,
    as_json: JsonOption = False,
) -> None:
    """Write experiments/<ID>.yaml and register it; print the ID on stdout."""
    from .. import experiments

    home = state.home
    base = experiments.load(home, from_id) if from_id else None
    config = experiments.build(preset=preset, from_config=base, overrides=overrides or [], description=description)
    created = experiments.create(home, experiment_id, config)
    if as_json:
        render.emit_json({"id": created.id, "path": str(home.config_path(created.id)),
                          "config_hash": created.fingerprint, "config": created.to_dict()})
    else:
        print(created.id)
        render.info(f"wrote {home.config_path(created.id)}")


@app.command()
@handled
def show(
    ids: Annotated[Optional[list[str]], typer.Argument(metavar="[ID]...", help="One experiment: its detail; several: side by side; none: list all.", show_default=False)] = None,
    all_keys: Annotated[bool, typer.Option("--all-keys", help="Compare every config key, not only those that differ.")] = False,
    plot: Annotated[bool, typer.Option("--plot", help="Draw train/eval loss, learning rate and gradient norm from the run files.")] = False,
    sort: Annotated[Optional[str], typer.Option("--sort", help="Sort the list by a column or config key; prefix - for descending.", show_default=False)] = None,
    where: Annotated[Optional[list[str]], typer.Option("--where", help="Filter the list: KEY OP VALUE, e.g. 'eval_loss<2.5' or 'model.n_layers=4' (repeatable).", show_default=False)] = None,
    limit: Annotated[Optional[int], typer.Option("--limit", help="Show at most N experiments.", show_default=False)] = None,
    columns: Annotated[Optional[str], typer.Option("--columns", help="Comma-separated columns of the list (listing columns or config keys).", show_default=False)] = None,
    as_json: JsonOption = False,
    as_csv: Annotated[bool, typer.Option("--csv", help="Write CSV on stdout.")] = False,
) -> None:
    """List experiments, show one in detail, or compare several side by side."""
    from .. import show as shows

    home = state.home
    if as_json and as_csv:
        from ..errors import BadInput

        raise BadInput("--json and --csv cannot be used together: choose one")
    if not ids:
        _show_list(home, sort, where or [], limit, columns, as_json, as_csv)
        return
    if plot:
        from .. import compare

        for experiment_id in ids:
            shows.detail(home, experiment_id)  # unknown IDs: exit 2 before drawing
        width = min(render.out_console().width, 120) if sys.stdout.isatty() else 80
        text = compare.plots(home, ids, width=width)
        if as_json:
            from .. import runfile

            render.emit_json({"schema_version": shows.SCHEMA_VERSION, "runs": {i: runfile.read(home.run_file(i)) for i in ids}})
        else:
            sys.stdout.write(text)
        return
    if len(ids) > 1:
        _show_compare(home, ids, all_keys, as_json, as_csv)
        return
    item = shows.detail(home, ids[0])
    if as_json:
        render.emit_json(item)
    elif as_csv:
        _write_csv(("key", "value"), [(k, v) for k, v in _flat(item).items()])
    else:
        _print_detail(render.out_console(), item)


def _flat(item: dict[str, Any]) -> dict[str, Any]:
    from ..config import flatten

    flat = {"id": item["id"], "status": item["status"], "step": item["step"]}
    flat.update({f"fingerprint.{k}": v for k, v in item["fingerprints"].items()})
    flat.update(flatten({"config": item["config"]}))
    return flat


def _write_csv(header: Any, rows: Any) -> None:
    import csv

    writer = csv.writer(sys.stdout)
    writer.writerow(header)
    for row in rows:
        writer.writerow(["" if v is None else v for v in row])


def _show_list(home: Any, sort: Optional[str], where: list[str], limit: Optional[int], columns: Optional[str],
               as_json: bool, as_csv: bool) -> None:
    from .. import show as shows

    rows = shows.listing(home)
    chosen = [c.strip() for c in columns.split(",")] if columns else None
    needs_config = any("." in text for text in [*(where or []), sort or "", *(chosen or [])])
    if needs_config:
        from .. import compare

        rows = compare.with_config(home, rows)
    if where or sort or limit is not None:
        from .. import compare

        rows = compare.filter_rows(rows, where, sort, limit)
    if chosen:
        unknown = [c for c in chosen if c not in shows.LIST_COLUMNS and "." not in c]
        if unknown:
            from ..errors import BadInput

            raise BadInput(f"--columns {unknown[0]}: unknown column; choose from {', '.join(shows.LIST_COLUMNS)} or a config key")
        rows = [{c: row.get(c) for c in ["id", *[c for c in chosen if c != "id"]]} for row in rows]
    else:
        rows = [{c: row.get(c) for c in shows.LIST_COLUMNS} for row in rows]
    if as_json:
        render.emit_json({"schema_version": shows.SCHEMA_VERSION, "home": str(home.root), "experiments": rows})
        return
    if as_csv:
        header = list(rows[0]) if rows else ["id", *(chosen or shows.LIST_COLUMNS[1:])]
        _write_csv(header, ([row.get(h) for h in header] for row in rows))
        return
    if not rows:
        render.info(f"no experiments in {home.root}" + (" match" if where else ": create one with `octlm new --preset day1`"))
        return
    if chosen:
        render.print_table(list(rows[0]), ([row[c] for c in row] for row in rows))
        return
    headers = ("ID", "description", "status", "step", "train loss", "eval loss", "ppl", "bpb", "tokens", "verdict", "updated")
    render.print_table(headers, (
        (r["id"], r["description"], r["status"], f"{r['step'] or 0}/{r['steps']}" if r["steps"] else "-",
         r["train_loss"], r["eval_loss"], r["perplexity"], r["bits_per_byte"], r["tokens"],
         r["last_verdict"], (r["updated"] or "")[:16].replace("T", " ")) for r in rows))


def _show_compare(home: Any, ids: list[str], all_keys: bool, as_json: bool, as_csv: bool) -> None:
    from .. import compare

    result = compare.compare(home, ids, all_keys)
    rows: list[tuple[str, list[Any]]] = []
    exps = result["experiments"]
    rows.append(("status", [e["status"] for e in exps]))
    rows.append(("step", [e["step"] for e in exps]))
    for group in ("final", "best"):
        for metric in compare.METRICS:
            rows.append((f"{group} {metric}", [e[group][metric] for e in exps]))
    rows.append((f"at {result['equal_tokens']:,} tokens: step tokens", [e["at_equal_tokens"]["tokens"] for e in exps]))
    for metric in compare.METRICS:
        rows.append((f"at {result['equal_tokens']:,} tokens: {metric}", [e["at_equal_tokens"][metric] for e in exps]))
    for key in ("tokens", "tokens_per_second", "wall_seconds", "verify_resume", "overfit"):
        rows.append((key, [e[key] for e in exps]))
    for section, keys in result["config"].items():
        for key, values in keys.items():
            rows.append((key, values))
    if as_json:
        render.emit_json(result)
    elif as_csv:
        _write_csv(("field", *ids), ((name, *values) for name, values in rows))
    else:
        table = render.table(f"{' vs '.join(ids)}" + ("" if all_keys else "  (config: only keys that differ)"),
                             ("", *ids), ((name, *values) for name, values in rows))
        render.out_console().print(table)


def _print_detail(console: Any, item: dict[str, Any]) -> None:
    from ..config import flatten

    console.print(render.key_values(f"{item['id']}  {item['description']}", [
        ("status", item["status"]), ("step", item["step"]),
        ("config fingerprint", item["fingerprints"]["config"]),
        ("data hash", item["fingerprints"]["data"]), ("tokenizer hash", item["fingerprints"]["tokenizer"]),
    ]))
    console.print(render.key_values("config", flatten(item["config"]).items()))
    if item["runs"]:
        console.print(render.table("runs", ("#", "kind", "status", "steps", "started", "host", "pid", "device", "dtype", "threads", "train loss", "eval loss"), (
            (r["id"], r["kind"], r["status"], f"{r['start_step']}->{r['end_step']}", (r["started"] or "")[:19], r["host"], r["pid"],
             r["device"], r["dtype"], r["threads"], (r["latest_metrics"] or {}).get("train_loss"), (r["latest_metrics"] or {}).get("eval_loss"))
            for r in item["runs"])))
    if item["runs"]:
        console.print(render.table("provenance", ("#", "command", "git commit", "dirty", "versions (octlm/python/torch)", "duration s", "resumed from"), (
            (r["id"], " ".join(r["argv"] or []) if isinstance(r["argv"], list) else r["argv"], (r["git_commit"] or "")[:12],
             {1: "yes", 0: "no"}.get(r["git_dirty"]), f"{r['octlm_version']}/{r['python_version']}/{r['torch_version']}",
             _duration(r), r["resumed_from"]) for r in item["runs"])))
    if item["checkpoints"]:
        console.print(render.table("checkpoints", ("step", "path", "size", "sha256"), (
            (c["step"], c["path"], c["size"], c["sha256"][:16]) for c in item["checkpoints"])))
    if item["verifications"]:
        console.print(render.table("verdicts", ("kind", "verdict", "when", "summary"), (
            (v["kind"], v["verdict"], (v["created"] or "")[:19], v["details"].get("summary", "")) for v in item["verifications"])))


# ---------------------------------------------------------------------------- training

QuietOption = Annotated[bool, typer.Option("--quiet", "-q", help="No progress output on stderr.")]
UntilOption = Annotated[Optional[int], typer.Option("--until", help="Stop after this step (writing a checkpoint there); default: training.steps.", show_default=False)]


def _summary_line(result: dict[str, Any]) -> str:
    metrics = result.get("metrics") or {}
    line = f"{result['id']}: {result['status']} at step {result['end_step']}/{result['steps']}"
    if metrics.get("eval_loss") is not None:
        line += (f"; train loss {metrics['train_loss']:.4f}, eval loss {metrics['eval_loss']:.4f}, "
                 f"perplexity {metrics['perplexity']:.2f}, {metrics['bits_per_byte']:.4f} bits per byte")
    if result.get("tokens_per_second"):
        line += f"; {result['tokens_per_second']:,.0f} tokens/s"
    return line


def _finish(result: dict[str, Any], as_json: bool) -> None:
    if as_json:
        render.emit_json(result)
    else:
        render.info(_summary_line(result))


@app.command()
@handled
def train(
    experiment_id: Annotated[str, typer.Argument(metavar="ID", help="The experiment, e.g. EXP-008.")],
    restart: Annotated[bool, typer.Option("--restart", help="Discard existing checkpoints, tokenizer and run file, and start over.")] = False,
    until: UntilOption = None,
    as_json: JsonOption = False,
    quiet: QuietOption = False,
) -> None:
    """Train an experiment from step 0 (refuses existing progress unless --restart)."""
    from .. import runner
    from .progress import ConsoleReporter

    _finish(runner.train(state.home, experiment_id, restart=restart, until=until, reporter=ConsoleReporter(quiet)), as_json)


@app.command()
@handled
def resume(
    experiment_id: Annotated[str, typer.Argument(metavar="ID", help="The experiment, e.g. EXP-008.")],
    step: Annotated[Optional[int], typer.Option("--step", help="Resume from the checkpoint at this step (default: the newest valid one).", show_default=False)] = None,
    until: UntilOption = None,
    as_json: JsonOption = False,
    quiet: QuietOption = False,
) -> None:
    """Continue from the newest valid checkpoint (or start at 0); exits 0 at once when complete."""
    from .. import runner
    from .progress import ConsoleReporter

    _finish(runner.resume(state.home, experiment_id, step=step, until=until, reporter=ConsoleReporter(quiet)), as_json)


@app.command("verify-resume")
@handled
def verify_resume(
    experiment_id: Annotated[str, typer.Argument(metavar="ID", help="The experiment, e.g. EXP-008.")],
    split_at: Annotated[str, typer.Option("--split-at", help="Step(s) where run (b) stops and resumes in a new process: N or N1,N2,...")],
    until: Annotated[Optional[int], typer.Option("--until", help="Final step M of both runs (default: training.steps).", show_default=False)] = None,
    keep_scratch: Annotated[bool, typer.Option("--keep-scratch", help="Keep the scratch folders for inspection.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Prove exact resume: one run 0->M against runs split at N in new processes, compared bit for bit."""
    from .. import verify

    result = verify.verify_resume(state.home, experiment_id, split_at, until, keep_scratch, progress=render.info)
    if as_json:
        render.emit_json(result)
    else:
        rows = []
        for check in result["checks"]:
            worst = max((d["max_abs_diff"] or 0.0 for d in check["differing"]), default=0.0)
            detail = ", ".join(d["name"] for d in check["differing"][:5])
            rows.append((check["check"], check["compared"], check["compared"] - len(check["differing"]),
                         "identical" if not check["differing"] else f"DIFFERS (max |diff| {worst:.3g}) {detail}"))
        render.out_console().print(render.table(
            f"verify-resume {experiment_id}: split at {','.join(map(str, result['split_at']))}, until {result['until']}",
            ("check", "compared", "identical", "verdict"), rows))
        print(f"{experiment_id}: {'PASS' if result['identical'] else 'FAIL'}: {result['summary']}; next-batch loss {result['next_loss']:.6f}")
    if not result["identical"]:
        raise typer.Exit(1)


@app.command()
@handled
def overfit(
    experiment_id: Annotated[str, typer.Argument(metavar="ID", help="The experiment, e.g. EXP-008.")],
    steps: Annotated[Optional[int], typer.Option("--steps", help="Training steps (default: training.steps).", show_default=False)] = None,
    max_loss: Annotated[float, typer.Option("--max-loss", help="Pass when the final loss on the block is at most this.")] = 1.0,
    as_json: JsonOption = False,
    quiet: QuietOption = False,
) -> None:
    """Memorise one block, then greedy-decode it back; exit 0 when the final loss <= --max-loss."""
    from .. import runner
    from .progress import ConsoleReporter

    result = runner.overfit(state.home, experiment_id, steps=steps, max_loss=max_loss, reporter=ConsoleReporter(quiet))
    if as_json:
        render.emit_json(result)
    else:
        render.out_console().print(render.table(f"overfit {experiment_id}: one block, {result['steps']} steps",
            ("final loss", "perplexity", "bits per byte", "decode matches", "verdict"),
            [(result["final_loss"], result["perplexity"], result["bits_per_byte"],
              f"{result['matched_tokens']}/{result['block_tokens']} tokens", result["verdict"].upper())]))
        print("--- block ---")
        print(result["block_text"])
        print("--- greedy decode ---")
        print(result["decoded_text"])
        print(f"{experiment_id}: {result['verdict'].upper()}: {result['summary']}")
    if result["verdict"] != "pass":
        raise typer.Exit(1)


@app.command()
@handled
def sample(
    experiment_id: Annotated[str, typer.Argument(metavar="ID", help="The experiment, e.g. EXP-008.")],
    prompt: Annotated[str, typer.Option("--prompt", help="Text to continue.")] = "",
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", help="Tokens to generate.")] = 200,
    temperature: Annotated[float, typer.Option("--temperature", help="Sampling temperature; 0 = greedy.")] = 1.0,
    top_k: Annotated[Optional[int], typer.Option("--top-k", help="Sample only from the k likeliest tokens.", show_default=False)] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the sampling generator (never the training streams).")] = 0,
    step: Annotated[Optional[int], typer.Option("--step", help="Use the checkpoint at this step (default: the newest).", show_default=False)] = None,
    as_json: JsonOption = False,
) -> None:
    """Generate text from an experiment's newest (or given) checkpoint; prints it on stdout."""
    from .. import runner

    result = runner.sample(state.home, experiment_id, prompt=prompt, max_new_tokens=max_new_tokens,
                           temperature=temperature, top_k=top_k, seed=seed, step=step)
    if as_json:
        render.emit_json(result)
    else:
        print(prompt + result["text"])


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
            render.out_console().print(render.table(f"doctor {report['home']}", ("problem", "where", "detail", "repaired"),
                ((p["kind"], p["where"], p["detail"], "yes" if p["repaired"] else "no") for p in report["problems"])))
        print("healthy" if report["healthy"] else "problems found: run `octlm doctor --repair`")
    if not report["healthy"]:
        raise typer.Exit(1)


@app.command()
@handled
def bench(
    experiment_id: Annotated[Optional[str], typer.Argument(metavar="[ID]", help="Experiment whose model to time (default: EXP-008, else --preset).", show_default=False)] = None,
    preset: Annotated[Optional[str], typer.Option("--preset", help="Time a preset's model instead (day1 ... day4).", show_default=False)] = None,
    steps: Annotated[int, typer.Option("--steps", help="Training steps to time (after 2 warm-up steps).")] = 10,
    precision: Annotated[Optional[str], typer.Option("--precision", help="fp32, bf16, fp16, or a list such as fp32,bf16 (default: the config's).", show_default=False)] = None,
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
    report = benches.run(config, precisions, steps)
    if as_json:
        render.emit_json(report)
        return
    render.out_console().print(render.table(
        f"bench {config.id or config.preset}: {report['parameters']:,} parameters, {report['tokens_per_step']} tokens/step, "
        f"{report['machine']['threads']} threads, {report['machine']['device']}",
        ("precision", "ms/step", "tokens/s", "model GFLOP/s", "matmul peak GFLOP/s", "MFU", "ckpt MB", "save s", "load s",
         "1st step fresh s", "1st step resumed s"),
        ((r["precision"], r["ms_per_step"], r["tokens_per_second"], r["model_flops_per_second"] / 1e9,
          r["matmul_peak_flops_per_second"] / 1e9, r["mfu"], r["checkpoint_bytes"] / 1e6, r["checkpoint_save_seconds"],
          r["checkpoint_load_seconds"], r["first_step_fresh_seconds"], r["first_step_resumed_seconds"]) for r in report["results"])))
    if "bf16_over_fp32_tokens_per_second" in report:
        print(f"bf16 / fp32 tokens/s: {report['bf16_over_fp32_tokens_per_second']}x "
              f"(matmul peak ratio {report['bf16_over_fp32_matmul_peak']}x)")


def _duration(run: dict[str, Any]) -> Any:
    from datetime import datetime

    if not run.get("started") or not run.get("ended"):
        return None
    return round((datetime.fromisoformat(run["ended"]) - datetime.fromisoformat(run["started"])).total_seconds(), 1)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:  # outside a training loop (which handles it itself)
        render.error("interrupted")
        sys.exit(130)
