"""Tables on a terminal and in pipes: every value whole at 80 and 120 columns, narrow terminals say what they leave
out, numbers formatted by their kind, notes never wrapped.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import IDS, cli

from octlm.cli import formats, render, show_view
from octlm.cli.commands import tools as commands_tools
from octlm.core.home import Home
from octlm.views import show as shows

BOX = set("─│━┃┌┐└┘├┤┬┴┼═║╭╮╰╯")


def terminal(monkeypatch: pytest.MonkeyPatch, width: int) -> io.StringIO:
    """Make the views draw for a terminal ``width`` columns wide; returns what they draw."""
    buffer = io.StringIO()
    console = render.PlainConsole(width=width, file=buffer, force_terminal=True, color_system=None, soft_wrap=False)
    monkeypatch.setattr(render, "terminal", lambda: True)
    monkeypatch.setattr(render, "out_console", lambda: console)
    return buffer


def draw(home: Path, monkeypatch: pytest.MonkeyPatch, width: int, *ids: str) -> str:
    buffer = terminal(monkeypatch, width)
    request = shows.ShowRequest(ids=ids)
    show_view.write(shows.run(Home(home), request), request)
    return buffer.getvalue()


@pytest.mark.parametrize("width", [80, 120])
def test_comparing_five_experiments_keeps_every_value_whole(
    five: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], width: int
) -> None:
    text = draw(five, monkeypatch, width, *IDS)
    assert max(len(line) for line in text.splitlines()) <= width
    for whole in (*IDS, "6.063", "6.463", "5.963", "357.8", "interrupted", "stopped", "17,537", "18.7"):
        assert whole in text, whole
    for field in ("final eval_loss", "best perplexity", "wall_seconds", "training.learning_rate"):
        assert field in text, field
    assert "0.005" in text and "5.96291234" not in text
    notes = capsys.readouterr().err
    if width == 80:  # five do not fit side by side: several tables, and a note saying so
        assert "5 experiments do not fit side by side: shown in 2 tables" in notes
    else:
        assert notes == ""


def test_list_at_80_columns_names_the_columns_it_leaves_out(
    five: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    text = draw(five, monkeypatch, 80)
    assert max(len(line) for line in text.splitlines()) <= 80
    for whole in (*IDS, "interrupted", "stopped", "completed", "12/12", "5.963", "status", "eval loss"):
        assert whole in text, whole
    note = capsys.readouterr().err
    assert "80 columns: left out updated (UTC)" in note
    assert "updated" not in text


def test_detail_at_80_columns_keeps_headers_and_the_command(
    five: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    text = draw(five, monkeypatch, 80, "EXP-003")
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    runs = next(line for line in lines if line.lstrip().startswith("#") and "kind" in line)
    assert runs.split()[:5] == ["#", "kind", "status", "steps", "pid"]
    assert any("command" in line for line in lines) and "octlm train EXP-003" in text
    assert "17537" in text and "17,537" not in text  # a pid is an ID, never a number with separators
    assert "[builtin:docs]" in text and "false" in text
    assert "left out" in capsys.readouterr().err


def test_piped_detail_is_plain_key_value_lines(five: Path) -> None:
    result = cli(five, "show", "EXP-001")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert not BOX & set(result.stdout)
    assert max(len(line) for line in lines) <= 200
    assert "  status: completed" in lines and "  step: 12" in lines
    assert "  data.sources: [builtin:docs]" in lines and "  training.compile: false" in lines
    assert any(line.split()[:3] == ["#", "kind", "status"] for line in lines)
    assert "17537" in result.stdout and "17,537" not in result.stdout


BENCH = {
    "parameters": 1234567,
    "tokens_per_step": 4096,
    "compile": False,
    "machine": {"threads": 2, "device": "cpu"},
    "results": [
        {
            "precision": p,
            "ms_per_step": 640.8123,
            "tokens_per_second": 6391.7,
            "model_flops_per_second": 2.345e10,
            "matmul_peak_flops_per_second": 1.2345e11,
            "mfu": 0.71234,
            "checkpoint_bytes": 11_280_000,
            "checkpoint_save_seconds": 0.2345,
            "checkpoint_load_seconds": 0.1234,
            "checkpoint_cost_at_interval": 0.0123,
            "first_step_fresh_seconds": 18.7,
            "first_step_resumed_seconds": 2.25,
        }
        for p in ("fp32", "bf16")
    ],
}


@pytest.mark.parametrize("width", [80, 120])
def test_bench_table_never_cuts_a_number(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], width: int
) -> None:
    buffer = terminal(monkeypatch, width)
    commands_tools.print_bench(BENCH, "EXP-001")
    text = buffer.getvalue()
    assert max(len(line) for line in text.splitlines()) <= width
    for whole in ("fp32", "bf16", "640.8", "6,392", "0.7123", "11.3", "ms/step", "tokens/s", "MFU", "ckpt MB"):
        assert whole in text, whole
    note = capsys.readouterr().err
    assert "left out 1st step resumed s" in note


def test_formats_per_column_kind() -> None:
    cell = formats.format_cell
    assert cell(formats.kind_of("pid"), 17537) == "17537" and cell(formats.kind_of("ID"), "EXP-008") == "EXP-008"
    assert [cell("metric", v) for v in (191.5, 80.7791, 5.9629, 357.8)] == ["191.5", "80.78", "5.963", "357.8"]
    assert cell(formats.kind_of("duration s"), 18.7) == "18.7" and cell("seconds", 18.70001) == "18.7"
    assert cell(formats.kind_of("size"), 146_000_000) == "146.0 MB"
    yaml = [cell(formats.kind_of("data.sources"), v) for v in (["builtin:docs"], False, 10000.0, None, "yes")]
    assert yaml == ["[builtin:docs]", "false", "10000", "null", "yes"]  # text unquoted in a table (issue 33 item 11)
    assert formats.yaml_value("yes") == '"yes"'  # as YAML writes it (config keys' defaults)
    assert formats.kind_of("final eval_loss") == "metric" and formats.kind_of("tokens_per_second") == "count"


def test_stderr_notes_are_never_wrapped_when_piped(tmp_path: Path) -> None:
    message = "trained tokenizer (1024 tokens) -> " + "/very/long/path" * 12
    code = f"from octlm.cli import render; render.info({message!r}); render.warn({message!r})"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "COLUMNS": "80"}, timeout=60
    )
    assert done.stderr.splitlines() == [message, f"octlm: warning: {message}"]


def test_the_readme_s_variant_is_side_by_side_at_120_columns_and_its_listing_says_where_it_came_from(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    changes = ("--set", "training.learning_rate=1e-3", "--set", "training.min_learning_rate=1e-4")
    made = cli(home, "new", "--from", "EXP-001", *changes)
    assert made.exit_code == 0, made.stderr
    variant = made.stdout.strip()
    for experiment in ("EXP-001", variant):
        assert cli(home, "train", experiment, "--until", "4", "-q").exit_code == 0
    text = draw(home, monkeypatch, 120, "EXP-001", variant)
    assert "(1/2)" not in text and "do not fit side by side" not in capsys.readouterr().err
    assert max(len(line) for line in text.splitlines()) <= 120
    listing = draw(home, monkeypatch, 120)
    row = next(line for line in listing.splitlines() if line.startswith(variant))
    assert "from EXP-001" in row  # where it came from; what changed is the comparison's (issue 33 item 8)
