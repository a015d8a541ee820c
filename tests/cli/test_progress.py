"""What a run shows while it runs: named phases, the progress bar on a terminal, timestamped lines elsewhere,
--restart's question and list, verify-resume's segments.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import torch
from conftest import busy_box, cli, octlm, run_on_terminal, screen, tiny_config, write_experiment

from octlm.cli.live.progress import ConsoleReporter
from octlm.core.home import Home
from octlm.data import pipeline
from octlm.store import experiments

STAMP = r"\d\d:\d\d:\d\d "


DEMO = """
import sys, time
from pathlib import Path
import torch
from octlm.store import experiments
from octlm.data import pipeline
from octlm.cli.live.progress import ConsoleReporter
from octlm.core.home import Home

home = Home(Path(sys.argv[1]))
reporter = ConsoleReporter()
try:
    pipeline.prepare(home, experiments.load(home, "EXP-001"), Path(sys.argv[2]), reporter, device=torch.device("cpu"))
    time.sleep(0.5)
    reporter.start({"id": "EXP-001", "kind": "train", "start": 0, "until": 5, "parameters": 1,
                    "device": "cpu", "precision": "fp32"})
    time.sleep(0.5)
    for step in range(1, 6):
        reporter.step(step)
        time.sleep(0.15)
    reporter.finish()
finally:
    reporter.close()
"""


def on_terminal(args: list[str], term: str = "xterm-256color", answer: tuple[bytes, bytes] | None = None):
    return run_on_terminal(args, term=term, answer=answer)


@pytest.mark.slow
def test_phases_and_a_moving_bar_on_a_terminal(home: Path) -> None:
    code, drawn = on_terminal([sys.executable, "-c", DEMO, str(home), str(home / "tokenizer.json")])
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", drawn)
    assert code == 0, shown
    assert "\x1b[" in drawn  # drawn, not plain
    assert "training tokenizer: 300 tokens on" in shown
    assert "Compute merges" not in shown and "Pre-processing" not in shown  # the library's own bars stay off
    assert "✓ reading corpus: 0.0 MB, 10 documents" in shown and "✓ encoding: 0.0 MB with" in shown
    assert re.search(r"EXP-001 \S+ 0/5 first step \d+ s", shown), shown  # the first step waits in the bar
    bars = re.findall(r"EXP-001 \S+ (\d)/5", shown)
    assert bars[0] == "0" and bars[-1] == "5" and len(set(bars)) >= 4  # it moved


@pytest.mark.slow
def test_phases_off_a_terminal_and_with_term_dumb_are_timestamped_lines(home: Path, capsys) -> None:
    config = experiments.load(Home(home), "EXP-001")
    pipeline.prepare(Home(home), config, home / "tokenizer.json", ConsoleReporter(), device=torch.device("cpu"))
    lines = capsys.readouterr().err.splitlines()
    assert re.fullmatch(STAMP + r"reading corpus: 0\.0 MB, 10 documents", lines[0]), lines
    assert re.fullmatch(STAMP + r"training tokenizer: 300 tokens on 8 documents", lines[1]), lines
    assert re.fullmatch(STAMP + r"encoding: 0\.0 MB with 300 tokens", lines[2]), lines
    code, shown = on_terminal([sys.executable, "-c", DEMO, str(home), str(home / "again.json")], term="dumb")
    assert code == 0 and "\x1b[" not in shown, shown
    assert re.search(STAMP + r"reading corpus: 0\.0 MB, 10 documents\r\n", shown), shown
    assert re.search(STAMP + r"encoding: 0\.0 MB with 300 tokens\r\n", shown), shown


@pytest.mark.slow
def test_a_training_start_shows_its_phases(home: Path) -> None:
    write_experiment(home, training={"compile": False})
    result = cli(home, "train", "EXP-001", "--until", "4")
    assert result.exit_code == 0, result.stderr
    assert re.search(r"^" + STAMP + r"reading corpus: 0\.0 MB, 10 documents$", result.stderr, re.M), result.stderr
    assert re.search(r"^" + STAMP + r"training tokenizer: 300 tokens", result.stderr, re.M)
    code, shown = on_terminal([sys.executable, "-m", "octlm", "--home", str(home), "resume", "EXP-001"])
    assert code == 0 and "✓ reading corpus" in shown and "EXP-001" in shown, shown


@pytest.mark.slow
def test_step_lines_in_a_pipe_are_timestamped_as_the_phases_are(home: Path) -> None:
    """Issue 45 item 3: in a pipe the phases' lines carried the time and the step lines did not, though the README
    promises plain timestamped lines. Every line of the run's own is stamped now (the start, each evaluation, each
    checkpoint); the summary at the end is the command's answer, and stays as it was."""
    done = octlm(home, "train", "EXP-001")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    steps = [line for line in lines if re.search(r"step \d+: (loss|checkpoint) ", line)]
    assert len(steps) == 6, lines  # evaluations at 4, 8 and 12, checkpoints at 4, 8 and 12
    assert all(re.fullmatch(STAMP + r"step \d+: (loss|checkpoint) .+", line) for line in steps), steps
    assert any(re.fullmatch(STAMP + r"train EXP-001: steps 0 -> 12, .+", line) for line in lines), lines
    assert lines[-1].startswith("EXP-001: completed at step 12/12; ")


def test_a_segment_follows_its_childs_timestamped_step_lines() -> None:
    """verify-resume's bars follow the steps its children say in their pipe: stamped now, still read."""
    from octlm.cli.live.progress import stamped
    from octlm.cli.live.segments import STEP

    for line, step in ((stamped("step 12: loss 5.1234"), "12"), (stamped("step 8: checkpoint step-000008.pt"), "8")):
        found = STEP.match(line)
        assert found is not None and found.group(1) == step, line
    assert STEP.match(stamped("reading corpus: 0.0 MB, 10 documents")) is None


@pytest.mark.slow
def test_restart_says_what_it_discarded(home: Path) -> None:
    assert cli(home, "train", "EXP-001", "--until", "4", "-q").exit_code == 0
    result = cli(home, "train", "EXP-001", "--restart", "--until", "4")
    assert result.exit_code == 0, result.stderr
    assert "discarded checkpoints/EXP-001/step-000004.pt" in result.stderr
    assert "discarded runs/EXP-001.jsonl" in result.stderr
    said = result.stderr.index("discarded checkpoints/EXP-001/step-000004.pt")
    assert said < result.stderr.index("EXP-001: stopped at step 4/12")  # when it happened, not after the new run


@pytest.mark.slow
def test_restart_asks_on_a_terminal_unless_yes(home: Path) -> None:
    assert cli(home, "train", "EXP-001", "--until", "4", "-q").exit_code == 0
    command = [sys.executable, "-m", "octlm", "--home", str(home), "train", "EXP-001", "--restart", "--until", "4"]
    code, shown = on_terminal(command, answer=(b"start over?", b"n\n"))
    assert code == 3 and "--restart discards:" in shown and "checkpoints/EXP-001/step-000004.pt" in shown, shown
    assert (home / "checkpoints" / "EXP-001" / "step-000004.pt").exists()


# ---------------------------------------------------------------- issue 33 items 1 and 2: the first ten minutes


def _joined(lines: list[str]) -> str:
    """The screen's lines as one text (a long line wraps across several, between words)."""
    return " ".join(lines)


@pytest.mark.slow
def test_verify_resume_on_a_busy_box_keeps_its_warning_on_screen_and_repeats_it(home: Path) -> None:
    """With the threads fixed by the user (OMP_NUM_THREADS=2) on a box another process keeps busy, the segments warn:
    each warning is a line of its own above the bars, and the summary says it again."""
    command = [sys.executable, "-m", "octlm", "--home", str(home), "verify-resume", "EXP-001", "--split-at", "4"]
    with busy_box(1), pytest.MonkeyPatch.context() as patch:
        patch.setenv("OMP_NUM_THREADS", "2")
        patch.setenv("OCTLM_NO_LOAD_CHECK", "0")
        code, shown = run_on_terminal(command, columns=100)
    assert code == 0, shown
    lines = screen(shown, columns=100)
    summary = next(i for i, line in enumerate(lines) if line.startswith("EXP-001: PASS"))
    before, after = _joined(lines[:summary]), _joined(lines[summary:])
    assert "octlm: warning: this box is busy" in before and "or wait until the box is quieter" in before, lines
    assert "a resume under another thread count is not bit-exact" in before
    assert "octlm: warning: (a)" in after and "said by the segment, and again here" in after, lines
    assert "said at the start, and again here" not in after  # a segment's own repetition is not said a third time
    assert "2 threads (as asked)" in _joined(lines)


@pytest.mark.slow
def test_verify_resume_takes_its_threads_from_the_free_cores(home: Path) -> None:
    """Nothing set: the proof takes the cores other processes leave free (here none: one thread), says so first and
    in its summary, and passes. The spinners yield (nice 19): seen at the start, they cost the proof and the suite's
    other worker nothing afterwards."""
    with busy_box(yielding=True), pytest.MonkeyPatch.context() as patch:
        patch.delenv("OMP_NUM_THREADS", raising=False)
        result = octlm(home, "verify-resume", "EXP-001", "--split-at", "4", "--json")
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert found["identical"] and found["threads"]["threads"] == 1 and found["threads"]["how"] == "chosen"
    first = result.stderr.splitlines()[0]
    assert first.startswith("verify-resume EXP-001: (a) 0 -> 12 in one process, (b) split at 4; 1 thread (")
    assert "cores busy with other work" in first
    for label, steps in (("(a)", "0 -> 12"), ("(b1)", "0 -> 4"), ("(b2)", "4 -> 12")):  # each segment streamed
        assert re.search(r"^" + STAMP + re.escape(f"{label} steps {steps}") + "$", result.stderr, re.M)
    assert re.search(r"^\(b2\) " + STAMP + "step 12: loss", result.stderr, re.M), result.stderr
    assert re.search(r"^\(a\) " + STAMP + "reading corpus", result.stderr, re.M)


def test_the_threads_asked_for_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    from octlm import config as cfg
    from octlm.tasks.proof.verify import thread_choice

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    asked = thread_choice(cfg.from_dict(tiny_config(training={"threads": 3})))
    assert (asked.threads, asked.how, asked.said()) == (3, "asked", "3 threads (as asked)")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert thread_choice(cfg.from_dict(tiny_config())).said() == "2 threads (as asked)"
