"""Issue 33 item 6: live lines fit the terminal. Bars never cut a word (what does not fit goes whole), the time column
says whether it is elapsed or left, ``watch`` at 80 columns keeps ID, status, step and ETA and drops the sparkline
first, and ``show SWEEP`` at 80 columns drops columns with a note, as ``show`` does. Issue 45 item 9: a message
longer than the terminal (a warning, a note, a summary) wraps between words, never inside one, and a finished
``verify-resume`` draws each segment once, with what it said after the bars above them."""

from __future__ import annotations

import io
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import cli, run_on_terminal, screen, write_corpus, write_experiment
from rich.console import Console

from octlm.cli.live import bars
from octlm.cli.live.watch import draw
from octlm.core.home import Home
from octlm.runtime import load
from octlm.store import experiments
from octlm.store.experiments import register
from octlm.store.registry import Registry
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


# ---------------------------------------------------------------- issue 45 item 9: whole words at 80 and 120 columns

BUSY = (
    "it may run many times slower than it should; give it fewer (training.threads: 1, or OMP_NUM_THREADS=1) before "
    "the run starts (a resume under another thread count is not bit-exact), or wait until the box is quieter"
)


def whole(lines: list[str], text: str) -> bool:
    """``text`` is on the screen word for word, wrapped (if at all) only between its words: its words are a run of
    the words of ``lines`` read in order (a word cut across two lines reads as two words, and the run breaks)."""
    said = " " + " ".join(word for line in lines for word in line.split()) + " "
    return " " + " ".join(text.split()) + " " in said


@pytest.fixture
def short_home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A home whose paths fit an 80-column line (a path is one word: it may wrap only when longer than a line), with
    EXP-001 asking for more threads than the box has (the busy-box warning, said at the start and after the summary).
    Under /tmp rather than ``tmp_path``, whose paths are longer than the line; removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="octlm-words-"))
    home = write_corpus(root / "h")
    write_experiment(home, training={"threads": load.cores() + 8, "steps": 4})
    monkeypatch.setenv("OCTLM_NO_LOAD_CHECK", "0")
    try:
        yield home
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.parametrize("columns", [80, 120])
def test_no_word_is_split_across_lines(short_home: Path, columns: int) -> None:
    command = [sys.executable, "-m", "octlm", "--home", str(short_home), "train", "EXP-001"]
    code, shown = run_on_terminal(command, columns=columns)
    assert code == 0, shown
    lines = screen(shown, columns=columns)
    assert max(len(line) for line in lines) <= columns, lines
    tokenizer = short_home / "checkpoints" / "EXP-001" / "tokenizer.json"
    assert len(str(tokenizer)) < columns  # one word, that fits a line
    summary = cli(short_home, "show", "EXP-001").stdout.splitlines()[0]  # the line train ended with
    for text in (BUSY, f"trained tokenizer (300 tokens) -> {tokenizer}", summary):
        assert whole(lines, text), (text, lines)
    warned = [i for i, line in enumerate(lines) if line.startswith("octlm: warning: this box is busy")]
    assert len(warned) == 2, lines  # said at the start, and again after the summary


@pytest.mark.slow
def test_a_finished_verify_resume_draws_each_segment_once(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the command says while the bars are drawn (``scratch kept at``, after the last segment) goes above them on
    the console they are drawn on: written past them, it was overwritten and the rows above the bars drawn twice."""
    monkeypatch.setenv("TMPDIR", str(home.parent))  # the kept scratch homes go with the test's folder
    command = [sys.executable, "-m", "octlm", "--home", str(home), "verify-resume", "EXP-001", "--split-at", "6"]
    code, shown = run_on_terminal([*command, "--keep-scratch"], columns=120)
    assert code == 0, shown
    lines = screen(shown, columns=120)
    for segment in ("(a) 0->12 ", "(b1) 0->6 ", "(b2) 6->12 "):
        assert sum(line.startswith(segment) for line in lines) == 1, (segment, lines)
    (scratch,) = home.parent.glob("octlm-verify-EXP-001-*")
    assert whole(lines, f"scratch kept at {scratch}: (a) in a/, (b) in b/"), lines
    assert whole(lines, "run file 5/5; next-batch loss"), lines  # the verdict's line, wrapped between words


def test_the_list_keeps_a_proof_in_sight_beside_an_evaluation_and_its_note_whole(tmp_path: Path) -> None:
    """At 120 columns the verdict column (free text: the proof first) is shortened rather than left out, and a short
    description leaves it the room it does not use; at 80 it goes, and the note saying so wraps between words."""
    home = tmp_path / "h"
    write_experiment(home)
    with Registry(home / "registry.db") as registry:
        register(Home(home), registry, experiments.load(Home(home), "EXP-001"))
        registry.add_verification("EXP-001", "verify-resume", "pass", {"summary": "identical"})
        registry.add_verification("EXP-001", "eval", "6.0436 ± 0.0038", {"on": ["corpus/*.txt", "builtin:docs"]})
    command = [sys.executable, "-m", "octlm", "--home", str(home), "show"]
    for columns in (80, 120):
        code, shown = run_on_terminal(command, columns=columns)
        assert code == 0, shown
        lines = screen(shown, columns=columns)
        assert max(len(line) for line in lines) <= columns, lines
        assert whole(lines, f"note: {columns} columns: left out"), lines
        assert whole(lines, "(widen the terminal, or pipe the output)"), lines
    (row,) = [line for line in lines if line.startswith("EXP-001")]
    assert "verify-resume: pass" in row, lines  # shortened after the proof, not left out
