"""Commands that create and inspect experiments: ``new`` and ``show``. Torch-free."""

from __future__ import annotations

import sys
from typing import Annotated, Any, Optional

import typer

from . import render
from ..presets import DESCRIPTIONS
from .app import JsonOption, SetOption, app, handled, state


@app.command()
@handled
def new(
    experiment_id: Annotated[Optional[str], typer.Argument(metavar="[ID]", help="EXP-<digits>; omitted: the next free EXP-NNN.", show_default=False)] = None,
    preset: Annotated[Optional[str], typer.Option("--preset", metavar="NAME", help="Start from a preset (default day1). " + "; ".join(f"{name}: {text}" for name, text in DESCRIPTIONS.items()) + ".", show_default=False)] = None,
    from_id: Annotated[Optional[str], typer.Option("--from", metavar="ID", help="Copy the config of an existing experiment.", show_default=False)] = None,
    overrides: SetOption = None,
    description: Annotated[Optional[str], typer.Option("--description", metavar="TEXT", help="One line saying what this experiment tries.", show_default=False)] = None,
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
    sort: Annotated[Optional[str], typer.Option("--sort", metavar="KEY", help="Sort the list by a column or config key; prefix - for descending.", show_default=False)] = None,
    where: Annotated[Optional[list[str]], typer.Option("--where", metavar="EXPR", help="Filter the list: KEY OP VALUE, e.g. 'eval_loss<2.5' or 'model.n_layers=4' (repeatable).", show_default=False)] = None,
    limit: Annotated[Optional[int], typer.Option("--limit", metavar="N", help="Show at most N experiments.", show_default=False)] = None,
    columns: Annotated[Optional[str], typer.Option("--columns", metavar="A,B,...", help="Comma-separated columns of the list (listing columns or config keys).", show_default=False)] = None,
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

        if as_json:
            from .. import runfile

            for experiment_id in ids:
                shows.detail(home, experiment_id)  # unknown IDs: exit 2
            render.emit_json({"schema_version": shows.SCHEMA_VERSION, "runs": {i: runfile.read(home.run_file(i)) for i in ids}})
        else:
            width = min(render.out_console().width, 120) if sys.stdout.isatty() else 80
            sys.stdout.write(compare.plots(home, ids, width=width))  # unknown IDs: exit 2 before drawing
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
    headers = ("ID", "description", "status", "step", "train loss", "eval loss", "ppl", "bpb", "tokens", "verdict", "updated (UTC)")
    render.print_table(headers, (
        (r["id"], r["description"], r["status"], f"{r['step'] or 0}/{r['steps']}" if r["steps"] else "-",
         r["train_loss"], r["eval_loss"], r["perplexity"], r["bits_per_byte"], r["tokens"],
         r["last_verdict"], (r["updated"] or "")[:16].replace("T", " ")) for r in rows),
        droppable=("updated (UTC)", "ppl", "train loss", "tokens", "verdict"))


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
    for keys in result["config"].values():
        for key, values in keys.items():
            rows.append((key, values))
    if as_json:
        render.emit_json(result)
    elif as_csv:
        _write_csv(("field", *ids), ((name, *values) for name, values in rows))
    else:
        render.print_table(("", *ids), ((name, *values) for name, values in rows),
                           title=" vs ".join(ids) + ("" if all_keys else "  (config: only keys that differ)"))


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


def _duration(run: dict[str, Any]) -> Any:
    from datetime import datetime

    if not run.get("started") or not run.get("ended"):
        return None
    return round((datetime.fromisoformat(run["ended"]) - datetime.fromisoformat(run["started"])).total_seconds(), 1)
