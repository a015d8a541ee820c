from __future__ import annotations

from pathlib import Path

import pytest
from conftest import cli, holds, json_out


@pytest.mark.slow
def test_bench_json_reports_every_figure(home: Path) -> None:
    result = cli(home, "bench", "EXP-001", "--steps", "2", "--precision", "fp32,bf16", "--json")
    assert result.exit_code == 0, result.stderr
    report = json_out(result)
    holds(report, "octlm bench --json")
    holds(report["machine"], "octlm bench --json: machine")
    for row in report["results"]:
        holds(row, "octlm bench --json: each of results")
    assert report["parameters"] > 0 and report["tokens_per_step"] == 4 * 16
    assert [r["precision"] for r in report["results"]] == ["fp32", "bf16"]
    for row in report["results"]:
        for key in (
            "ms_per_step",
            "tokens_per_second",
            "model_flops_per_second",
            "matmul_peak_flops_per_second",
            "mfu",
            "checkpoint_bytes",
            "checkpoint_save_seconds",
            "checkpoint_load_seconds",
            "first_step_fresh_seconds",
            "first_step_resumed_seconds",
            "resume_to_fresh_ratio",
        ):
            assert row[key] > 0, key
        assert 0 < row["mfu"] < 1.5
        # The peak is the best of several square sizes, never one size alone.
        assert len(row["matmul_peak_by_size"]) >= 2
        assert row["matmul_peak_flops_per_second"] == max(row["matmul_peak_by_size"].values())
    assert report["compile"] is False
    assert report["bf16_over_fp32_tokens_per_second"] > 0
    assert cli(home, "bench", "EXP-001", "--precision", "fp64").exit_code == 2
