"""``octlm report`` (an experiment's notebook page as one HTML file) and ``octlm export``: a checkpoint in Hugging
Face's format, or its tensors alone (``export checkpoint``, which ``export ID`` means), and runs' records for a
tracker (``export tensorboard``, ``export csv``: a subcommand a row of ``exchange.trackers.TRACKERS``, its help the
row's). ``report`` and the trackers' export are torch-free; the checkpoint's use case loads torch inside the command,
and its table of formats (``tasks.export.EXPORT_FORMATS``, torch-free) gives ``--format`` its choices and help.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from octlm.cli import render
from octlm.cli.common import IdArgument, JsonOption, complete_ids, handled, home_of
from octlm.core.reporting import counted
from octlm.exchange.trackers import TRACKERS
from octlm.tasks.export import EXPORT_FORMATS

IdsArgument = Annotated[
    list[str],
    typer.Argument(metavar="ID", help="One experiment: its page; several: side by side.", autocompletion=complete_ids),
]
OutputOption = Annotated[
    Path | None,
    typer.Option(
        "--output",
        "-o",
        metavar="FILE.html",
        help="Write the page to this file (default: stdout): a file is replaced atomically, a device or a FIFO "
        "(/dev/stdout) written in place; a folder is refused.",
        show_default=False,
    ),
]
FormatOption = Annotated[
    str,
    typer.Option(
        "--format",
        metavar="|".join(EXPORT_FORMATS),
        help="; ".join(f"{name}: {row.help}" for name, row in EXPORT_FORMATS.items()) + ".",
    ),
]
DirOption = Annotated[
    Path, typer.Option("--output", "-o", metavar="DIR", help="The folder to write (created).", show_default=False)
]
ForceOption = Annotated[bool, typer.Option("--force", help="Replace DIR when it exists and is not empty.")]
NamesArgument = Annotated[
    list[str],
    typer.Argument(
        metavar="ID|SWEEP",
        help="Experiments (their run files), or a sweep's name (its trials that have records).",
        autocompletion=complete_ids,
    ),
]
ExportStepOption = Annotated[
    int | None,
    typer.Option(
        "--step",
        metavar="N",
        help="Export the checkpoint at step N (default: the newest valid one).",
        show_default=False,
    ),
]


@handled
def report(ctx: typer.Context, experiment_ids: IdsArgument, output: OutputOption = None) -> None:
    """Write an experiment's lab-notebook page, or several side by side, as one self-contained HTML file.

    One ID: description, status, fingerprints, charts (train and eval loss by step and by tokens, learning
    rate, gradient norm with the clip threshold, bits per byte), verdicts (verify-resume's checks; overfit
    beside the seed notebook's figures), runs with provenance, checkpoints and the config. Several IDs: the
    comparison of `octlm show A B`, the curves overlaid, then each experiment. Inline SVG with the value
    of each point on hover; no script, no external file: it opens offline.
    """
    from octlm.views import report as reports  # here: --help never loads the report's views

    html = reports.report(home_of(ctx), list(experiment_ids))
    if output is None:
        sys.stdout.write(html)
    else:
        reports.save(output, html)
        render.info(f"wrote {output} ({len(html.encode('utf-8')):,} bytes)")


@handled
def export_checkpoint(
    ctx: typer.Context,
    experiment_id: IdArgument,
    output: DirOption,
    step: ExportStepOption = None,
    export_format: FormatOption = "hf",
    force: ForceOption = False,
    as_json: JsonOption = False,
) -> None:
    """Export a checkpoint as a Hugging Face Llama model (or its weights alone as safetensors).

    `octlm export ID` means `octlm export checkpoint ID`. The checkpoint is checked as `sample` checks it (its
    experiment, its fingerprints). The folder is written beside DIR, then renamed into place: DIR is whole or
    untouched. Needs the hf extra: pip install 'octlm[hf]'.
    """
    from octlm.tasks import export as exporting

    result = exporting.export(
        home_of(ctx), experiment_id, output, step=step, export_format=export_format, force=force, warn=render.warn
    )
    if as_json:
        render.emit_json(result)
    else:
        files = ", ".join(result["files"])
        print(f"{experiment_id}: step {result['step']} exported as {result['format']} to {result['dir']}: {files}")


def tracker_command(name: str) -> Callable[..., Any]:
    """``octlm export NAME``: the runs' records for the tracker ``NAME`` of ``TRACKERS``, its help the row's."""

    def command(
        ctx: typer.Context,
        names: NamesArgument,
        output: DirOption,
        force: ForceOption = False,
        as_json: JsonOption = False,
    ) -> None:
        from octlm.exchange import tracking

        result = tracking.export_runs(home_of(ctx), name, list(names), output, force)
        if as_json:
            render.emit_json(result)
            return
        for run in result["runs"]:
            print(f"{run['group']}/{run['id']}: {run['records']} records")
        skipped = f"; left out (no records yet): {', '.join(result['skipped'])}" if result["skipped"] else ""
        print(f"exported {counted(len(result['runs']), 'run')} for {name} to {result['dir']}{skipped}")

    command.__doc__ = f"""Write runs' records for a tracker: {TRACKERS[name].help}.

    One folder a group of seed replicates (a configuration: named by the keys that set it apart), a run's files
    in it under its ID; a sweep's name exports its trials. DIR is written beside, then renamed into place.
    """
    command.__name__ = f"export_{name}"
    return handled(command)


EXPORT_COMMANDS: dict[str, Callable[..., Any]] = {
    "checkpoint": export_checkpoint,
    **{name: tracker_command(name) for name in TRACKERS},
}
