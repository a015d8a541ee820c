"""Issue 35 item 3: the references are generated from the code and never drift from it. Each page under
``docs/reference/`` (and the site's front page, made from the README) must be what ``python -m octlm.cli.reference``
writes now: a renamed option, a new config key or a changed JSON shape without a regenerated page fails here."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import REPO, cli

from octlm.cli import reference


@pytest.mark.parametrize("name", sorted(reference.PAGES))
def test_each_generated_page_is_what_the_code_says(name: str) -> None:
    text = (REPO / name).read_text(encoding="utf-8")
    assert text == reference.PAGES[name](), f"{name} is stale: run python -m octlm.cli.reference"


def test_the_command_reference_holds_every_command_and_option() -> None:
    import typer

    from octlm.cli.app import app

    page = reference.commands_reference()
    root = typer.main.get_command(app)
    for name, command, _ in reference._commands(root, reference._context(root, "octlm"), ""):
        assert f"## `octlm {name}`" in page
        for param in [p for p in command.params if not getattr(p, "hidden", False)]:
            for flag in getattr(param, "opts", []):
                if flag.startswith("--"):
                    assert flag in page, (name, flag)


def test_the_config_reference_holds_every_key() -> None:
    from octlm.config import describe_keys

    page = reference.config_reference()
    assert all(f"| `{key['key']}` |" in page for key in describe_keys())


def test_the_exit_codes_are_one_list_that_help_the_reference_and_the_guide_say(tmp_path: Path) -> None:
    """Issue 45 item 1: `octlm -h` listed 0-3 while the scripting guide added 4, 129, 130, 143 (and `work` had no code
    for a failed trial). One list, ``core/errors.EXIT_CODES``: `octlm -h` says it whole, the command reference
    (generated from `-h`) with it, and the guide's table has its rows in its order, each meaning in its words first;
    every code octlm exits with by name is in it."""
    from octlm.core import errors

    said = f"Exit codes (docs/guide/scripting.md): {errors.exit_codes_said()}."
    helped = cli(tmp_path, "-h")
    assert helped.exit_code == 0 and said in " ".join(helped.stdout.split())
    assert said in " ".join(reference.commands_reference().split())
    guide = (REPO / "docs" / "guide" / "scripting.md").read_text(encoding="utf-8")
    table = guide.split("### Exit codes", 1)[1].split("\n### ", 1)[0]
    rows = [line.strip("|").split(" | ", 1) for line in table.splitlines() if line.startswith("| ")][1:]
    assert [codes.strip() for codes, _ in rows] == [row.codes for row in errors.EXIT_CODES]
    for (_, meaning), row in zip(rows, errors.EXIT_CODES, strict=True):
        assert meaning.startswith(row.meaning), (row.codes, meaning[:80])
    listed = {int(code) for row in errors.EXIT_CODES for code in row.codes.split(" / ")}
    named = {value for name, value in vars(errors).items() if name.isupper() and isinstance(value, int)}
    assert named - {errors.SIGNALLED} <= listed and {errors.SIGNALLED + s for s in errors.STOPPING} <= listed
