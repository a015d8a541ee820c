"""A slow run can be explained: a warning when the box is too busy for the threads a run asks for, and the load
average, the threads and the peak memory in every run's provenance."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import cli, json_out, octlm, write_experiment

from octlm.runtime import load


def test_a_run_that_asks_for_more_threads_than_the_box_has_free_is_warned(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OCTLM_NO_LOAD_CHECK", "0")
    write_experiment(home, training={"threads": load.cores() + 8, "steps": 4})  # more than any load leaves free
    result = cli(home, "train", "EXP-001", "-q")
    assert result.exit_code == 0, result.stderr
    lines = result.stderr.splitlines()
    warned = [i for i, line in enumerate(lines) if "this box is busy" in line]
    summary = next(i for i, line in enumerate(lines) if "completed at step 4/4" in line)
    assert len(warned) == 2 and warned[0] < summary < warned[1], result.stderr  # said, and again after the summary
    first, again = lines[warned[0]], lines[warned[1]]
    assert "training.threads: 1" in first and "OMP_NUM_THREADS=1" in first and "before the run starts" in first
    assert "again here: it slowed this run" in again
    write_experiment(home, "EXP-002", training={"threads": 1, "steps": 4})
    assert "this box is busy" not in cli(home, "train", "EXP-002", "-q").stderr  # one thread waits on no other


def test_where_pieces_make_the_thread_count_irrelevant_the_warning_says_resume_instead(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 50 item 2: with canonical pieces a resume at another thread count continues the same bits, so the busy
    box's warning no longer says that it is not bit-exact: it asks for fewer threads and a resume (threads asked for),
    or for a resume, which takes the cores free then (threads chosen at the start, and the box got busier since)."""
    monkeypatch.setenv("OCTLM_NO_LOAD_CHECK", "0")
    write_experiment(home, training={"threads": load.cores() + 8, "steps": 4, "micro_batches": 2})
    result = octlm(home, "train", "EXP-001", "-q")  # a process of its own: the pieces pin MKL before torch loads
    assert result.returncode == 0, result.stderr
    warned = [line for line in result.stderr.splitlines() if "this box is busy" in line]
    assert warned and "not bit-exact" not in result.stderr, result.stderr
    assert "give it fewer (training.threads: 1, or OMP_NUM_THREADS=1) and resume it" in warned[0]
    assert "canonical pieces train the same bits at any thread count" in warned[0]
    cores = load.cores()
    chosen = load.oversubscribed(cores, others=float(cores), how="chosen")
    assert chosen is not None and "stop it (Ctrl-C) and resume: the resume takes the cores free then" in chosen
    plain = load.oversubscribed(cores, others=float(cores))
    assert plain is not None and "a resume under another thread count is not bit-exact" in plain


def test_the_busy_box_rule_reads_what_other_processes_use(monkeypatch: pytest.MonkeyPatch) -> None:
    """Measured use by others (not the lagging 1-minute average) decides: none, then the cores all taken."""
    monkeypatch.setenv("OCTLM_NO_LOAD_CHECK", "0")
    cores = load.cores()
    assert load.oversubscribed(cores, others=0.0) is None
    assert load.oversubscribed(cores, others=load.SLACK / 2) is None
    busy = load.oversubscribed(cores, others=float(cores))
    assert busy is not None and f"other processes keep {cores:.1f} of its {cores} cores busy" in busy
    assert load.Choice(1, "chosen", float(cores)).said().startswith("1 thread (")


def test_the_rule_counts_the_load_and_the_threads_against_the_cores() -> None:
    assert load.oversubscribed(1) is None  # whatever the load: one thread never waits on another


def test_every_run_records_the_load_the_threads_and_its_peak_memory(home: Path) -> None:
    assert cli(home, "train", "EXP-001", "-q").exit_code == 0
    run = json_out(cli(home, "show", "EXP-001", "--json"))["runs"][-1]
    assert isinstance(run["load_average"], float) and run["load_average"] >= 0
    assert run["threads"] >= 1 and run["peak_rss"] > 50_000_000  # torch alone takes more
    shown = cli(home, "show", "EXP-001").stdout
    assert "load" in shown and "peak MB" in shown
