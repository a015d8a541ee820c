"""Issue 46 item 2, with real training: a 3x learning-rate change on 3 seeds against 3, in a sweep that gives both
configurations the same seeds, is called beyond noise, paired by seed, with every number in ``--json``; and ``show A
B`` between two of its trials says the same of the two configurations as ``show SWEEP`` (one verdict, the same
evaluation part). The config: the tests' tiny one (12 steps, lr 1e-3 against 3e-3), evaluated on its whole
validation split (eval_blocks 0: 102 blocks). Chosen by training that sweep from four base seeds (1337, 2024, 7, 11)
at three sizes (4, 12 and 24 steps) and two rate pairs: at 12 steps and 1e-3 against 3e-3 the difference was
0.46-0.47 nats and its paired t 23 to 123 at 2 df (Welch's 11 to 21) at every base seed tried, where at 24 steps the
3x change made no difference and at 1e-2 against 3e-2 the verdict hung on the base seed."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from conftest import cli, holds, json_out, octlm, write_corpus, write_experiment

from octlm.views.compare import student

pytestmark = pytest.mark.slow
RUN = "octlm show A B --json: a versus's run and configuration, octlm show SWEEP --json: best_against_next"


def test_a_3x_learning_rate_change_on_3_shared_seeds_is_beyond_noise_in_both_views(tmp_path: Path) -> None:
    home = write_corpus(tmp_path / "home")
    write_experiment(home, "EXP-001", training={"eval_blocks": 0, "learning_rate": 1e-3, "min_learning_rate": 1e-4})
    grid = "training.learning_rate=1e-3,3e-3"
    made = cli(home, "sweep", "new", "lr", "--from", "EXP-001", "--grid", grid, "--seeds", "3", "--json")
    assert made.exit_code == 0, made.stderr
    done = octlm(home, "work", "lr", "--until-empty", "-q", env={"OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr
    ranking = json_out(cli(home, "show", "lr", "--json"))
    best, runner_up = ranking["configurations"][:2]
    assert best["params"] == {"training.learning_rate": 0.003} and best["value"]["n"] == runner_up["value"]["n"] == 3
    verdict = ranking["best_against_next"]
    holds(verdict, RUN)
    assert verdict["test"] == "paired by seed" and verdict["seeds"] == 3 and verdict["within_noise"] is False
    assert verdict["difference"] < 0 and verdict["p"] < 0.01 and verdict["evaluation_alone"] is False
    assert verdict["df"] > 2 and verdict["critical"] == pytest.approx(student.t_critical(verdict["df"]))
    assert verdict["clusters"] and verdict["cluster_unit"] and verdict["evaluation_se"] > 0
    # pairing by seed took the seed's shared part out: its error is below Welch's on the same six runs
    welch = math.sqrt((best["value"]["sd"] ** 2 + runner_up["value"]["sd"] ** 2) / 3)
    assert verdict["seed_se"] < welch
    assert ranking["within_noise_of_best"] == [] and ranking["optimism"]["configurations"] == 2
    text = cli(home, "show", "lr").stdout
    assert "(paired by seed, 3 seeds; the seeds' ± " in text and "beyond seed and evaluation noise" in text
    assert "best so far: " in text and "the luckiest single trial" in text
    assert "`octlm sweep extend lr --seeds 6`" in text
    # show A B between a trial of each: the same two configurations, the same verdict
    first, other = runner_up["trials"][0], best["trials"][0]
    shown = json_out(cli(home, "show", first, other, "--json"))["versus"][0]["configuration"]
    for key in ("difference", "se", "seed_se", "evaluation_se", "df", "p"):
        assert shown[key] == pytest.approx(verdict[key], rel=1e-9), key
    assert shown["test"] == "paired by seed" and shown["within_noise"] is False
