"""Data preparation apart: the tokenizer trained and the token file written in a forked child, whose
memory goes back to the OS; the training process loads both, with the same tokens."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import write_corpus, write_experiment

from octlm.core.home import Home
from octlm.core.reporting import QuietReporter
from octlm.data import apart
from octlm.data.pipeline import prepare
from octlm.data.tokenizer import Tokenizer
from octlm.store import experiments

pytestmark = pytest.mark.skipif(not apart.available(), reason="fork-based preparation runs on Linux only")


class Recorder(QuietReporter):
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def phase(self, name: str, detail: str = "") -> None:
        self.calls.append(("phase", name, detail))

    def note(self, message: str) -> None:
        self.calls.append(("note", message))


def test_the_child_s_result_and_reports_come_back_in_order() -> None:
    def work(reporter) -> dict:
        reporter.phase("training tokenizer", "4 tokens")
        reporter.note("done")
        return {"pid": os.getpid(), "notes": ["a", "b"]}

    recorder = Recorder()
    result = apart.run_apart(work, recorder)
    assert result["notes"] == ["a", "b"] and result["pid"] != os.getpid()
    assert recorder.calls == [("phase", "training tokenizer", "4 tokens"), ("note", "done")]


def test_a_failure_in_the_child_leaves_the_work_to_this_process() -> None:
    def work(reporter) -> None:
        reporter.phase("encoding")
        raise MemoryError("no room")

    recorder = Recorder()
    assert apart.run_apart(work, recorder) is None
    assert recorder.calls == [("phase", "encoding", "")]


def trained_where(home: Path, monkeypatch: pytest.MonkeyPatch, **options) -> tuple[int, object]:
    """Prepare EXP-001 in ``home``; the pid that trained its tokenizer and the prepared data."""
    marker, train = home / "trained-by", Tokenizer.train

    def recording(*args, **kwargs):
        marker.write_text(str(os.getpid()))
        return train(*args, **kwargs)

    monkeypatch.setattr(Tokenizer, "train", staticmethod(recording))
    config = experiments.load(Home(home), "EXP-001")
    cpu = torch.device("cpu")
    prepared = prepare(Home(home), config, home / "tokenizer.json", first_step=False, device=cpu, **options)
    return int(marker.read_text()), prepared


def test_a_cold_preparation_trains_apart_and_gives_the_same_tokens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    homes = [write_corpus(tmp_path / name) for name in ("apart", "here")]
    for home in homes:
        write_experiment(home)
    apart_pid, apart_data = trained_where(homes[0], monkeypatch)
    here_pid, here_data = trained_where(homes[1], monkeypatch, apart=False)
    assert apart_pid != os.getpid() and here_pid == os.getpid()
    assert apart_data.data_hash == here_data.data_hash
    assert np.array_equal(apart_data.train_blocks.stream, here_data.train_blocks.stream)
    assert np.array_equal(apart_data.eval_blocks.stream, here_data.eval_blocks.stream)
    assert any(note.startswith("trained tokenizer") for note in apart_data.notes)


def test_octlm_no_fork_keeps_the_work_in_this_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = write_corpus(tmp_path / "home")
    write_experiment(home)
    monkeypatch.setenv("OCTLM_NO_FORK", "1")
    pid, _ = trained_where(home, monkeypatch)
    assert pid == os.getpid()
