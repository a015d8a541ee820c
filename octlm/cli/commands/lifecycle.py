"""Commands of an experiment's lifecycle: ``new`` (with ``--from`` and the fork ``--init-from``), ``rm``,
``archive``, ``unarchive``, ``tag`` and ``note``. Torch-free."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer

from octlm.cli import render
from octlm.cli.common import IdArgument, JsonOption, SetOption, handled, home_of
from octlm.config import Config
from octlm.config.presets import DESCRIPTIONS
from octlm.core.errors import BadInput, Refused
from octlm.core.home import DEFAULT_PREFIX, validate_prefix
from octlm.core.reporting import counted
from octlm.tasks import lifecycle

PREFIX_VARIABLE = "OCTLM_ID_PREFIX"
NewIdArgument = Annotated[
    str | None,
    typer.Argument(
        metavar="[ID]",
        help="EXP-008, BOX-001, B-EXP-001: letter-led segments joined by '-', then '-' and digits (at most 64 "
        "characters); omitted: the next EXP-NNN (or PREFIX then NNN) never given in this home, even to an "
        "experiment removed since.",
        show_default=False,
    ),
]
IdPrefixOption = Annotated[
    str | None,
    typer.Option(
        "--id-prefix",
        metavar="PREFIX",
        help="Without an ID: allocate PREFIX then NNN after the highest number ever given with that prefix, e.g. "
        f"BOX- gives BOX-001 (default: ${PREFIX_VARIABLE}, else EXP-).",
        show_default=False,
    ),
]
PresetOption = Annotated[
    str | None,
    typer.Option(
        "--preset",
        metavar="NAME",
        help="Start from a preset (default day1). " + "; ".join(f"{n}: {t}" for n, t in DESCRIPTIONS.items()) + ".",
        show_default=False,
    ),
]
FromOption = Annotated[
    str | None,
    typer.Option(
        "--from",
        metavar="ID",
        help="Copy the config of an existing experiment (the description then says so, with the --set keys).",
        show_default=False,
    ),
]
InitFromOption = Annotated[
    str | None,
    typer.Option(
        "--init-from",
        metavar="ID@STEP",
        help="Fork: step 0 loads the weights of that checkpoint (its path and sha256 go into the config's init "
        "section). Without --from or --preset, that experiment's config is the base.",
        show_default=False,
    ),
]
WithOptimizerOption = Annotated[
    bool, typer.Option("--with-optimizer", help="With --init-from: also its optimizer and sampler state.")
]
SeedsOption = Annotated[
    int,
    typer.Option(
        "--seeds",
        metavar="S",
        help="Make S replicates differing only in training.seed (the config's seed, +1, ...); prints each ID.",
    ),
]
DescriptionOption = Annotated[
    str | None,
    typer.Option(
        "--description", metavar="TEXT", help="One line saying what this experiment tries.", show_default=False
    ),
]


@handled
def new(
    ctx: typer.Context,
    experiment_id: NewIdArgument = None,
    preset: PresetOption = None,
    from_id: FromOption = None,
    overrides: SetOption = None,
    description: DescriptionOption = None,
    init_from: InitFromOption = None,
    with_optimizer: WithOptimizerOption = False,
    id_prefix: IdPrefixOption = None,
    seeds: SeedsOption = 1,
    as_json: JsonOption = False,
) -> None:
    """Write experiments/<ID>.yaml and register it; print the ID on stdout."""
    prefix = _id_prefix(experiment_id, id_prefix)
    if seeds != 1 and experiment_id is not None:
        raise BadInput(f"--seeds {seeds} makes several experiments: give no ID (or --id-prefix)")
    asked = lifecycle.NewExperiment(
        experiment_id=experiment_id,
        prefix=prefix,
        preset=preset,
        from_id=from_id,
        overrides=tuple(overrides or ()),
        description=description,
        init_from=init_from,
        with_optimizer=with_optimizer,
        seeds=seeds,
    )
    home = home_of(ctx)
    made = lifecycle.new(home, asked)  # the use case: built, checked, written and registered
    if seeds != 1:
        return _replicates(made.configs, as_json)
    created = made.configs[0]
    if made.twins:
        render.warn(f"same config fingerprint as {', '.join(made.twins)}")
    path = home.config_path(created.id)
    if as_json:
        render.emit_json(
            {
                "id": created.id,
                "path": str(path),
                "config_hash": created.fingerprint,
                "same_fingerprint": made.twins,
                "config": created.to_dict(),
            }
        )
    else:
        print(created.id)
        render.info(f"wrote {path}")


def _replicates(made: list[Config], as_json: bool) -> None:
    """``new --seeds S``: the replicates, their IDs one a line (``--json``: each with its seed)."""
    if as_json:
        render.emit_json({"ids": [c.id for c in made], "seeds": [c.training.seed for c in made]})
        return
    for created in made:
        print(created.id)
    first, last = made[0].training.seed, made[-1].training.seed
    seeds_shown = f"seeds {first} to {last}" if len(made) > 1 else f"seed {first}"
    render.info(f"wrote {counted(len(made), 'replicate')} of one config, {seeds_shown}")


def _id_prefix(experiment_id: str | None, option: str | None) -> str:
    """The prefix of an allocated ID: ``--id-prefix``, else ``OCTLM_ID_PREFIX`` (when set and not empty), else
    ``EXP-``; an invalid one is a one-line error naming where it came from, even when an ID is given."""
    if option is not None:
        if experiment_id is not None:
            raise BadInput(f"--id-prefix goes without an ID: give {experiment_id} or --id-prefix {option}, not both")
        return validate_prefix(option, "--id-prefix")
    variable = os.environ.get(PREFIX_VARIABLE, "")
    return validate_prefix(variable, PREFIX_VARIABLE) if variable else DEFAULT_PREFIX


KeepFilesOption = Annotated[
    bool, typer.Option("--keep-files", help="Remove only the registry rows; leave every file in place.")
]
YesOption = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask (needed when stdin is not a terminal).")]
TagsArgument = Annotated[
    list[str] | None,
    typer.Argument(
        metavar="[+TAG|-TAG]...", help="+name adds a tag, -name removes one; none: print the tags.", show_default=False
    ),
]
NoteArgument = Annotated[
    list[str] | None,
    typer.Argument(
        metavar="[TEXT]...", help="The note (words joined by spaces); none: print the notes.", show_default=False
    ),
]


def _interactive() -> bool:
    return sys.stdin.isatty()


def _count(rows: dict[str, int]) -> str:
    return "rows " + ", ".join(f"{table} {n}" for table, n in rows.items()) if rows else "no rows"


@handled
def rm(
    ctx: typer.Context,
    experiment_id: IdArgument,
    keep_files: KeepFilesOption = False,
    yes: YesOption = False,
    as_json: JsonOption = False,
) -> None:
    """Remove an experiment: its registry rows (runs, checkpoints, verdicts, metrics, notes) and its files
    (experiments/ID.yaml, checkpoints/ID/, runs/ID*.jsonl, locks/ID.lock). Asks first unless --yes;
    refuses while the experiment is being trained."""
    home = home_of(ctx)
    plan = lifecycle.removal(home, experiment_id)
    if not yes:
        if not _interactive():
            raise BadInput(f"rm {experiment_id} asks before removing, and stdin is not a terminal: pass --yes")
        files = "" if keep_files else f"; files {', '.join(plan['files'])}"
        if not typer.confirm(f"remove {experiment_id}: {_count(plan['rows'])}{files}?", err=True):
            raise Refused(f"rm {experiment_id} cancelled: nothing was removed")
    result = lifecycle.remove(home, experiment_id, keep_files=keep_files)
    if as_json:
        render.emit_json(result)
        return
    kept = "; files kept" if keep_files else f"; files {', '.join(result['files']) or 'none'}"
    print(render.plain(f"removed {experiment_id}: {_count(result['rows'])}{kept}"))


def _archive(ctx: typer.Context, experiment_id: str, archived: bool, as_json: bool) -> None:
    result = lifecycle.set_archived(home_of(ctx), experiment_id, archived)
    if as_json:
        render.emit_json(result)
    else:
        word = "archived" if archived else "unarchived"
        print(f"{word} {experiment_id}" if result["changed"] else f"{experiment_id} was {word} already")


@handled
def archive(ctx: typer.Context, experiment_id: IdArgument, as_json: JsonOption = False) -> None:
    """Archive an experiment: `octlm show` lists it only with --all; nothing is removed."""
    _archive(ctx, experiment_id, True, as_json)


@handled
def unarchive(ctx: typer.Context, experiment_id: IdArgument, as_json: JsonOption = False) -> None:
    """Bring an archived experiment back into `octlm show`."""
    _archive(ctx, experiment_id, False, as_json)


@handled
def tag(
    ctx: typer.Context, experiment_id: IdArgument, changes: TagsArgument = None, as_json: JsonOption = False
) -> None:
    """Add (+name) or remove (-name) tags of an experiment; prints its tags."""
    result = lifecycle.retag(home_of(ctx), experiment_id, changes or [])
    if as_json:
        render.emit_json(result)
    else:
        print(render.plain(" ".join(result["tags"])) if result["tags"] else f"{experiment_id} has no tags")


@handled
def note(ctx: typer.Context, experiment_id: IdArgument, text: NoteArgument = None, as_json: JsonOption = False) -> None:
    """Add a note to an experiment (shown by `octlm show ID`); without text, print its notes."""
    home = home_of(ctx)
    if text:
        added = lifecycle.add_note(home, experiment_id, " ".join(text))
        if as_json:
            render.emit_json(added)
        else:
            print(f"noted {experiment_id} (note {added['id']})")
        return
    found = lifecycle.notes(home, experiment_id)
    if as_json:
        render.emit_json({"id": experiment_id, "notes": found})
    for row in [] if as_json else found:
        print(render.plain(f"{(row['created'] or '')[:16].replace('T', ' ')}  {row['text']}", multiline=True))


# Lifecycle commands after ``new``, in the order ``octlm --help`` lists them (app.py registers them).
COMMANDS: dict[str, Callable[..., Any]] = {
    "rm": rm,
    "archive": archive,
    "unarchive": unarchive,
    "tag": tag,
    "note": note,
}
# Click context settings a command needs beyond the defaults: `tag ID -name` passes -name on as a tag
# (registered with `app.command(name, context_settings=CONTEXT_SETTINGS.get(name))`); until then `--` does.
CONTEXT_SETTINGS: dict[str, dict[str, Any]] = {"tag": {"ignore_unknown_options": True}}
