"""User text as plain text: no rich markup, emoji codes or control characters reach the terminal."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import cli, json_out, run_on_terminal, write_experiment

from octlm.cli.render import plain
from octlm.core.home import Home
from octlm.store.experiments import load, register
from octlm.store.registry import Registry

DESCRIPTION = "[/x] oops [link=http://x]a[/link] [blink]b[/blink] \x1b[31mred\x07 :x:"


SHOWN = ("[/x]", "oops", "[link=http://x]a[/link]", "[blink]b[/blink]", "[31mred", ":x:")


OCTLM = [sys.executable, "-m", "octlm"]


def on_terminal(home: Path, *args: str) -> tuple[int, str]:
    return run_on_terminal([*OCTLM, "--home", str(home), *args], columns=400, keep_no_color=True)


def recorded_run(home: Path, experiment_id: str = "EXP-001", **fields) -> int:
    """A registered experiment with one run row written through the registry's own API."""
    with Registry(home / "registry.db") as registry:
        register(Home(home), registry, load(Home(home), experiment_id))
        return registry.start_run(experiment_id, "train", start_step=0, **fields)


def test_plain_removes_controls_keeps_text() -> None:
    assert plain("a\x1b[31mb\x07\r\n\tc\ud800\u202e") == "a[31mb  c\ufffd"
    assert plain("line\none\ttab", multiline=True) == "line\none\ttab"
    assert plain(":x: [bold]") == ":x: [bold]"


@pytest.mark.slow
def test_markup_in_a_description_shows_verbatim_on_a_terminal_and_in_pipes(home: Path) -> None:
    assert cli(home, "new", "EXP-002", "--description", DESCRIPTION).exit_code == 0
    for args in (["show"], ["show", "EXP-002"], ["show", "EXP-001", "EXP-002"]):
        code, screen = on_terminal(home, *args)
        assert code == 0 and "Traceback" not in screen, screen
        assert all(token in screen for token in SHOWN), (args, screen)
        for raw in ("\x1b[31mred", "\x07", "\x1b]8;", "\x1b[5m", "\u274c"):  # colour, bell, link, blink, emoji
            assert raw not in screen, (args, raw)
    for args in (["show"], ["show", "--csv"], ["show", "EXP-002"], ["show", "EXP-002", "--csv"]):
        piped = cli(home, *args)
        assert piped.exit_code == 0 and "[/x] oops [link=http://x]a[/link]" in piped.stdout, args
        assert "\x1b" not in piped.stdout and "\x07" not in piped.stdout, args
    listed = cli(home, "show", "--json")
    assert "\x1b" not in listed.stdout and json_out(listed)["experiments"][1]["description"] == DESCRIPTION


def test_a_home_path_with_markup_and_emoji_codes_stays_text(tmp_path: Path) -> None:
    home = tmp_path / "h [/x] :x: [link=http://x]"
    write_experiment(home)
    recorded_run(home, argv=["octlm", "--home", str(home), "train", "EXP-001"], host="here [/x]")
    for args in (["show"], ["show", "EXP-001"]):
        code, screen = on_terminal(home, *args)
        assert code == 0 and "Traceback" not in screen, screen
    code, screen = on_terminal(home, "show", "EXP-404")
    assert code == 2 and f"{home}/experiments/EXP-404.yaml" in screen.replace("\r\n", "")
    assert "\u274c" not in screen and "Traceback" not in screen


def test_a_sentence_wraps_at_words_on_a_terminal_and_stays_one_line_in_a_pipe(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Verdicts (show A B, show SWEEP) are long sentences: a terminal breaks them between words, never inside one;
    a pipe keeps each on one line for grep."""
    from octlm.cli import render

    sentence = " ".join(["the best (training.learning_rate=0.001) against the next: eval_loss -0.5513 ± 0.0419"] * 3)
    monkeypatch.setenv("COLUMNS", "60")
    monkeypatch.setattr(render, "terminal", lambda: True)
    render.say(sentence)
    shown = capsys.readouterr().out.splitlines()
    assert len(shown) > 1 and all(len(line) <= 59 for line in shown)
    assert " ".join(line.strip() for line in shown) == sentence  # every word whole, none cut
    monkeypatch.setattr(render, "terminal", lambda: False)
    render.say(sentence)
    assert capsys.readouterr().out == sentence + "\n"
