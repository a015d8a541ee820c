"""Help as a person reads it: every command with examples, readable usage lines, whole summaries, shell completion of
IDs and --set keys.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import IDS, cli

from octlm.cli import app as cli_app


def commands() -> list[list[str]]:
    exports = [["export", name] for name in cli_app.commands_report.EXPORT_COMMANDS]
    return [*([str(c.name)] for c in cli_app.app.registered_commands), ["config", "keys"], ["export"], *exports]


@pytest.mark.parametrize("command", commands(), ids=" ".join)
def test_every_command_has_examples_h_and_readable_usage(tmp_path: Path, command: list[str]) -> None:
    result = cli(tmp_path, *command, "-h")
    assert result.exit_code == 0, result.stderr
    usage = result.stdout.split("Examples:", 1)
    assert len(usage) == 2 and f"octlm {' '.join(command)}" in usage[1]
    for unreadable in ("[[", "<list", "<str>", "<int>", "{ID}"):
        assert unreadable not in result.stdout, unreadable


def test_examples_of_owned_commands_name_real_options() -> None:
    for name in ("show", "doctor", "bench"):
        command = next(c for c in cli_app.app.registered_commands if c.name == name)
        flags = {
            flag
            for p in cli_app.typer.main.get_command_from_info(
                command, pretty_exceptions_short=True, rich_markup_mode=None
            ).params
            for flag in getattr(p, "opts", [])
        }
        for line in cli_app.EXAMPLES[name]:
            assert {word for word in line.split() if word.startswith("--")} <= flags, line


def test_root_help_lists_whole_summaries_in_panels(tmp_path: Path) -> None:
    """Issue 35 item 7: the commands in panels, every one of them in one, each summary whole."""
    from octlm.cli.app import PANELS

    result = cli(tmp_path, "-h")
    listed = result.stdout.split("Experiments:")[1].split("Examples:")[0]
    assert result.exit_code == 0 and "..." not in listed
    assert "--install-completion" in result.stdout and "Examples:" in result.stdout
    headings = [line[:-1] for line in result.stdout.splitlines() if line.endswith(":") and not line.startswith(" ")]
    assert (
        [h for h in headings if h in PANELS] == list(PANELS) and "Other" not in headings and "Commands" not in headings
    )
    every = {name for names in PANELS.values() for name in names}
    assert every == set(cli_app.COMMANDS) | {"config", "registry", "sweep", "export"}


def complete(home: Path, words: str) -> list[str]:
    script = Path(sys.executable).parent / "octlm"
    env = {
        **os.environ,
        "_OCTLM_COMPLETE": "complete_bash",
        "COMP_WORDS": words,
        "COMP_CWORD": str(len(words.split()) - 1),
    }
    done = subprocess.run([str(script)], capture_output=True, text=True, env=env, timeout=60, cwd=home)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_completion_of_ids_and_set_keys(five: Path) -> None:
    assert complete(five, "octlm show EXP-00") == IDS
    assert complete(five, f"octlm --home {five} train EXP-004") == ["EXP-004"]
    assert complete(five, "octlm new --set training.learning_r") == ["training.learning_rate="]
