"""Issue 46 items 2 to 5: verdicts a reviewer would sign. Configurations compared as configurations (paired by seed
where they share their seeds, the evaluation's part of the error the same paired group-mean error in ``show A B`` and
``show SWEEP``), the run-level verdict phrased as what it is and always without seed noise; words that hold (twins
"identical", seeds for 80% power at a stated smallest effect, no advice to score what was scored, effect sizes,
Holm's adjustment, the sweep winner's optimism); only comparable runs judged; every number in ``--json``. Run files,
blocks files and registry rows as octlm writes them, without training (the sweep that trains is in
``tests/tasks/test_sweep_verdicts.py``)."""

from __future__ import annotations

import json
import math
import random
import statistics
from pathlib import Path

import pytest
from conftest import cli, holds, json_out, write_experiment

from octlm.core.home import Home
from octlm.store.experiments import load, register
from octlm.store.registry import Registry
from octlm.store.runs import evalblocks
from octlm.store.runs.evalblocks import BlockEvaluation
from octlm.views.compare import noise, seeds, student, winner
from octlm.views.compare.noise import Error, Size

BLOCKS, TARGETS, BYTES = 24, 16, 40
DATA, TOKENIZER = "d" * 64, "t" * 64
RUN = "octlm show A B --json: a versus's run and configuration, octlm show SWEEP --json: best_against_next"


def blocks_of(loss: float, seed: int, shared: float = 0.3, own: float = 0.02) -> list[float]:
    """Each block's summed nats: a difficulty every model shares (the same blocks: ``random.Random(0)``), a little
    of its own (``seed``), around ``loss`` nats a token."""
    difficulty, mine = random.Random(0), random.Random(seed)
    return [TARGETS * (loss + shared * difficulty.gauss(0, 1) + own * mine.gauss(0, 1)) for _ in range(BLOCKS)]


def trained(home: Path, experiment_id: str, nats: list[float], tokenizer: str = TOKENIZER, **training: object) -> None:
    """An experiment as a finished run leaves it: its config, a run file whose final evaluation is ``nats``'s (loss,
    error and bits per byte computed as the evaluation computes them), the blocks file, the registry's rows with
    the data and tokenizer fingerprints."""
    write_experiment(home, experiment_id, training=dict(training))
    targets, byte_counts = [TARGETS] * len(nats), [BYTES] * len(nats)
    loss = math.fsum(nats) / sum(targets)
    influence = [(a - loss * b) / sum(targets) for a, b in zip(nats, targets, strict=True)]
    se = math.sqrt(len(nats) / (len(nats) - 1) * math.fsum(i * i for i in influence))
    record = {
        "step": 12,
        "tokens": 768,
        "train_loss": loss + 0.1,
        "eval_loss": loss,
        "eval_loss_se": se,
        "perplexity": math.exp(loss),
        "bits_per_byte": math.fsum(nats) / (math.log(2) * sum(byte_counts)),
        "eval_tokens": sum(targets),
        "data_blocks": 48,
        "data_receipt": "0" * 16,
    }
    (home / "runs").mkdir(exist_ok=True)
    run_file = home / "runs" / f"{experiment_id}.jsonl"
    run_file.write_text(json.dumps(record) + "\n")
    evalblocks.append(evalblocks.path_for(run_file), BlockEvaluation(12, "same blocks", nats, targets, byte_counts))
    with Registry(home / "registry.db") as registry:
        register(Home(home), registry, load(Home(home), experiment_id))
        run = registry.start_run(experiment_id, "train", start_step=0, data_hash=DATA, tokenizer_hash=tokenizer)
        registry.finish_run(run, "completed", end_step=12, latest_metrics=record, final_metrics=record)


def test_students_p_and_critical_values_agree_with_closed_forms_and_each_other() -> None:
    """p of Student's t against its closed forms at 1 and 2 degrees of freedom; the critical value is where p is 5%,
    so a verdict's p and its critical value never disagree."""
    for t in (0.3, 1.0, 2.5, 12.706, 80.0):
        assert student.p_value(t, 1) == pytest.approx(1 - 2 * math.atan(t) / math.pi, abs=1e-12)
        assert student.p_value(-t, 2) == pytest.approx(1 - t / math.sqrt(2 + t * t), abs=1e-12)
    for df in (1, 2, 2.6, 4, 10, 30, 1e6):
        assert student.p_value(student.t_critical(df), df) == pytest.approx(0.05, abs=1e-9)
    assert student.p_value(1.959964, math.inf) == pytest.approx(0.05, abs=1e-6)
    assert student.p_value(0.0, 3) == 1.0 and student.p_value(math.inf, 3) == 0.0


def test_holm_and_the_expected_largest_of_normal_draws() -> None:
    assert student.holm([0.01, 0.04, None, 0.03]) == [0.03, 0.06, None, 0.06]
    assert student.holm([0.2]) == [0.2]
    assert student.holm([0.01, 0.004], family=6) == [0.05, 0.024]  # two of a family of 6: its largest multipliers
    # normal order statistics (any table): the best of 2, 6 and 18 alike draws
    assert [round(student.expected_maximum(k), 3) for k in (1, 2, 6, 18)] == [0.0, 0.564, 1.267, 1.82]
    # the figure: the best of 6 configurations of 3 seeds is about 0.7 seed SDs optimistic
    assert student.expected_maximum(6) / math.sqrt(3) == pytest.approx(0.73, abs=0.005)


def test_seeds_for_80_percent_power_find_the_effect_80_percent_of_the_time() -> None:
    """The seeds a configuration needs for 80% power at an effect: simulated Welch tests at that many seeds find it
    about 80% of the time, and about twice as many as where the effect would just stand at the threshold (the old
    "about N seeds would resolve it", which is 50% power)."""
    sd, effect = 0.02, 0.01
    members = [seeds.Member(f"a{i}", ("a", i), 5.0 + sd * g) for i, g in enumerate((-1.0, 0.0, 1.0))]
    others = [seeds.Member(f"b{i}", ("b", i), 5.0 + sd * g) for i, g in enumerate((-1.0, 0.0, 1.0))]
    compared = seeds.configuration(members, others, Size(5.0, sd, effect))
    assert compared is not None and compared.verdict["test"] == "Welch"
    needed = compared.verdict["seeds_needed"]
    assert needed is not None and 60 <= needed <= 70  # 2 (1.98 + 0.85)^2 (0.02 / 0.01)^2 = 64
    half = next(n for n in range(2, 1000) if effect > student.t_critical(2 * n - 2) * sd * math.sqrt(2 / n))
    assert 1.8 < needed / half < 2.2
    draw, found = random.Random(46), 0
    for _ in range(2000):
        a = [draw.gauss(0, sd) for _ in range(needed)]
        b = [draw.gauss(effect, sd) for _ in range(needed)]
        se = math.sqrt(statistics.variance(a) / needed + statistics.variance(b) / needed)
        df = student.welch_df(statistics.stdev(a), needed, statistics.stdev(b), needed)
        found += student.p_value((statistics.fmean(b) - statistics.fmean(a)) / se, df) < 0.05
    assert 0.77 < found / 2000 < 0.83
    assert "80% power to find 0.0100 nats (--min-effect) needs about" in seeds.advice(compared, None)


def test_no_verdict_calls_beyond_what_the_evaluations_own_error_explains() -> None:
    """The issue's self-contradiction: a difference many times the seeds' error but inside the evaluation's own
    was called beyond seed noise. Whatever the parts, beyond means beyond the evaluation's error alone too."""
    judged = noise.measured("configuration", "Welch", 0.05, Error(0.0063, 1.6, 0.0594, 45, 46, "documents"), Size())
    assert judged["within_noise"] is True and judged["evaluation_alone"] is True
    words = seeds.words(judged, "EXP-001", "EXP-004", "2 seeds against 2", "")
    assert "within seed and evaluation noise" in words and "(evaluation noise dominates)" in words
    assert "beyond" not in words
    # the whole error's test at Satterthwaite's 8 df would say beyond; the evaluation's alone, at 2 df, within
    judged = noise.measured("configuration", "Welch", 0.07, Error(0.02, 1000, 0.02, 2, 3, "documents", 12), Size())
    assert abs(0.07) > judged["critical"] * judged["se"] and judged["within_noise"] is True  # type: ignore[operator]
    words = seeds.words(judged, "EXP-001", "EXP-004", "3 seeds against 3", "")
    assert "within noise: the evaluation's own error alone (± 0.0200) could explain it" in words
    draw = random.Random(7)
    for _ in range(500):
        difference, seed_se, evaluation = draw.uniform(-1, 1), draw.uniform(0, 0.3), draw.uniform(0, 0.5)
        seed_df, evaluation_df = draw.choice([1, 2, 4, 30]), draw.choice([1, 3, 9, 45])
        verdict = noise.measured(
            "configuration", "Welch", difference, Error(seed_se, seed_df, evaluation, evaluation_df), Size()
        )
        if abs(difference) <= student.t_critical(evaluation_df) * evaluation:
            assert verdict["within_noise"] is True, (difference, seed_se, evaluation)


def test_twins_are_identical_with_the_numbers_in_json(home: Path) -> None:
    """Same config, same seed: every block's loss the same, 0 ± 0: "identical", ``identical: true``, never "within
    evaluation noise, 0.0x its standard error"."""
    trained(home, "EXP-001", blocks_of(5.0, 1))
    trained(home, "EXP-002", blocks_of(5.0, 1))
    shown = json_out(cli(home, "show", "EXP-001", "EXP-002", "--json"))
    run = shown["versus"][0]["run"]
    assert run["identical"] is True and run["difference"] == 0.0 and run["se"] == 0.0 and run["p"] == 1.0
    holds(run, RUN)
    text = cli(home, "show", "EXP-001", "EXP-002").stdout
    assert (
        "EXP-002 against EXP-001: on these blocks, EXP-002 and EXP-001 are identical: every block's loss the same"
        in text
    )
    assert "0.0x" not in text and "within evaluation noise" not in text
    assert "EXP-002 is a twin of EXP-001" in text


def test_the_run_level_verdict_says_what_it_is_with_every_number(home: Path) -> None:
    """One seed each: the run-level verdict, on these blocks, with its clusters, t, p, interval and effect size,
    says seed noise is not in its error whether it is beyond evaluation noise or within it."""
    trained(home, "EXP-001", blocks_of(5.0, 1))
    trained(home, "EXP-002", blocks_of(4.9, 2), learning_rate=1e-3)
    trained(home, "EXP-003", blocks_of(5.0, 3), learning_rate=2e-3)
    shown = json_out(cli(home, "show", "EXP-001", "EXP-002", "EXP-003", "--json"))
    beyond, within = (v["run"] for v in shown["versus"])
    for verdict in (beyond, within):
        holds(verdict, RUN)
        holds(verdict["effect"], "octlm show A B --json: a verdict's effect")
        assert verdict["level"] == "run" and verdict["test"] == "paired" and verdict["clusters"] == BLOCKS
        assert verdict["df"] == pytest.approx(BLOCKS - 1) and verdict["critical"] == pytest.approx(
            student.t_critical(BLOCKS - 1)
        )
        assert verdict["comparisons"] == 2 and verdict["p_adjusted"] >= verdict["p"]  # Holm over the two
        assert verdict["low"] < verdict["difference"] < verdict["high"]
        assert "seed noise is not in this error" in verdict["words"]
    assert beyond["within_noise"] is False and beyond["effect"]["percent"] == pytest.approx(
        100 * beyond["difference"] / shown["experiments"][0]["final"]["eval_loss"]
    )
    assert within["within_noise"] is True
    lines = cli(home, "show", "EXP-001", "EXP-002", "EXP-003").stdout.splitlines()
    said = next(line for line in lines if line.startswith("EXP-002 against EXP-001: "))
    assert "on these blocks, EXP-002's eval loss is lower than EXP-001's: " in said
    assert f"(paired, {BLOCKS} blocks" in said and "Holm-adjusted over 2 comparisons" in said
    assert "beyond evaluation noise" in said and "% of EXP-001's loss" in said
    assert "seed noise is not in this error" in said and "is better by" not in said
    # the write_experiment config asks for 4 blocks and these read 24: not the whole split, so more would narrow it
    assert "more evaluation tokens (training.eval_tokens" in next(line for line in lines if "EXP-003 against" in line)


def test_no_advice_to_score_what_was_already_scored(home: Path) -> None:
    """A within-noise verdict on an evaluation of the whole validation split (eval_blocks 0) does not advise
    scoring more of it: only a larger split would narrow it."""
    trained(home, "EXP-001", blocks_of(5.0, 1), eval_blocks=0, eval_tokens=0)
    trained(home, "EXP-002", blocks_of(5.0, 2), eval_blocks=0, eval_tokens=0, learning_rate=1e-3)
    said = json_out(cli(home, "show", "EXP-001", "EXP-002", "--json"))["versus"][0]["noise"]
    assert "within evaluation noise" in said and "the whole validation split was scored" in said
    assert "more evaluation tokens" not in said and "training.eval_tokens" not in said
    assert seeds.scored_all(
        {"training": {"eval_tokens": 8192, "eval_blocks": 16}, "model": {"context_length": 128}}, 46
    )
    assert not seeds.scored_all({"training": {"eval_tokens": 0, "eval_blocks": 16}, "model": {"context_length": 8}}, 16)


def groups(home: Path, shift: float, shared_seeds: bool = True) -> None:
    """Two configurations of 3 seeds each: A (lr 3e-3, seeds 1-3) and B (lr 1e-3, seeds 1-3, or 11-13), B's loss
    ``shift`` from A's with the seed moving both alike (+-0.05 nats by seed, 0.003 of each's own)."""
    by_seed = {1: 0.05, 2: -0.04, 3: 0.0, 11: 0.05, 12: -0.04, 13: 0.0}
    own = [0.002, -0.003, 0.001]
    for index, seed in enumerate((1, 2, 3)):
        trained(home, f"EXP-00{index + 1}", blocks_of(5.0 + by_seed[seed], seed), seed=seed)
    for index, seed in enumerate((1, 2, 3) if shared_seeds else (11, 12, 13)):
        nats = blocks_of(5.0 + shift + by_seed[seed] + own[index], seed)
        trained(home, f"EXP-00{index + 4}", nats, seed=seed, learning_rate=1e-3)


def test_configurations_lead_paired_by_seed_and_the_run_line_says_what_it_is(home: Path) -> None:
    """Replicates with shared seeds: the configurations' verdict leads, paired by seed (the seed moved both alike:
    its error is the spread of the per-seed differences), beyond noise where Welch's would not be; the two runs'
    line follows, on these blocks, and says seed noise is not in its error."""
    groups(home, -0.03)
    shown = json_out(cli(home, "show", "EXP-001", "EXP-004", "--json"))
    configuration = shown["versus"][0]["configuration"]
    holds(configuration, RUN)
    assert configuration["level"] == "configuration" and configuration["test"] == "paired by seed"
    assert configuration["seeds"] == 3 and configuration["within_noise"] is False and configuration["p"] < 0.05
    a = [5.05, 4.96, 5.0]
    welch = math.sqrt(2 * statistics.variance(a) / 3)
    assert configuration["seed_se"] < welch / 5  # Welch's error, with the seed's part in it, is 5x more
    assert abs(configuration["difference"]) < student.t_critical(4) * welch  # Welch's test would say "within"
    assert configuration["effect"]["seed_sds"] is not None and configuration["evaluation_se"] is not None
    assert shown["versus"][0]["within_seed_noise"] is False
    lines = [line for line in cli(home, "show", "EXP-001", "EXP-004").stdout.splitlines() if " against " in line]
    assert lines[0].startswith("EXP-004 against EXP-001: as configurations, EXP-004's mean eval loss is lower than")
    assert "(paired by seed, 3 seeds; the seeds' ± " in lines[0] and "beyond seed and evaluation noise" in lines[0]
    assert lines[1].startswith("EXP-004 against EXP-001, these two runs: on these blocks, EXP-004's eval loss is ")
    assert "seed noise is not in this error" in lines[1]


def test_groups_without_shared_seeds_are_judged_by_welch_and_say_the_seeds_needed(home: Path) -> None:
    """Other seeds: Welch's test. Within noise, the seeds a configuration needs for 80% power at --min-effect; or,
    where the evaluation's own error is too large for that effect, that no number of seeds would do."""
    groups(home, -0.03, shared_seeds=False)
    default = json_out(cli(home, "show", "EXP-001", "EXP-004", "--json"))["versus"][0]["configuration"]
    assert default["test"] == "Welch" and default["within_noise"] is True and default["min_effect"] == 0.01
    assert default["seeds_needed"] is None and "no number of seeds gives 80% power" in default["words"]
    found = {}
    for effect in ("0.05", "0.1"):
        shown = json_out(cli(home, "show", "EXP-001", "EXP-004", "--json", "--min-effect", effect))
        found[effect] = shown["versus"][0]["configuration"]
        assert shown["min_effect"] == float(effect) and found[effect]["min_effect"] == float(effect)
    assert found["0.1"]["seeds_needed"] < found["0.05"]["seeds_needed"]
    needed = found["0.05"]["seeds_needed"]
    assert (
        f"80% power to find 0.0500 nats (--min-effect) needs about {needed} seeds a configuration"
        in found["0.05"]["words"]
    )


def test_the_evaluation_part_is_the_paired_group_mean_error(home: Path) -> None:
    """The evaluation's part of a seed-level error is the two groups' mean per-block losses paired, not the runs'
    own errors: far below them where the blocks' difficulty is shared."""
    groups(home, -0.03)
    shown = json_out(cli(home, "show", "EXP-001", "EXP-004", "--json"))
    configuration = shown["versus"][0]["configuration"]
    mean = [
        sum(blocks_of(5.0 + s + o, seed)[i] for s, o, seed in ((0.05, 0.002, 1), (-0.04, -0.003, 2), (0.0, 0.001, 3)))
        / 3
        - sum(blocks_of(5.0 + s, seed)[i] for s, seed in ((0.05, 1), (-0.04, 2), (0.0, 3))) / 3
        for i in range(BLOCKS)
    ]
    loss = math.fsum(mean) / (TARGETS * BLOCKS)
    influence = [(d - loss * TARGETS) / (TARGETS * BLOCKS) for d in mean]
    expected = math.sqrt(BLOCKS / (BLOCKS - 1) * math.fsum(i * i for i in influence))
    assert configuration["evaluation_se"] == pytest.approx(expected, rel=1e-9)
    assert configuration["evaluation_se"] < shown["experiments"][0]["eval_loss_se"] / 5


def test_runs_on_other_data_or_tokenizers_are_not_comparable(home: Path) -> None:
    """Different tokenizers: "not comparable", no verdict on noise, and the commands that would compare them."""
    trained(home, "EXP-001", blocks_of(5.0, 1))
    trained(home, "EXP-002", blocks_of(4.0, 2), tokenizer="u" * 64, learning_rate=1e-3)
    shown = json_out(cli(home, "show", "EXP-001", "EXP-002", "--json"))["versus"][0]
    assert shown["comparable"] is False and shown["run"] is None and shown["configuration"] is None
    assert shown["within_noise"] is None and shown["noise"].startswith("not comparable: EXP-002 and EXP-001 have")
    assert "`octlm eval EXP-001 --on 'corpus/*.txt'` and `octlm eval EXP-002 --on 'corpus/*.txt'`" in shown["noise"]
    text = cli(home, "show", "EXP-001", "EXP-002").stdout
    said = [line for line in text.splitlines() if line.startswith("EXP-002 against EXP-001")]
    assert len(said) == 1 and "bits per byte" in said[0]
    assert "noise" not in said[0].replace("no verdict", "")  # no word on noise at all


def test_min_effect_is_checked_and_applies_to_comparisons(home: Path) -> None:
    for bad in ("0", "-0.01", "nan"):
        result = cli(home, "show", "EXP-001", "EXP-002", "--min-effect", bad)
        assert result.exit_code == 2 and "--min-effect" in result.stderr and len(result.stderr.splitlines()) == 1
    listed = cli(home, "show", "--min-effect", "0.02")
    assert listed.exit_code == 2 and "applies to a comparison or a sweep" in listed.stderr


def test_a_sweeps_winner_names_its_optimism_those_within_noise_and_the_luckiest_trial() -> None:
    """Six configurations of 3 seeds: the best against each other one, Holm-adjusted; the best's optimism, 0.73
    seed SDs; the best so far named as the luckiest trial; the advice to confirm the best on fresh seeds."""
    draw = random.Random(3)
    entries = []
    for rank, mean in enumerate((4.90, 4.91, 4.95, 5.2, 5.3, 5.4), 1):
        members = [seeds.Member(f"T{rank}{s}", s, mean + 0.02 * draw.gauss(0, 1)) for s in range(3)]
        entries.append(winner.Entry(rank, {"lr": rank}, members))
    found = winner.challengers(entries, "eval_loss", Size(), None)
    assert [c["verdict"]["comparisons"] for c in found] == [15] * 5  # type: ignore[index]  # every pair of the 6
    assert found[0]["verdict"]["within_noise"] is True and found[-1]["verdict"]["within_noise"] is False  # type: ignore[index]
    bias = winner.optimism(entries, 18)
    assert bias is not None and bias["seed_sds"] == pytest.approx(0.73, abs=0.005)
    assert bias["luckiest_seed_sds"] == pytest.approx(1.82, abs=0.005) and bias["nats"] is not None
    notes = winner.notes(found, entries[0], bias, "lr")
    assert notes[0].startswith(
        "within noise of the best (each against it, Holm-adjusted over the 15 pairs of 6 configurations the best was "
        "chosen from): rank 2"
    )
    assert "about 0.73 seed SDs" in notes[1]
    assert "`octlm sweep extend lr --seeds 6`" in notes[2]
    assert winner.luckiest(4.85, 18, bias).startswith("best so far: 4.8500 after 18 finished trials: the luckiest")


@pytest.mark.slow  # 500 sweeps judged: some 7 s
def test_a_no_effect_sweeps_winner_is_called_beyond_noise_at_most_5_percent_of_the_time() -> None:
    """Issue 46 item 7: a sweep's winner is the configuration whose mean came out lowest, so judging it against the
    others is a comparison chosen after the fact; Holm over its k - 1 challengers alone said "beyond noise of the
    best" of 112 of these 1,500 no-effect sweeps of 6 configurations x 3 shared seeds (7.5%, 95% interval 6.2-8.9%;
    8.2% of 500 drawn from real runs, benchmarks/calibration.py). Adjusted over every pair the choice was made from,
    k(k-1)/2: 39 (2.6%, 1.9-3.5%). The test judges the first 500 of those sweeps (7 s where 1,500 took 20): 6 called
    (1.2%), and 36 (7.2%) with Holm over the k - 1 challengers, so it fails on that code. Normal seed effects shared by
    every configuration, and each run's own noise."""
    draw, sweeps, called = random.Random(46), 500, 0
    for _ in range(sweeps):
        shared = [draw.gauss(0, 1) for _ in range(3)]
        groups = [[seeds.Member(f"C{c}S{s}", s, 5 + shared[s] + draw.gauss(0, 1)) for s in range(3)] for c in range(6)]
        groups.sort(key=lambda members: statistics.fmean(m.loss for m in members))
        entries = [winner.Entry(rank, {"lr": rank}, members) for rank, members in enumerate(groups, 1)]
        found = winner.challengers(entries, "eval_loss", Size(), None)
        called += any(c["verdict"] is not None and c["verdict"]["within_noise"] is False for c in found)
    assert called / sweeps <= 0.05, f"the best called beyond noise in {called} of {sweeps} no-effect sweeps"
