"""``octlm bench --nproc N``: one process and N ranks timed in one run, and bad input refused before any rank starts."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from conftest import cli, json_out, octlm

from octlm.runtime import launch


@pytest.mark.slow
@pytest.mark.ranks
def test_bench_nproc_2_reports_one_process_and_two_ranks(home: Path) -> None:
    result = octlm(home, "bench", "EXP-001", "--steps", "2", "--nproc", "2", "--json", timeout=120)
    assert result.returncode == 0, result.stderr
    report = json_out(result)
    assert report["nproc"] == 2 and report["tokens_per_step"] == 4 * 16  # the global batch, on 1 or 2 ranks
    one, two = report["results"]
    assert (one["ranks"], two["ranks"]) == (1, 2) and one["precision"] == two["precision"] == "fp32"
    for row in (one, two):
        assert row["ms_per_step"] > 0 and row["tokens_per_second"] > 0 and row["threads_per_rank"] >= 1
        assert 0 <= row["all_reduce_share"] < 1
    assert one["all_reduce_ms"] == 0 and one["speed_up"] == 1.0
    assert two["all_reduce_ms"] > 0 and 0 < two["all_reduce_share"] < 1
    assert two["speed_up"] == pytest.approx(two["tokens_per_second"] / one["tokens_per_second"], rel=1e-2)
    assert sorted(path.name for path in home.iterdir()) == ["corpus", "experiments"]  # bench writes nothing


@pytest.mark.parametrize(
    ("nproc", "message"),
    [("0", "--nproc 0: must be between 1 and"), ("3", "training.batch_size 4 does not divide into 3 ranks")],
)
def test_bench_nproc_bad_input_is_one_line_before_any_rank(
    home: Path, monkeypatch: pytest.MonkeyPatch, nproc: str, message: str
) -> None:
    monkeypatch.setattr(launch, "run", lambda *args: pytest.fail("ranks were started"))
    result = cli(home, "bench", "EXP-001", "--steps", "1", "--nproc", nproc)
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1 and message in result.stderr
    assert result.stdout == ""


def test_figures_take_the_slowest_rank_per_step_and_the_sum_without_the_wait() -> None:
    from octlm.tasks.bench.ranks import figures

    per_rank = [
        {"steps": [0.10, 0.30, 0.20], "reduces": [0.05, 0.01, 0.02], "threads": 1},
        {"steps": [0.12, 0.10, 0.22], "reduces": [0.01, 0.20, 0.03], "threads": 1},
    ]
    row = figures("fp32", 1000, per_rank)
    assert row["ms_per_step"] == 220.0  # median of 0.12, 0.30, 0.22
    assert row["all_reduce_ms"] == 10.0 and row["all_reduce_longest_ms"] == 50.0  # medians of min / max
    assert row["tokens_per_second"] == pytest.approx(1000 / 0.22, rel=1e-3)
    assert row["all_reduce_share"] == pytest.approx(0.01 / 0.22, abs=1e-4)
    alone = figures("fp32", 1000, [{"steps": [0.1], "reduces": [], "threads": 2}])
    assert alone["all_reduce_ms"] == 0 and alone["all_reduce_share"] == 0 and alone["threads_per_rank"] == 2


REPORT = {
    "parameters": 935040,
    "tokens_per_step": 1024,
    "compile": False,
    "nproc": 4,
    "machine": {"cores": 2, "device": "cpu"},
    "results": [
        {
            "precision": "fp32",
            "ranks": 1,
            "threads_per_rank": 2,
            "ms_per_step": 60.3,
            "tokens_per_second": 16981.4,
            "all_reduce_ms": 0.0,
            "all_reduce_share": 0.0,
            "speed_up": 1.0,
        },
        {
            "precision": "fp32",
            "ranks": 4,
            "threads_per_rank": 1,
            "ms_per_step": 90.51,
            "tokens_per_second": 11313.4,
            "all_reduce_ms": 9.898,
            "all_reduce_share": 0.1094,
            "speed_up": 0.666,
        },
    ],
}


@pytest.mark.parametrize("width", [80, 120])
def test_bench_ranks_table_fits_and_says_the_ranks_compete(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], width: int
) -> None:
    from octlm.cli import render
    from octlm.cli.commands import tools as commands_tools

    buffer = io.StringIO()  # a terminal ``width`` columns wide
    console = render.PlainConsole(width=width, file=buffer, force_terminal=True, color_system=None, soft_wrap=False)
    monkeypatch.setattr(render, "terminal", lambda: True)
    monkeypatch.setattr(render, "out_console", lambda: console)
    commands_tools.print_bench_ranks(REPORT, "EXP-008")
    text = buffer.getvalue()
    assert max(len(line) for line in text.splitlines()) <= width
    for whole in ("ranks", "threads", "ms/step", "90.51", "11,313", "10.94", "0.666", "speed-up"):
        assert whole in text, whole
    assert "4 threads on 2 cores" in capsys.readouterr().err
