"""The references generated from the code, never typed: every command as ``--help`` prints it
(``docs/reference/commands.md``, from the Typer application), every config key (``docs/reference/config.md``, from
the schema behind ``octlm config keys``), the documents ``--json`` writes (``docs/reference/json.md``, from the
TypedDicts that type them), and the site's front page (``docs/index.md``, the README with its links made the site's).
``python -m octlm.cli.reference`` writes every page; a test fails when a page differs from what the code says.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PAGES: dict[str, Callable[[], str]] = {}


def page(name: str) -> Callable[[Callable[[], str]], Callable[[], str]]:
    def register(build: Callable[[], str]) -> Callable[[], str]:
        PAGES[name] = build
        return build

    return register


def shapes() -> dict[str, object]:
    """{what is run: the TypedDict of what its ``--json`` writes}, every document that is typed."""
    from octlm.core.records import Checkup, EvalResult, Problem, ShownFingerprints, SourceFigures, TrainResult
    from octlm.exchange import results as exchange
    from octlm.run.overfit import Overfitted
    from octlm.store.registry import CheckpointRow, RunRow, VerificationRow
    from octlm.store.sweeps import records as sweeps
    from octlm.tasks.bench import records as bench
    from octlm.tasks.export import Exported
    from octlm.tasks.lifecycle import Archived, Removal, Retagged
    from octlm.tasks.prepare import Phase, Prepared
    from octlm.tasks.proof.audit import Audited
    from octlm.tasks.proof.bitcompare import Check, Differing
    from octlm.tasks.proof.verify import Resumed
    from octlm.tasks.sample import Sampled
    from octlm.tasks.sweeps.working.trial_log import RayEvent, TallyJson
    from octlm.train.canary import Canary
    from octlm.views.compare.noise import Effect, Verdict
    from octlm.views.compare.versus import Versus
    from octlm.views.compare.winner import Challenger, Optimism
    from octlm.views.curves.plots import PlotData
    from octlm.views.details import Detail
    from octlm.views.listing import Listing, ListingRow
    from octlm.views.paired import Paired
    from octlm.views.side_by_side import Comparison
    from octlm.views.sweeps.status import SweepRanking

    return {
        "octlm train ID --json, octlm resume ID --json": TrainResult,
        "octlm eval ID --json": EvalResult,
        "octlm eval ID --json: each of eval_sources": SourceFigures,
        "octlm show --json": Listing,
        "octlm show --json: each of experiments": ListingRow,
        "octlm show ID --json": Detail,
        "octlm show ID --json: its fingerprints": ShownFingerprints,
        "octlm show ID --json: each of runs": RunRow,
        "octlm show ID --json: each of checkpoints": CheckpointRow,
        "octlm show ID --json: each of verifications": VerificationRow,
        "octlm show A B --json": Comparison,
        "octlm show A B --json: each of versus": Versus,
        "octlm show A B --json: a versus's paired": Paired,
        "octlm show A B --json: a versus's run and configuration, octlm show SWEEP --json: best_against_next": Verdict,
        "octlm show A B --json: a verdict's effect": Effect,
        "octlm show ID --plot --json": PlotData,
        "octlm show SWEEP --json": SweepRanking,
        "octlm show SWEEP --json: each of challengers": Challenger,
        "octlm show SWEEP --json: optimism": Optimism,
        "octlm archive ID --json, octlm unarchive ID --json": Archived,
        "octlm tag ID --json": Retagged,
        "octlm rm ID --json": Removal,
        "octlm verify-resume ID --json": Resumed,
        "octlm verify-resume ID --json: each of checks": Check,
        "octlm verify-resume ID --json: each of a check's differing": Differing,
        "octlm verify-run ID --json": Audited,
        "octlm overfit ID --json": Overfitted,
        "octlm prepare ID --json": Prepared,
        "octlm prepare ID --json: each of phases": Phase,
        "octlm sample ID --json": Sampled,
        "octlm export ID DIR --json": Exported,
        "octlm export tensorboard|csv ID|SWEEP... -o DIR --json": exchange.TrackerExported,
        "octlm export tensorboard|csv ID|SWEEP... -o DIR --json: each of runs": exchange.TrackerRun,
        "octlm pack ID FILE --json": exchange.Packed,
        "octlm unpack FILE --json": exchange.Unpacked,
        "octlm registry export -o FILE --json": exchange.RegistryExported,
        "octlm registry import FILE --json": exchange.Imported,
        "octlm registry import FILE --json: each of experiments": exchange.Arrival,
        "octlm doctor --json": Checkup,
        "octlm doctor --json: each of problems": Problem,
        "octlm canary --json": Canary,
        "octlm bench --json": bench.BenchReport,
        "octlm bench --json: each of results": bench.Measured,
        "octlm bench --json: machine": bench.Machine,
        "octlm bench --nproc N --json": bench.RanksReport,
        "octlm bench --nproc N --json: each of results": bench.RanksRow,
        "octlm bench --determinism A,B --json": bench.ByProfile,
        "octlm sweep new NAME --json": sweeps.SweepCreated,
        "octlm sweep new NAME --json: each of trials": sweeps.Made,
        "octlm sweep extend NAME --json": sweeps.SweepExtended,
        "octlm sweep retry NAME --json": sweeps.SweepRetried,
        "octlm sweep pack NAME DIR --json": sweeps.SweepPacked,
        "octlm sweep unpack DIR --json": sweeps.SweepUnpacked,
        "octlm work --json": TallyJson,
        "octlm work --ray --json: each of events": RayEvent,
    }


def _annotations(shape: Any) -> dict[str, Any]:
    """Every key of a TypedDict with its annotation as written (its bases' first)."""
    found: dict[str, Any] = {}
    for base in reversed(shape.__mro__):
        found.update(getattr(base, "__annotations__", {}))
    return found


def keys(shape: Any) -> tuple[set[str], set[str]]:
    """(the keys a document always has, those it may have: ``NotRequired``) of a TypedDict."""
    written = _annotations(shape)
    optional = {key for key, hint in written.items() if "NotRequired" in str(hint)} | set(shape.__optional_keys__)
    return set(written) - optional, optional


def _type(hint: Any) -> str:
    text = getattr(hint, "__forward_arg__", hint) if not isinstance(hint, str) else hint
    text = str(text).replace("typing.", "").replace("octlm.", "")
    for wrapper in ("NotRequired[",):
        if text.startswith(wrapper):
            text = text[len(wrapper) : -1]
    return text.replace("|", "\\|")


@page("docs/reference/json.md")
def json_reference() -> str:
    lines = [
        "# What `--json` writes",
        "",
        "Generated from the code (`python -m octlm.cli.reference`): every key of every typed document, with its",
        "type; a key marked *optional* appears only where it applies. Tests run each command and hold its output",
        "to this page (`holds` in tests/conftest.py). Figures keep one name everywhere: `step`, `eval_loss`,",
        "`eval_loss_se`, `perplexity`, ...",
        "",
    ]
    for command, shape in shapes().items():
        _, optional = keys(shape)
        about = " ".join((shape.__doc__ or "").split()).replace("``", "`")
        lines += [f"## `{command}`", "", about, "", "| key | type |", "|---|---|"]
        for key, hint in _annotations(shape).items():
            lines.append(f"| `{key}`{' (optional)' if key in optional else ''} | `{_type(hint)}` |")
        lines.append("")
    return "\n".join(lines)


HELP_WIDTH = 100  # the width --help is rendered at for the page, whatever the terminal


def _commands(group: Any, ctx: Any, prefix: str) -> list[tuple[str, Any, Any]]:
    """(name, command, context) of every command under ``group``, depth first, in the order ``--help`` lists them."""
    found = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is None or getattr(command, "hidden", False):
            continue
        sub = _context(command, name, ctx)
        found.append((f"{prefix}{name}", command, sub))
        if hasattr(command, "list_commands"):
            found += _commands(command, sub, f"{prefix}{name} ")
    return found


def _context(command: Any, name: str, parent: Any = None) -> Any:
    """A context of ``command`` whose help is rendered at ``HELP_WIDTH`` (the command's own context class)."""
    return command.context_class(
        command, info_name=name, parent=parent, terminal_width=HELP_WIDTH, max_content_width=HELP_WIDTH
    )


@page("docs/reference/commands.md")
def commands_reference() -> str:
    import typer

    from octlm.cli.app import app

    root = typer.main.get_command(app)
    ctx = _context(root, "octlm")
    lines = [
        "# Commands",
        "",
        "Generated from the command line itself (`python -m octlm.cli.reference`): each command's `--help`, as it",
        "prints it. `octlm COMMAND -h` shows the same.",
        "",
        "## `octlm`",
        "",
        "```text",
        root.get_help(ctx).rstrip(),
        "```",
        "",
    ]
    for name, command, sub in _commands(root, ctx, ""):
        lines += [f"## `octlm {name}`", "", "```text", command.get_help(sub).rstrip(), "```", ""]
    return "\n".join(lines)


@page("docs/reference/config.md")
def config_reference() -> str:
    from octlm.cli.commands.config import default_text, keys_described

    lines = [
        "# Config keys",
        "",
        "Generated from the schema (`python -m octlm.cli.reference`), as `octlm config keys` lists them: every key of",
        "an experiment's YAML, its type, its default (as YAML writes it), whether it is in the fingerprint (a",
        "checkpoint continues only under the same fingerprint), and what it does.",
        "",
        "| key | type | default | fingerprinted | what it does |",
        "|---|---|---|---|---|",
    ]
    for key in keys_described():
        cells = (
            f"`{key['key']}`",
            key["type"],
            f"`{default_text(key['default'])}`",
            "yes" if key["fingerprinted"] else "no",
            key["doc"],
        )
        lines.append("| " + " | ".join(str(cell).replace("|", "\\|") for cell in cells) + " |")
    return "\n".join([*lines, ""])


@page("docs/index.md")
def site_index() -> str:
    """The README, its links made relative to ``docs/`` (where the site is built from)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    text = text.replace("](docs/", "](")
    return "<!-- Generated from README.md by python -m octlm.cli.reference: edit the README. -->\n\n" + text


def write(root: Path = ROOT) -> list[str]:
    """Write every page under ``root``; the ones that changed."""
    changed = []
    for name, build in PAGES.items():
        path, text = root / name, build()
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            changed.append(name)
    return changed


if __name__ == "__main__":
    written = write()
    sys.stdout.write("".join(f"wrote {name}\n" for name in written) or "every reference is up to date\n")
