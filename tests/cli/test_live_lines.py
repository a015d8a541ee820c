"""Issue 33 item 6: live lines fit the terminal. Bars never cut a word (what does not fit goes whole), the time column
says whether it is elapsed or left, ``watch`` at 80 columns keeps ID, status, step and ETA and drops the sparkline
first, and ``show SWEEP`` at 80 columns drops columns with a note, as ``show`` does."""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path

import pytest
from conftest import cli, run_on_terminal, screen
from rich.console import Console

from octlm.cli.live import bars
from octlm.cli.live.watch import draw
from octlm.views.sweeps import live


def test_words_are_never_cut() -> None:
    text = "resuming in a different environment (threads 2 -> 1): the run continues"
    assert bars.words(text, 200) == text
    cut = bars.words(text, 30)
    assert len(cut) <= 30 and cut.endswith("…") and text.startswith(cut[:-1]) and text[len(cut) - 1] == " "
    assert bars.words("unbreakable" * 5, 10) == ""  # a word longer than the room is left out, not cut
    assert bars.parts(["loss 5.123", "eval 5.234", "lr 3.0e-04", "8.2k tok/s"], 21) == "loss 5.123 eval 5.234"
    assert bars.parts(["loss 5.123", "eval 5.234"], 3) == ""


def test_the_time_columns_say_what_they_count() -> None:
    assert bars.clock(None) == "-:--:--" and bars.clock(65.4) == "0:01:05" and bars.clock(3700) == "1:01:40"


def _experiment(number: int) -> live.Experiment:
    return live.Experiment(f"EXP-{number:03d}", "running", 60, 200, 5.4321, 5.5432, 8123.0, "0:01:10", "▁▂▃▄▅▆▇█" * 3)


def test_watch_at_80_columns_keeps_the_essentials_and_drops_the_sparkline_first() -> None:
    shown = live.Screen((_experiment(1), _experiment(12)), ())
    out = io.StringIO()
    Console(file=out, width=80, force_terminal=False).print(draw(shown, 80))
    lines = out.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 80, lines
    header = next(line for line in lines if line.lstrip().startswith("ID"))
    for column in ("ID", "status", "step", "ETA"):
        assert column in header
    title = " ".join(line.strip() for line in lines[: lines.index(header)])
    assert "recent" not in header and "80 columns: left out train loss, recent" in title
    row = next(line for line in lines if "EXP-012" in line)
    assert "60/200" in row and "0:01:10" in row and "running" in row
    wide = io.StringIO()
    Console(file=wide, width=160).print(draw(shown, 160))
    assert "recent" in wide.getvalue() and "left out" not in wide.getvalue()


@pytest.mark.slow
def test_the_training_bar_at_80_columns_keeps_whole_items_and_says_time_left(home: Path) -> None:
    command = [sys.executable, "-m", "octlm", "--home", str(home), "train", "EXP-001"]
    code, shown = run_on_terminal(command, columns=80)
    assert code == 0, shown
    bar = [line for line in screen(shown, columns=80) if re.match(r"EXP-001 \S+ 12/12", line)]
    assert bar, screen(shown, columns=80)
    assert re.fullmatch(
        r"EXP-001 \S+ 12/12 (loss \d+\.\d{3})?( eval \d+\.\d{3})?( lr \S+)?( \S+k tok/s)? +\S+ left", bar[-1]
    )


@pytest.mark.slow
def test_show_sweep_at_80_columns_drops_columns_with_a_note(home: Path) -> None:
    grid = "training.learning_rate=0.001,0.003,0.01"
    made = cli(home, "sweep", "new", "wide", "--from", "EXP-001", "--grid", grid, "--grid", "model.n_layers=1,2")
    assert made.exit_code == 0, made.stderr
    command = [sys.executable, "-m", "octlm", "--home", str(home), "show", "wide"]
    code, shown = run_on_terminal(command, columns=80)
    assert code == 0, shown
    lines = screen(shown, columns=80)
    assert any("80 columns: left out" in line for line in lines), lines
    assert any("training.learning_rate=0.01 model.n_layers=2" in line for line in lines), lines
