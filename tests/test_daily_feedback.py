"""Issue 13, daily use: feedback on long work, the tokenizer cache, ``sample`` and ``train --restart``."""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path

import pytest
from conftest import cli, json_out, octlm, run_on_terminal, write_experiment

from octlm.cli.progress import ConsoleReporter
from octlm.core.home import Home
from octlm.data import pipeline as prepare
from octlm.data import tokenizer
from octlm.data.tokenizer import Tokenizer
from octlm.run import runner
from octlm.store import experiments
from octlm.train import generate
from octlm.views import estimate

STAMP = r"\d\d:\d\d:\d\d "
RUNNER_REPORTS_PHASES = "context.reporter" in inspect.getsource(runner._train_session).split("prepare(")[1][:200]
needs_runner = pytest.mark.skipif(
    not RUNNER_REPORTS_PHASES, reason="runner.py does not pass its reporter to prepare() yet"
)

DEMO = """
import sys, time
from pathlib import Path
from octlm.store import experiments
from octlm.data import pipeline as prepare
from octlm.cli.progress import ConsoleReporter
from octlm.core.home import Home

home = Home(Path(sys.argv[1]))
reporter = ConsoleReporter()
try:
    prepare.prepare(home, experiments.load(home, "EXP-001"), Path(sys.argv[2]), reporter)
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


# ---------------------------------------------------------------- phases


def test_phases_and_a_moving_bar_on_a_terminal(home: Path) -> None:
    code, drawn = on_terminal([sys.executable, "-c", DEMO, str(home), str(home / "tokenizer.json")])
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", drawn)
    assert code == 0, shown
    assert "\x1b[" in drawn  # drawn, not plain
    assert "training tokenizer: 300 tokens on" in shown and "Compute merges" in shown  # and the library's own bar
    assert "✓ reading corpus: 0.0 MB, 10 documents" in shown and "✓ encoding: 0.0 MB with" in shown
    assert re.search(r"EXP-001 \S+ 0/5 first step \d+ s", shown), shown  # the first step waits in the bar
    bars = re.findall(r"EXP-001 \S+ (\d)/5", shown)
    assert bars[0] == "0" and bars[-1] == "5" and len(set(bars)) >= 4  # it moved


def test_phases_off_a_terminal_and_with_term_dumb_are_timestamped_lines(home: Path, capsys) -> None:
    config = experiments.load(Home(home), "EXP-001")
    prepare.prepare(Home(home), config, home / "tokenizer.json", ConsoleReporter())
    lines = capsys.readouterr().err.splitlines()
    assert re.fullmatch(STAMP + r"reading corpus: 0\.0 MB, 10 documents", lines[0]), lines
    assert re.fullmatch(STAMP + r"training tokenizer: 300 tokens on 8 documents", lines[1]), lines
    assert re.fullmatch(STAMP + r"encoding: 0\.0 MB with 300 tokens", lines[2]), lines
    code, shown = on_terminal([sys.executable, "-c", DEMO, str(home), str(home / "again.json")], term="dumb")
    assert code == 0 and "\x1b[" not in shown, shown
    assert re.search(STAMP + r"reading corpus: 0\.0 MB, 10 documents\r\n", shown), shown
    assert re.search(STAMP + r"encoding: 0\.0 MB with 300 tokens\r\n", shown), shown


@needs_runner
def test_a_training_start_shows_its_phases(home: Path) -> None:
    write_experiment(home, training={"compile": False})
    result = cli(home, "train", "EXP-001", "--until", "4")
    assert result.exit_code == 0, result.stderr
    assert re.search(r"^" + STAMP + r"reading corpus: 0\.0 MB, 10 documents$", result.stderr, re.M), result.stderr
    assert re.search(r"^" + STAMP + r"training tokenizer: 300 tokens", result.stderr, re.M)
    code, shown = on_terminal([sys.executable, "-m", "octlm", "--home", str(home), "resume", "EXP-001"])
    assert code == 0 and "✓ reading corpus" in shown and "EXP-001" in shown, shown


def test_the_expected_duration_of_a_long_run(home: Path) -> None:
    write_experiment(home, "EXP-002")  # the same config fingerprint
    (home / "runs").mkdir()
    (home / "runs" / "EXP-002.jsonl").write_text('{"step": 100, "elapsed_seconds": 180.0}\n')
    folder = home / "checkpoints" / "EXP-002"
    folder.mkdir(parents=True)
    with open(folder / "step-000100.pt", "wb") as handle:
        handle.truncate(146_000_000)
    line = estimate.expected(Home(home), experiments.load(Home(home), "EXP-001"), 0, 10_000)
    assert line == "10,000 steps at about 1.8 s/step: about 5 h; 146 MB per checkpoint, keeping 3"
    assert estimate.expected(Home(home), experiments.load(Home(home), "EXP-001"), 0, 10) is None  # 18 s is not long
    write_experiment(home, "EXP-003", training={"learning_rate": 1e-3})
    assert (
        estimate.expected(Home(home), experiments.load(Home(home), "EXP-003"), 0, 10_000) is None
    )  # another config: no figure


# ---------------------------------------------------------------- the tokenizer cache


def test_training_a_tokenizer_twice_gives_identical_bytes() -> None:
    texts = [f"document {i}: the quick brown fox {i * 7 % 13}" for i in range(200)]
    first, second = Tokenizer.train(texts, 300), Tokenizer.train(texts, 300)
    assert first.inner.to_str(pretty=True) == second.inner.to_str(pretty=True)


def test_a_second_experiment_reuses_the_cached_tokenizer(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_experiment(home, "EXP-002")  # the same data and vocabulary
    assert cli(home, "train", "EXP-001", "--until", "4", "-q").exit_code == 0
    assert len(list((home / "cache").glob("tokenizer-*-300.json"))) == 1

    def refuse(*args: object, **kwargs: object) -> Tokenizer:
        raise AssertionError("trained again")

    monkeypatch.setattr(Tokenizer, "train", refuse)
    result = cli(home, "train", "EXP-002", "--until", "4")
    assert result.exit_code == 0, result.stderr
    assert "reused tokenizer from cache/tokenizer-" in result.stderr
    first, second = (home / "checkpoints" / name / "tokenizer.json" for name in ("EXP-001", "EXP-002"))
    assert first.read_bytes() == second.read_bytes()


def test_a_cached_tokenizer_is_used_only_when_its_fingerprint_verifies(tmp_path: Path) -> None:
    texts = [f"document {i}: the quick brown fox" for i in range(50)]
    path = tokenizer.cache_path(tmp_path / "cache", texts, 300)
    assert re.fullmatch(r"tokenizer-[0-9a-f]{16}-300\.json", path.name)
    assert (
        path != tokenizer.cache_path(tmp_path / "cache", texts, 400) != tokenizer.cache_path(tmp_path, texts[1:], 300)
    )
    trained = Tokenizer.train(texts, 300)
    tokenizer.to_cache(trained, path)
    cached = tokenizer.from_cache(path)
    assert cached is not None and cached.fingerprint == trained.fingerprint
    path.with_suffix(".fingerprint").write_text("0" * 64)
    assert tokenizer.from_cache(path) is None
    assert tokenizer.load_or_train(tmp_path / "t.json", texts, 300, path)[1] == "trained"


# ---------------------------------------------------------------- sample


def test_sample_prints_the_prompt_once_and_its_json_has_the_parts(home: Path) -> None:
    assert cli(home, "train", "EXP-001", "--until", "4", "-q").exit_code == 0
    printed = cli(home, "sample", "EXP-001", "--prompt", "Docu", "--max-new-tokens", "5")
    answer = json_out(cli(home, "sample", "EXP-001", "--prompt", "Docu", "--max-new-tokens", "5", "--json"))
    assert answer["prompt"] == "Docu" and answer["text"] == "Docu" + answer["completion"]
    assert printed.stdout == answer["text"] + "\n" and not printed.stdout.startswith("DocuDocu")


def test_all_special_tokens_are_said(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert cli(home, "train", "EXP-001", "--until", "4", "-q").exit_code == 0
    tokenizer = Tokenizer.load(home / "checkpoints" / "EXP-001" / "tokenizer.json")

    def specials(model, ids, max_new_tokens, device, stop_id=None):  # as a barely trained model does
        return [*ids, *[tokenizer.pad_id] * 23, tokenizer.eos_id]

    monkeypatch.setattr(generate, "greedy", specials)
    result = cli(home, "sample", "EXP-001", "--temperature", "0", "--json")
    assert result.exit_code == 0
    assert "24 tokens generated, all special (<|pad|> x23, <|eos|> x1)" in result.stderr
    assert json_out(result)["special_tokens"] == {"<|pad|>": 23, "<|eos|>": 1}


# ---------------------------------------------------------------- train --restart


def test_restart_says_what_it_discarded(home: Path) -> None:
    assert cli(home, "train", "EXP-001", "--until", "4", "-q").exit_code == 0
    result = cli(home, "train", "EXP-001", "--restart", "--until", "4")
    assert result.exit_code == 0, result.stderr
    assert "discarded checkpoints/EXP-001/step-000004.pt" in result.stderr
    assert "discarded runs/EXP-001.jsonl" in result.stderr


def test_restart_asks_on_a_terminal_unless_yes(home: Path) -> None:
    assert cli(home, "train", "EXP-001", "--until", "4", "-q").exit_code == 0
    command = [sys.executable, "-m", "octlm", "--home", str(home), "train", "EXP-001", "--restart", "--until", "4"]
    code, shown = on_terminal(command, answer=(b"start over?", b"n\n"))
    assert code == 3 and "--restart discards:" in shown and "checkpoints/EXP-001/step-000004.pt" in shown, shown
    assert (home / "checkpoints" / "EXP-001" / "step-000004.pt").exists()


# ---------------------------------------------------------------- verify-resume


def test_verify_resume_streams_each_segment(home: Path) -> None:
    result = octlm(home, "verify-resume", "EXP-001", "--split-at", "4", "--until", "8")
    assert result.returncode == 0, result.stderr
    for label, steps in (("(a)", "0 -> 8"), ("(b1)", "0 -> 4"), ("(b2)", "4 -> 8")):
        assert re.search(r"^" + STAMP + re.escape(f"{label} steps {steps}") + "$", result.stderr, re.M)
    assert re.search(r"^\(b2\) step 8: loss", result.stderr, re.M), result.stderr
    if RUNNER_REPORTS_PHASES:
        assert re.search(r"^\(a\) " + STAMP + "reading corpus", result.stderr, re.M)
