"""The Typer app: the one place that creates it and registers every command, and the classes its commands and
groups are made of: every option value checked once parsed (finite, within its limit, valid UTF-8:
``StrictCommand``), help that reads as a person writes it and ends with its examples (``EXAMPLES``), the root's
commands listed in panels (``PANELS``), and usage errors as one line with exit 2 (``OctlmGroup``).

Commands are thin: they parse options, call one use case and render the result.
Exit codes: ``core/errors.EXIT_CODES``, which ``octlm -h`` says (and the scripting guide's table holds).
Torch and tokenizers are imported only inside the commands that train or sample, so
``octlm --help``, ``octlm show`` and ``octlm new`` start fast. The command modules import
``common`` and never this module, so the CLI has no import cycle.
"""

from __future__ import annotations

import inspect
import math
import sys
from collections.abc import Callable, Sequence
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

from octlm.cli import common, render
from octlm.cli.commands import boxes as commands_boxes
from octlm.cli.commands import canary as commands_canary
from octlm.cli.commands import config as commands_config
from octlm.cli.commands import evaluation as commands_evaluation
from octlm.cli.commands import experiments as commands_experiments
from octlm.cli.commands import lifecycle as commands_lifecycle
from octlm.cli.commands import report as commands_report
from octlm.cli.commands import sweeps as commands_sweeps
from octlm.cli.commands import tools as commands_tools
from octlm.cli.commands import training as commands_training
from octlm.config.validation import shown
from octlm.core.errors import BAD_INPUT, BadInput, OctlmError, exit_codes_said
from octlm.core.home import ID_PATTERN
from octlm.core.provenance import __version__

HELP = (
    "Train miniature decoder-only language models with a loop that resumes exactly, and prove it.\n\n"
    f"Exit codes (docs/guide/scripting.md): {exit_codes_said()}."
)
HomeOption = Annotated[
    str | None,
    typer.Option(
        "--home",
        metavar="DIR",
        help="Home folder (default: OCTLM_HOME, else the nearest folder with experiments/ or registry.db, "
        "else the current one).",
        show_default=False,
    ),
]


def _version(value: bool) -> None:
    if value:
        print(f"octlm {__version__}")
        raise typer.Exit()


VersionOption = Annotated[
    bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
]


def _root(ctx: typer.Context, home: HomeOption = None, version: VersionOption = False) -> None:
    ctx.obj = {"home": home}  # read by common.home_of


HELP_OPTIONS = {"help_option_names": ["-h", "--help"]}
# The ``Examples:`` section of each command's help, by command name (``config keys`` for a subcommand). Commands
# registered from other modules (``commands_lifecycle.COMMANDS``) take theirs from here too.
EXAMPLES: dict[str, tuple[str, ...]] = {
    "octlm": (
        "octlm new --preset day1 --description 'first try'",
        "octlm train EXP-001",
        "octlm show",
        "octlm show EXP-001 EXP-002",
        "octlm --install-completion",
    ),
    "new": (
        "octlm new --preset day1",
        "octlm new EXP-010 --set training.steps=300 --description 'longer'",
        "octlm new --from EXP-008 --set training.learning_rate=1e-3",
        "octlm new --from EXP-008 --init-from EXP-008@200 --set training.steps=400",
        "octlm new --id-prefix BOX-",
        "octlm new --from EXP-008 --set training.learning_rate=1e-3 --seeds 3",
    ),
    "show": (
        "octlm show",
        "octlm show --where 'eval_loss<4' --sort eval_loss --limit 5",
        "octlm show --where status=completed --where 'description~warmup'",
        "octlm show --all",
        "octlm show --columns eval_loss,training.learning_rate --csv",
        "octlm show EXP-008",
        "octlm show EXP-008 EXP-009 --all-keys",
        "octlm show EXP-008 EXP-009 --plot",
        "octlm show EXP-008 --json",
        "octlm show lr",
    ),
    "train": (
        "octlm train EXP-008",
        "octlm train EXP-008 --until 100",
        "octlm train EXP-008 --restart --yes",
        "octlm train EXP-008 --nproc 4",
        "octlm train EXP-008 --nproc 2 --nnodes 2 --node-rank 0 --rdzv-endpoint 10.0.0.1:29500",
    ),
    "resume": (
        "octlm resume EXP-008",
        "octlm resume EXP-008 --step 100 --until 200",
        "octlm resume EXP-008 --nproc 4",
        "octlm resume EXP-008 --nproc 2 --reshard",
    ),
    "verify-resume": (
        "octlm verify-resume EXP-008 --split-at 50",
        "octlm verify-resume EXP-008 --split-at 50 --until 100",
        "octlm verify-resume EXP-008 --split-at 100 --nproc 4",
    ),
    "verify-run": (
        "octlm verify-run EXP-008",
        "octlm verify-run EXP-021 --nproc 2",
        "octlm verify-run EXP-008 --keep-scratch --json",
    ),
    "overfit": (
        "octlm overfit EXP-008",
        "octlm overfit EXP-008 --steps 300 --max-loss 0.5",
        "octlm overfit EXP-008 --nproc 2",
    ),
    "sample": (
        "octlm sample EXP-008 --prompt 'def '",
        "octlm sample EXP-008 --prompt 'import ' --temperature 0",
        "octlm sample EXP-008 --step 200 --max-new-tokens 64 --json",
    ),
    "doctor": ("octlm doctor", "octlm doctor --repair", "octlm doctor --json"),
    "eval": (
        "octlm eval EXP-008",
        "octlm eval EXP-008 --step 100 --tokens 16384",
        "octlm eval EXP-008 --on builtin:stdlib --tokens 65536 --json",
        "octlm eval EXP-020 --on 'notes/*.md' --on builtin:docs",
    ),
    "prepare": ("octlm prepare EXP-008", "octlm prepare EXP-020 --json"),
    "bench": (
        "octlm bench",
        "octlm bench EXP-008 --steps 20",
        "octlm bench --preset day2 --precision fp32,bf16",
        "octlm bench EXP-008 --nproc 2",
        "octlm bench --preset day2 --determinism local,cross-vendor,portable",
    ),
    "canary": ("octlm canary", "octlm canary EXP-020", "octlm canary --threads 4 --json"),
    "rm": ("octlm rm EXP-012", "octlm rm EXP-012 --yes", "octlm rm EXP-012 --keep-files"),
    "archive": ("octlm archive EXP-003", "octlm show --all"),
    "unarchive": ("octlm unarchive EXP-003",),
    "tag": ("octlm tag EXP-008 +baseline -old", "octlm show --where tags=baseline"),
    "note": ('octlm note EXP-008 "lr too high"', "octlm show EXP-008"),
    "report": (
        "octlm report EXP-008 -o EXP-008.html",
        "octlm report EXP-008 EXP-009 -o compare.html",
        "octlm report EXP-008 > EXP-008.html",
    ),
    "export": (
        "octlm export EXP-008 -o exported/EXP-008",
        "octlm export tensorboard EXP-008 EXP-009 -o tb && tensorboard --logdir tb",
        "octlm export csv lr -o csv",
    ),
    "export checkpoint": (
        "octlm export EXP-008 -o exported/EXP-008",
        "octlm export EXP-008 --step 100 -o out --force",
        "octlm export checkpoint EXP-008 --format safetensors -o weights --json",
    ),
    "export tensorboard": (
        "octlm export tensorboard EXP-008 EXP-009 -o tb",
        "octlm export tensorboard lr -o tb-lr && wandb sync tb-lr",
        "octlm export tensorboard lr -o tb-lr --force --json",
    ),
    "export csv": (
        "octlm export csv EXP-008 -o csv",
        "octlm export csv lr -o csv-lr --json",
    ),
    "pack": (
        "octlm pack EXP-008 -o EXP-008.tar",
        "octlm pack EXP-008 --step 100 -o EXP-008.tar --json",
        "octlm pack EXP-008 --all-checkpoints -o EXP-008-all.tar",
    ),
    "unpack": (
        "octlm unpack EXP-008.tar && octlm resume EXP-008",
        "octlm unpack EXP-008.tar --as B-EXP-008",
        "octlm unpack EXP-008.tar --json",
    ),
    "registry": ("octlm registry export -o box-a.jsonl", "octlm registry import box-b.jsonl --prefix B-"),
    "registry export": (
        "octlm registry export -o box-a.jsonl",
        "octlm registry export EXP-008 EXP-009 -o two.jsonl --json",
        "octlm registry export > box-a.jsonl",
    ),
    "registry import": (
        "octlm registry import box-a.jsonl",
        "octlm registry import box-b.jsonl --prefix B-",
        "octlm registry import box-b.jsonl --prefix B- --json",
    ),
    "sweep": (
        "octlm sweep new lr --from EXP-008 --grid training.learning_rate=1e-3,3e-3 --seeds 2",
        "octlm work lr --workers 2 --until-empty",
        "octlm sweep status lr",
    ),
    "sweep new": (
        "octlm sweep new lr --from EXP-008 --grid training.learning_rate=1e-3,3e-3 --seeds 2",
        "octlm sweep new lr2 --from EXP-008 --random 8 --range training.learning_rate=1e-4:1e-2:log",
        "octlm sweep new sh --from EXP-008 --grid model.n_layers=2,4 --halving 100,200 --keep 0.5",
        "octlm sweep new tpe --from EXP-008 --sampler tpe --trials 20 --range training.learning_rate=1e-4:1e-2:log",
    ),
    "sweep status": ("octlm sweep status lr", "octlm sweep status lr --json"),
    "sweep extend": (
        "octlm sweep extend lr --seeds 3",
        "octlm sweep extend lr --grid training.learning_rate=1e-2 --json",
    ),
    "sweep retry": ("octlm sweep retry lr", "octlm sweep retry sh --stopped --json"),
    "sweep pack": ("octlm sweep pack lr -o /shared/lr --shards 4", "octlm sweep pack lr -o /shared/lr/shard-0 --json"),
    "sweep unpack": (
        "octlm sweep unpack /shared/lr/shard-0",
        "for s in /shared/lr/shard-*; do octlm sweep unpack $s; done",
    ),
    "work": (
        "octlm work lr",
        "octlm work lr --workers 2 --until-empty",
        "octlm work --until-empty --json",
        "octlm work lr --workers 4 --threads 4",
        "octlm work lr --ray 10.0.0.1:6379 --until-empty",
    ),
    "watch": ("octlm watch", "octlm watch lr", "octlm watch EXP-008 EXP-009 --interval 5", "octlm watch lr --once"),
    "config": ("octlm config keys", "octlm config keys --json"),
    "config keys": ("octlm config keys", "octlm config keys --json"),
}


def examples(name: str) -> str | None:
    """The ``Examples:`` lines of a command (None: it has none yet)."""
    lines = EXAMPLES.get(name)
    return "\n".join(lines) if lines else None


def _typer(name: str, **options: Any) -> typer.Typer:
    return typer.Typer(
        **{"cls": OctlmGroup, **options},
        name=name,
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        context_settings=HELP_OPTIONS,
        epilog=examples(name),
    )


def register(group: typer.Typer, commands: dict[str, Callable[..., Any]], prefix: str = "") -> None:
    """Add ``commands`` to ``group``: every option checked (finite, within limits, UTF-8), ``-h``, examples."""
    for name, command in commands.items():
        settings = {**HELP_OPTIONS, **commands_lifecycle.CONTEXT_SETTINGS.get(name, {})}  # `tag ID -old`
        group.command(name, cls=StrictCommand, context_settings=settings, epilog=examples(prefix + name))(command)


# ---------------------------------------------------------------- the commands' classes: strict options, help

# Upper limits of options, by parameter name, in every command (and 2**63 for any integer): generous,
# but below where torch, an allocation or a loop over them would fail or run for ever.
OPTION_LIMITS: dict[str, float] = {
    "steps": 10**9,
    "until": 10**9,
    "step": 10**9,
    "limit": 10**9,
    "max_new_tokens": 100_000,
    "top_k": 2**20,
    "temperature": 1000.0,
    "max_loss": 1e6,
}
PATH_OPTIONS = frozenset({"home"})  # a path may hold any bytes the filesystem allows


def check_option(name: str, flag: str, value: Any) -> None:
    """BadInput naming ``flag`` unless ``value`` is finite, within its limit and valid UTF-8 text."""
    values = value if isinstance(value, (list, tuple)) else [value]
    for item in values:
        if isinstance(item, bool) or item is None:
            continue
        if isinstance(item, float) and not math.isfinite(item):
            raise BadInput(f"{flag} {item}: must be a finite number")
        limit = OPTION_LIMITS.get(name, 2**63 - 1)
        if isinstance(item, (int, float)) and item > limit:
            raise BadInput(f"{flag} {shown(item)}: must be at most {limit:,}")
        if isinstance(item, (int, float)) and item < -(2**63):
            raise BadInput(f"{flag} {shown(item)}: must be at least {-(2**63):,}")
        if isinstance(item, str) and name not in PATH_OPTIONS and any("\ud800" <= c <= "\udfff" for c in item):
            raise BadInput(f"{flag}: not valid UTF-8 text (undecodable bytes); give it in UTF-8")


class StrictCommand(TyperCommand):
    """A command whose every option value is checked (``check_option``) once parsed, before it runs; its
    help reads as a person writes it (``ID``, ``[ID]...``, no Python types) and ends with its examples."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        return pieces + [usage_name(p) for p in self.get_params(ctx) if p.param_type_name == "argument"]

    def format_options(self, ctx: Any, formatter: Any) -> None:
        params = self.get_params(ctx)
        arguments = [p for p in params if p.param_type_name == "argument" and not getattr(p, "hidden", False)]
        if arguments:
            with formatter.section("Arguments"):
                formatter.write_dl([(usage_name(p).strip("[]."), getattr(p, "help", None) or "") for p in arguments])
        options = [p.get_help_record(ctx) for p in params if p.param_type_name == "option"]
        if any(options):
            with formatter.section("Options"):
                formatter.write_dl([record for record in options if record])

    def get_short_help_str(self, limit: int = 45) -> str:
        return summary(self.help)

    def format_epilog(self, ctx: Any, formatter: Any) -> None:
        write_examples(self.epilog, formatter)

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        rest = super().parse_args(ctx, args)
        for param in self.get_params(ctx):
            option = param.param_type_name == "option"
            flag = max(param.opts, key=len) if option else str(getattr(param, "human_readable_name", param.name))
            check_option(param.name or "", flag, ctx.params.get(param.name or ""))
        return rest


def usage_name(param: Any) -> str:
    """An argument as the usage line shows it: ``ID`` (required), ``[ID]`` (optional), ``[ID]...`` (several)."""
    name = str(param.metavar or (param.name or "").upper())
    if name.startswith("["):
        return name
    many = "..." if param.nargs != 1 else ""
    return f"{name}{many}" if param.required else f"[{name}]{many}"


def summary(help_text: str | None) -> str:
    """A command's first paragraph, whole, as one line (``octlm --help`` never cuts it with ``...``)."""
    return " ".join(inspect.cleandoc(help_text or "").split("\n\n")[0].split())


def write_examples(epilog: str | None, formatter: Any) -> None:
    """The ``Examples:`` section: one command a line, as written (never re-wrapped)."""
    if not epilog:
        return
    formatter.write_paragraph()
    formatter.write("Examples:\n")
    for line in epilog.splitlines():
        formatter.write(f"  {line}\n" if line.strip() else "\n")


# The panels `octlm --help` lists its commands in, in order: where a user looks for each.
PANELS: dict[str, tuple[str, ...]] = {
    "Experiments": ("new", "show", "tag", "note", "archive", "unarchive", "rm"),
    "Training": ("train", "resume", "verify-resume", "verify-run", "overfit", "eval", "sample"),
    "Many runs": ("sweep", "work", "watch"),
    "Moving runs": ("pack", "unpack", "registry", "export"),
    "Tools": ("report", "bench", "canary", "prepare", "doctor", "config"),
}


class OctlmGroup(TyperGroup):
    """The root group: usage errors as one line (``octlm: error: ...``) with exit 2, and stdout flushed
    at the end with a closed pipe taken quietly, so no run of octlm ends in a traceback; its help lists the commands
    in ``PANELS`` (a group below it, such as ``sweep``, lists its own as they are)."""

    def get_short_help_str(self, limit: int = 45) -> str:
        return summary(self.help)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        if ctx.parent is not None:
            super().format_commands(ctx, formatter)
            return
        known = {name: self.get_command(ctx, name) for name in self.list_commands(ctx)}
        shown = [name for names in PANELS.values() for name in names]
        panels = {**PANELS, "Other": tuple(name for name in known if name not in shown)}
        for panel, names in panels.items():
            rows = [(name, command.get_short_help_str()) for name in names if (command := known.get(name)) is not None]
            if rows:
                with formatter.section(panel):
                    formatter.write_dl(rows)

    def format_epilog(self, ctx: Any, formatter: Any) -> None:
        write_examples(self.epilog, formatter)

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        try:
            result = super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
            code = result if isinstance(result, int) and not isinstance(result, bool) else 0
        except typer.TyperException as error:
            code = _usage_error(error)
        except typer.Abort:
            render.error("aborted")
            code = 1
        except OctlmError as error:  # a bad option value found by StrictCommand
            code = common.report(error) or 1
        if not standalone_mode:
            return code
        common.finish(code)


class ExportGroup(OctlmGroup):
    """``octlm export``: a checkpoint's export (``checkpoint``) beside the trackers' (one subcommand a row of
    ``exchange.trackers.TRACKERS``); a first word that is an ID or an option is the checkpoint's, so
    ``octlm export ID -o DIR`` reads as it always has (an ID, ending in digits, never names a subcommand); any other
    word is a subcommand's name, or refused as one."""

    DEFAULT = "checkpoint"

    def format_usage(self, ctx: Any, formatter: Any) -> None:
        trackers = "|".join(name for name in self.commands if name != self.DEFAULT)
        formatter.write_usage(ctx.command_path, f"[{self.DEFAULT}] ID -o DIR [OPTIONS]")
        formatter.write_usage(ctx.command_path, f"{trackers} ID|SWEEP... -o DIR [OPTIONS]", prefix="       ")

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        first = args[0] if args else ""
        if first not in ctx.help_option_names and (ID_PATTERN.fullmatch(first) or first.startswith("-")):
            args = [self.DEFAULT, *args]  # anything else is a subcommand's name, or Click's one line on it
        return list(super().parse_args(ctx, args))


def _usage_error(error: typer.TyperException) -> int:
    if type(error).__name__ == "NoArgsIsHelpError":  # a bare `octlm`: the help, as usual
        show = getattr(error, "show", None)
        if show is not None:
            show()
    else:
        ctx = getattr(error, "ctx", None)
        hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
        render.error(error.format_message() + hint)
    return int(getattr(error, "exit_code", BAD_INPUT))


# ---------------------------------------------------------------- the app

COMMANDS: dict[str, Callable[..., Any]] = {  # in the order `octlm --help` lists them
    "new": commands_lifecycle.new,
    "show": commands_experiments.show,
    "train": commands_training.train,
    "resume": commands_training.resume,
    "verify-resume": commands_training.verify_resume,
    "verify-run": commands_training.verify_run,
    "overfit": commands_training.overfit,
    "sample": commands_training.sample,
    "eval": commands_evaluation.eval_command,
    "doctor": commands_tools.doctor,
    "prepare": commands_tools.prepare,
    "bench": commands_tools.bench,
    "canary": commands_canary.canary,
    "report": commands_report.report,
    **commands_lifecycle.COMMANDS,
    **commands_boxes.COMMANDS,
    **commands_sweeps.COMMANDS,
}
CONFIG_COMMANDS: dict[str, Callable[..., Any]] = {"keys": commands_config.keys}

app = _typer("octlm", help=HELP, add_completion=True)  # --install-completion, --show-completion
app.callback()(_root)
register(app, COMMANDS)
config_app = _typer("config", help="Describe the experiment config.", add_completion=False)
register(config_app, CONFIG_COMMANDS, prefix="config ")
app.add_typer(config_app)
registry_app = _typer("registry", help="Move registry records between homes (export, import).", add_completion=False)
register(registry_app, commands_boxes.REGISTRY_COMMANDS, prefix="registry ")
app.add_typer(registry_app)
export_app = _typer(
    "export",
    help="Export a checkpoint as a model (octlm export ID, which is octlm export checkpoint ID), or runs' records for "
    "a tracker.",
    add_completion=False,
    cls=ExportGroup,
)
register(export_app, commands_report.EXPORT_COMMANDS, prefix="export ")
app.add_typer(export_app)
sweep_app = _typer(
    "sweep", help="Many experiments: a sweep's trials in a queue (new, status, pack, unpack).", add_completion=False
)
register(sweep_app, commands_sweeps.SWEEP_COMMANDS, prefix="sweep ")
app.add_typer(sweep_app)


def main() -> None:
    try:
        app()  # OctlmGroup.main exits through common.finish: stdout flushed, a closed pipe taken quietly
    except KeyboardInterrupt:  # outside a training loop (which handles it itself)
        render.error("interrupted")
        sys.exit(130)
