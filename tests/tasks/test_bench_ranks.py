"""``octlm bench --nproc N``: one process and N ranks timed in one run, and bad input refused before any rank starts."""

from __future__ import annotations

import io
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import cli, holds, json_out, octlm

from octlm.runtime import launch, load


@pytest.mark.slow
@pytest.mark.ranks
def test_bench_nproc_2_reports_one_process_two_ranks_and_pieces_at_equal_threads(home: Path) -> None:
    result = octlm(
        home,
        "bench",
        "EXP-001",
        "--steps",
        "2",
        "--nproc",
        "2",
        "--rounds",
        "1",
        "--json",
        timeout=240,
        env={"OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stderr
    report = json_out(result)
    holds(report, "octlm bench --nproc N --json")
    for row in report["results"]:
        holds(row, "octlm bench --nproc N --json: each of results")
    assert report["nproc"] == 2 and report["tokens_per_step"] == 4 * 16  # the global batch, on 1 or 2 ranks
    one, two, one_pieces, two_pieces = report["results"]
    assert [(r["ranks"], r["mode"]) for r in report["results"]] == [
        (1, "per rank"),
        (2, "per rank"),
        (1, "2 pieces"),
        (2, "2 pieces"),
    ]
    for row in report["results"]:
        assert row["ms_per_step"] > 0 and row["tokens_per_second"] > 0 and row["precision"] == "fp32"
        assert row["ranks"] * row["threads_per_rank"] == 2  # equal total threads: 1 x 2 against 2 x 1
        assert 0 <= row["all_reduce_share"] < 1 and row["rounds"] == 1 and row["spread"] == 0
        assert row["load_average"] >= 0
    assert one["all_reduce_ms"] == 0 and one["speed_up"] == 1.0
    assert two["all_reduce_ms"] > 0 and one_pieces["all_reduce_ms"] > 0 and two_pieces["all_reduce_ms"] > 0
    assert two["speed_up"] == pytest.approx(two["tokens_per_second"] / one["tokens_per_second"], rel=1e-2)
    assert sorted(path.name for path in home.iterdir()) == ["corpus", "experiments"]  # bench writes nothing


def test_variants_run_at_equal_total_threads_in_alternating_rounds() -> None:
    from octlm.tasks.bench import rounds

    planned = rounds.variants(4, 8, 1)
    assert [(v.ranks, v.pieces, v.threads) for v in planned] == [(1, 0, 4), (4, 0, 1), (1, 8, 4), (4, 8, 1)]
    assert {v.ranks * v.threads for v in planned} == {4}
    assert [v.mode for v in planned] == ["per rank", "per rank", "8 pieces", "8 pieces"]
    a, b = rounds.variants(2, 0, 1)  # no pieces: one process and two ranks
    assert rounds.order([a, b], 3) == [a, b, b, a, a, b]


def test_rounds_summarise_medians_spread_and_load() -> None:
    from octlm.tasks.bench import rounds

    a, b = rounds.variants(2, 0, 1)

    def found(rate: float) -> dict[str, object]:
        row = {"precision": "fp32", "ranks": 1, "threads_per_rank": 1, "tokens_per_second": rate}
        return {
            "results": [
                {
                    **row,
                    "ms_per_step": 1000 / rate,
                    **dict.fromkeys(("all_reduce_ms", "all_reduce_longest_ms", "all_reduce_share"), 0.0),
                }
            ]
        }

    runs = [
        (a, found(100.0), load.Busy(0.5, 0.1)),
        (b, found(150.0), load.Busy(0.7, 0.0)),
        (b, found(190.0), load.Busy(0.6, 0.2)),
        (a, found(110.0), load.Busy(0.4, 0.1)),
        (a, found(120.0), load.Busy(0.9, None)),
        (b, found(170.0), load.Busy(0.3, 0.1)),
    ]
    one, two = rounds.summarise(runs, [a, b])
    assert one["tokens_per_second"] == 110.0 and one["spread"] == pytest.approx(20 / 110, abs=1e-4)
    assert two["tokens_per_second"] == 170.0 and two["speed_up"] == pytest.approx(170 / 110, abs=1e-3)
    assert one["tokens_per_second_by_round"] == [100.0, 110.0, 120.0] and one["rounds"] == 3
    assert (one["load_average"], two["load_average"]) == (0.9, 0.7)
    assert (one["others_busy_cores"], two["others_busy_cores"]) == (0.1, 0.2)
    assert rounds.load_warning([one, two], cores=2) is None  # 0.2 of 2 cores busy elsewhere: within BUSY_SHARE
    warning = rounds.load_warning([one, two], cores=2, simulated=1.5)
    assert warning is not None and "1.50 of the 2 cores" in warning and "load average up to 0.90" in warning
    assert "the ratios mean little" in warning


def test_the_meter_sees_what_other_processes_keep_busy() -> None:

    meter = load.Meter()
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)  # not our child's time
    try:
        time.sleep(1.5)
        seen = meter.stop()
    finally:
        busy.kill()
        busy.wait()
    assert seen.load_average >= 0
    assert seen.others is not None and seen.others > 0.5  # one core kept busy by a process we do not wait for


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
