"""Many boxes: ``pack`` / ``unpack`` (one experiment with its files, to another home) and ``registry export`` /
``registry import`` (the records of a home, merged into another's registry). Torch-free; each command imports its
use case inside it, so ``octlm --help`` never loads tarfile."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from octlm.cli import render
from octlm.cli.common import IdArgument, JsonOption, complete_ids, handled, home_of
from octlm.core.errors import BadInput
from octlm.core.reporting import counted

if TYPE_CHECKING:
    from octlm.exchange.results import Imported

PackOutputOption = Annotated[
    str,
    typer.Option(
        "--output",
        "-o",
        metavar="FILE.tar",
        help="The pack to write: a file is replaced atomically, a device or a FIFO written in place; a folder "
        "is refused.",
    ),
]
StepOption = Annotated[
    int | None,
    typer.Option(
        "--step", metavar="N", help="Pack the checkpoint of step N (default: the newest).", show_default=False
    ),
]
AllCheckpointsOption = Annotated[
    bool, typer.Option("--all-checkpoints", help="Pack every checkpoint of the experiment, not only the newest.")
]
PackArgument = Annotated[str, typer.Argument(metavar="FILE.tar", help="A pack written by `octlm pack`.")]
AsOption = Annotated[
    str | None,
    typer.Option(
        "--as",
        metavar="NEW-ID",
        help="Unpack under this ID (when the pack's ID is taken here by another experiment); `resume NEW-ID` "
        "accepts the checkpoints written under the old one.",
        show_default=False,
    ),
]
ExportIdsArgument = Annotated[
    list[str] | None,
    typer.Argument(
        metavar="[ID]...", help="Experiments to export (default: all).", show_default=False, autocompletion=complete_ids
    ),
]
ExportOutputOption = Annotated[
    str | None,
    typer.Option(
        "--output", "-o", metavar="FILE", help="Write the records here (default: stdout).", show_default=False
    ),
]
OutsideSourcesOption = Annotated[
    bool,
    typer.Option(
        "--allow-outside-sources",
        help="Accept an experiment whose data.sources name files outside this home and OCTLM_DATA_ROOT (refused "
        "otherwise, exit 3: training would read them, and the next pack would carry the tokenizer made of them).",
    ),
]
ImportArgument = Annotated[str, typer.Argument(metavar="FILE", help="Records written by `octlm registry export`.")]
PrefixOption = Annotated[
    str | None,
    typer.Option(
        "--prefix",
        metavar="PREFIX",
        help="Rename the imported experiments that are new here: --prefix B- imports EXP-001 as B-EXP-001.",
        show_default=False,
    ),
]


@handled
def pack(
    ctx: typer.Context,
    experiment_id: IdArgument,
    output: PackOutputOption,
    step: StepOption = None,
    all_checkpoints: AllCheckpointsOption = False,
    as_json: JsonOption = False,
) -> None:
    """Write one experiment (YAML, tokenizer, the newest or chosen checkpoints with their .sha256 files, run
    files, registry rows) to a tar file, to `octlm unpack` in another home."""
    from octlm.exchange import packing

    if step is not None and all_checkpoints:
        raise BadInput("--step and --all-checkpoints cannot be used together: choose one")
    report = packing.pack(home_of(ctx), experiment_id, Path(output), step=step, every=all_checkpoints)
    if as_json:
        render.emit_json(report)
        return
    print(
        f"{report['experiment']}: packed to {render.plain(report['file'])} ({report['bytes']:,} bytes; "
        f"{_checkpoints(report['steps'])})"
    )


@handled
def unpack(
    ctx: typer.Context,
    file: PackArgument,
    as_id: AsOption = None,
    allow_outside_sources: OutsideSourcesOption = False,
    as_json: JsonOption = False,
) -> None:
    """Verify a pack's checksums, then add its experiment to this home (files and rows); `octlm resume ID`
    continues it. Unpacking the same pack again changes nothing."""
    from octlm.exchange import packing

    report = packing.unpack(home_of(ctx), Path(file), as_id, allow_outside_sources=allow_outside_sources)
    if as_json:
        render.emit_json(report)
        return
    name = report["experiment"] + (f" (from {report['from']})" if report["from"] != report["experiment"] else "")
    if not report["changed"]:
        print(f"{name}: already here, nothing changed")
        return
    checkpoints = _checkpoints(report["checkpoints"])
    print(f"{name}: unpacked ({checkpoints}); continue it with `octlm resume {report['experiment']}`")


def _checkpoints(steps: list[int]) -> str:
    return f"checkpoints at steps {', '.join(map(str, steps))}" if steps else "no checkpoints"


@handled
def export(
    ctx: typer.Context, ids: ExportIdsArgument = None, output: ExportOutputOption = None, as_json: JsonOption = False
) -> None:
    """Write the registry's records (experiments with their YAML, runs, checkpoints as remote, verdicts, notes,
    run files) as JSON Lines, to `octlm registry import` into another home."""
    from octlm.exchange import records as exchange

    summary, text = exchange.export(home_of(ctx), list(ids or []), Path(output) if output else None)
    if output is None:
        print(text, end="")  # the records are JSON already (--json changes nothing)
    elif as_json:
        render.emit_json(summary)
    else:
        counts = ", ".join(f"{kind} {n}" for kind, n in summary["records"].items()) or "none"
        exported = counted(len(summary["experiments"]), "experiment")
        print(f"exported {exported} to {render.plain(output)} (records: {counts})")


@handled
def import_(
    ctx: typer.Context,
    file: ImportArgument,
    prefix: PrefixOption = None,
    allow_outside_sources: OutsideSourcesOption = False,
    as_json: JsonOption = False,
) -> None:
    """Merge another home's records (from `octlm registry export`) into this registry, in one transaction,
    matched by UUID: importing the same file again changes nothing."""
    from octlm.exchange import importing

    report = importing.import_file(home_of(ctx), Path(file), prefix, allow_outside_sources=allow_outside_sources)
    if as_json:
        render.emit_json(report)
        return
    for item in report["experiments"]:
        renamed = f" (from {item['from']})" if item["from"] != item["id"] else ""
        print(f"{item['id']}{renamed}: {'new' if item['status'] == 'new' else 'already here'}")
    print(_rows_line(report))


def _rows_line(report: Imported) -> str:
    if not report["changed"]:
        return "nothing changed"
    rows = ", ".join(counted(n, table.removesuffix("s"), table) for table, n in report["rows"].items()) or "no rows"
    return f"imported {rows}; wrote {counted(len(report['files']), 'file')}"


COMMANDS: dict[str, Callable[..., Any]] = {"pack": pack, "unpack": unpack}
REGISTRY_COMMANDS: dict[str, Callable[..., Any]] = {"export": export, "import": import_}
