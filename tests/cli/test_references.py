"""Issue 35 item 3: the references are generated from the code and never drift from it. Each page under
``docs/reference/`` (and the site's front page, made from the README) must be what ``python -m octlm.cli.reference``
writes now: a renamed option, a new config key or a changed JSON shape without a regenerated page fails here."""

from __future__ import annotations

import pytest
from conftest import REPO

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
