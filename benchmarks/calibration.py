"""How often octlm's verdicts call two things different when nothing differs, and when something does (issue 46).

Real training of tiny configs: day1's model (EXP-008's preset) shortened to --steps steps, with the keys ``octlm
new`` writes (``training.eval_tokens`` 8192 spread across the validation split, ``data.sampling`` epochs) and
``training.threads`` 1 (on a small box shared with other work, two threads a run waited on each other: 10 steps took
45-50 s at a load of 15 where one thread took 3.3-4.2 s), evaluated once at its end, on two corpora: ``docs``
(builtin:docs, whose validation split is 46 blocks of 4 documents: few documents) and ``stdlib`` (the first 4 MiB of
the running Python's builtin:stdlib, whose 64 evaluated blocks come from 22 documents: many). Of each corpus,
with C = --comparisons: the base config under seeds 1 to 6C, and its learning rate 3x under seeds 6i+1 to 6i+3 (i <
C), so that every comparison below is of runs no other comparison of
its kind uses. Each design is judged by octlm's own verdict code, as ``show`` judges it:

- run level, clustered paired (``show A B`` of one run against one: ``compare.versus.measure`` and ``settle`` on the
  pair of ``views.side_by_side.pairing``): of one config under two seeds (3C pairs of the base, 1.5C of the 3x),
  read as a verdict on the configuration, and of a seed of the base against the same seed at 3x;
- run level, split halves: the clustered paired error's own check, where the evaluation has 8 clusters or more: the
  clusters of one pair's evaluation cut at random into two halves, each half's paired difference with its error
  (``views.paired.pair``), and the two halves' difference judged by the two errors (``compare.noise.measured``):
  both halves estimate the same difference, so "different" is false; 25 cuts a pair, the rate's interval over pairs;
- configuration level, Welch (3 seeds against 3 others: ``compare.seeds.configuration``, with the evaluation's part
  over the clusters of the groups' mean per-block losses): of one config (C comparisons of the base, C/2 of the
  3x), of the base against the 3x on other seeds, and with a fixed effect added to one group of the null pairs;
- configuration level, paired by seed (a sweep: the configurations share their seeds): the same null groups with the
  second's seeds named as the first's, in order (the same config under the same seed trains the same bits, a twin:
  no test), a valid null for a paired t, whose pairs then share nothing; the base against the 3x on the same seeds,
  the sweep's real case; and the fixed effects;
- both configuration-level designs again on --draws comparisons of two groups drawn at random from the base
  config's 6C runs (resampled: the draws share runs, so they give a finer rate but no exact interval; the disjoint
  comparisons' interval is the one to quote), with and without the fixed effects;
- a no-effect sweep's winner (``compare.winner.challengers``): 6 configurations of 3 shared seeds drawn from the
  base config's runs, the best against every other, Holm-adjusted; "different" when any is called beyond noise of
  the best (the family-wise false rate), on --draws / 4 draws.

Each rate has its 95% interval (Clopper-Pearson). The per-block evaluations are kept under --cache (a home a corpus:
``runs/BASE-007.jsonl`` and ``runs/BASE-007-blocks.jsonl`` for the base under seed 7, ``LR3X-...`` for the 3x, and
the configs in ``experiments/``), so that a second call trains only what is missing and ``--no-train`` re-runs the
analyses alone. Its cost is the training: 9C runs a corpus (144 at the default C = 16), 8-10 s a run on a 2-vCPU
box at a load of 2-4 (20 s at first, while the corpus is prepared), so about 50 minutes from an empty cache for the
two corpora; the analyses take 1-3 minutes.

python benchmarks/calibration.py [--comparisons 16] [--steps 30] [--corpora docs,stdlib] [--draws 2000] [--cache DIR]
                                 [--no-train] [--json]

Prints the tables, the time each part took, the machine and its load; the measured tables are in docs/performance.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from octlm.cli.app import app
from octlm.config.presets import preset
from octlm.config.schema import NEW_DEFAULTS
from octlm.core.home import Home
from octlm.store.runs.evalblocks import BlockEvaluation
from octlm.views import paired as pairing
from octlm.views import side_by_side
from octlm.views.compare import noise, seeds, student, versus, winner
from octlm.views.compare.noise import Error, Size, Verdict
from octlm.views.details import run_records

CORPORA = {  # name: (what it stands for, its data keys)
    "docs": ("few documents", {"sources": ["builtin:docs"]}),
    "stdlib": ("many documents", {"sources": ["builtin:stdlib"], "max_bytes": 4 << 20}),
}
ARMS = {"BASE": 1.0, "LR3X": 3.0}  # an experiment ID's prefix: its learning rate, in day1's
GROUP = 3  # seeds a configuration
EFFECTS = (0.01, 0.03)  # nats added to one group of the null comparisons: the default --min-effect, and 3x it
CUTS = 25  # random halvings of one pair's clusters (split halves)
LEVEL = 0.95


@dataclass(frozen=True)
class Run:
    """One cached run: its ID, seed, run file's records and final evaluation block by block (None: not kept, or not
    one a verdict may rest on), and its final eval loss."""

    id: str
    seed: int
    records: Sequence[Any]
    blocks: BlockEvaluation | None
    loss: float


def base_config(corpus: str, steps: int, eval_tokens: int) -> dict:
    """day1 shortened to ``steps`` steps, an evaluation at the end on ``eval_tokens`` tokens chosen as ``octlm new``
    chooses them (spread across the split), on ``corpus``'s data."""
    config = preset("day1")
    for dotted, value in NEW_DEFAULTS.items():
        section, key = dotted.split(".")
        config.setdefault(section, {})[key] = value
    config["data"].update(CORPORA[corpus][1])
    config["training"].update(
        {"steps": steps, "warmup_steps": max(1, steps // 10), "eval_interval": steps, "eval_tokens": eval_tokens}
    )
    config["training"]["threads"] = 1  # the module says why
    config["checkpoint"] = {**config.get("checkpoint", {}), "interval": steps, "keep": 1}
    return config


def arm_config(base: dict, arm: str, seed: int) -> dict:
    config = json.loads(json.dumps(base))
    rate = base["training"]["learning_rate"] * ARMS[arm]
    config["training"].update({"seed": seed, "learning_rate": rate, "min_learning_rate": rate / 10})
    return config


def plan(comparisons: int) -> dict[str, list[int]]:
    """The seeds of each arm: the base under 1 to 6C; the 3x under the first three of each six."""
    return {
        "BASE": list(range(1, 6 * comparisons + 1)),
        "LR3X": [6 * i + j for i in range(comparisons) for j in (1, 2, 3)],
    }


def cache_home(cache: Path, corpus: str, base: dict) -> Path:
    """The corpus's cached home, named by a digest of its base config (another config, another folder)."""
    digest = hashlib.sha256(json.dumps(base, sort_keys=True).encode()).hexdigest()[:12]
    return cache / f"{corpus}-{digest}"


def run_id(arm: str, seed: int) -> str:
    return f"{arm}-{seed:03d}"


def cached(home: Path, experiment_id: str, steps: int) -> bool:
    """Whether the run's files are in the cache with its final evaluation (they are copied there only whole)."""
    records = run_records(Home(home), experiment_id) if (home / "runs" / f"{experiment_id}.jsonl").exists() else []
    blocks = home / "runs" / f"{experiment_id}-blocks.jsonl"
    return blocks.exists() and any(r.get("step") == steps and r.get("eval_loss") is not None for r in records)


def train_missing(home: Path, base: dict, wanted: dict[str, list[int]], steps: int) -> list[float]:
    """Trains every wanted run the cache lacks, in a scratch home whose token cache is the cached home's (the data
    is prepared once a corpus), and copies each run's two files into the cache when it has finished; the seconds
    each run took."""
    missing = [
        (arm, seed) for arm, seeds_ in wanted.items() for seed in seeds_ if not cached(home, run_id(arm, seed), steps)
    ]
    for folder in ("runs", "experiments", "cache"):
        (home / folder).mkdir(parents=True, exist_ok=True)
    took: list[float] = []
    if not missing:
        return took
    os.environ["OCTLM_CACHE_DIR"] = str(home / "cache")
    with tempfile.TemporaryDirectory(prefix="octlm-calibration-") as scratch:
        (Path(scratch) / "experiments").mkdir()
        for index, (arm, seed) in enumerate(missing):
            started, experiment_id = time.perf_counter(), run_id(arm, seed)
            config = {"id": experiment_id, **arm_config(base, arm, seed)}
            (Path(scratch) / "experiments" / f"{experiment_id}.yaml").write_text(yaml.safe_dump(config))
            result = CliRunner().invoke(app, ["--home", scratch, "train", experiment_id, "-q"], catch_exceptions=False)
            if result.exit_code != 0:
                raise SystemExit(f"{experiment_id}: {result.stderr}")
            _keep(Path(scratch), home, experiment_id, config)
            took.append(time.perf_counter() - started)
            print(f"{home.name}: {experiment_id} {took[-1]:.1f} s ({index + 1}/{len(missing)})", file=sys.stderr)
    os.environ.pop("OCTLM_CACHE_DIR")
    return took


def _keep(scratch: Path, home: Path, experiment_id: str, config: dict) -> None:
    """The run's files into the cache (each whole: a copy renamed into place), its checkpoints dropped."""
    for name in (f"{experiment_id}-blocks.jsonl", f"{experiment_id}.jsonl"):  # the run file last: it marks it done
        partial = home / "runs" / f".{name}.partial"
        shutil.copyfile(scratch / "runs" / name, partial)
        os.replace(partial, home / "runs" / name)
    (home / "experiments" / f"{experiment_id}.yaml").write_text(yaml.safe_dump(config))
    shutil.rmtree(scratch / "checkpoints" / experiment_id, ignore_errors=True)


def load(home: Path, arm: str, seed: int) -> Run:
    """A cached run as ``show`` reads it: its records, and its final evaluation block by block only where it
    agrees with the run file (``side_by_side.final_blocks``)."""
    experiment_id = run_id(arm, seed)
    records = run_records(Home(home), experiment_id)
    kept = side_by_side.final_blocks(Home(home), experiment_id, records)
    loss = side_by_side.final_values(records).get("eval_loss")
    if loss is None:
        raise SystemExit(f"{home}/runs/{experiment_id}.jsonl has no final eval loss: train it again")
    return Run(experiment_id, seed, records, kept if isinstance(kept, BlockEvaluation) else None, float(loss))


# The designs, each judged by octlm's own verdict code.


def run_level(first: Run, other: Run) -> Verdict:
    """``show first other``'s run-level verdict (no replicates: the configuration-level one is not made)."""
    kept: dict[str, BlockEvaluation | pairing.Unused | None] = {first.id: first.blocks, other.id: other.blocks}
    paired, unpaired = side_by_side.pairing(kept, first.id, other.id)
    sides = (versus.Side(first.id, first.records), versus.Side(other.id, other.records))
    found = versus.settle([versus.measure(*sides, paired, unpaired, noise.MIN_EFFECT)])[0]["run"]
    assert found is not None and found["test"] == "paired", f"{first.id} and {other.id} were not paired"
    return found


def configuration(
    firsts: Sequence[Run], others: Sequence[Run], *, as_seeds: bool = False, effect: float = 0.0
) -> Verdict:
    """The configuration-level verdict on ``others - firsts`` (``compare.seeds.configuration``: paired by seed
    where the groups share their seeds, else Welch). ``as_seeds``: the others' seeds named as the firsts', in
    order (paired by seed); ``effect``: nats added to every other's loss and to each of its blocks (per token)."""
    left = [seeds.Member(r.id, r.seed, r.loss, None, r.blocks) for r in firsts]
    right = [
        seeds.Member(r.id, firsts[i].seed if as_seeds else r.seed, r.loss + effect, None, _shifted(r.blocks, effect))
        for i, r in enumerate(others)
    ]
    sds = [statistics.stdev(r.loss for r in group) for group in (firsts, others)]
    size = Size(statistics.fmean(r.loss for r in firsts), math.sqrt(statistics.fmean(s * s for s in sds)))
    compared = seeds.configuration(left, right, size)
    assert compared is not None and compared.verdict["clusters"], "no configuration-level verdict, or an unpaired one"
    return compared.verdict


def _shifted(blocks: BlockEvaluation | None, effect: float) -> BlockEvaluation | None:
    if blocks is None or not effect:
        return blocks
    return dataclasses.replace(blocks, nats=[n + effect * t for n, t in zip(blocks.nats, blocks.targets, strict=True)])


def resampled(
    pool: Sequence[Run], draws: int, draw: random.Random, *, as_seeds: bool = False, effect: float = 0.0
) -> list[Verdict]:
    """``draws`` configuration-level verdicts, each on two disjoint groups of ``GROUP`` runs drawn at random from
    ``pool`` (runs of one config): many more comparisons than the pool's disjoint ones, from the same cached
    evaluations. The draws share runs, so they are not independent: their rate estimates the same false "different"
    rate more finely, but the Clopper-Pearson interval of the disjoint comparisons is the one to quote."""
    made = []
    for _ in range(draws):
        chosen = draw.sample(list(pool), 2 * GROUP)
        made.append(configuration(chosen[:GROUP], chosen[GROUP:], as_seeds=as_seeds, effect=effect))
    return made


def sweep_winner(pool: Sequence[Run], draws: int, draw: random.Random, configurations: int = 6) -> list[Verdict]:
    """A no-effect sweep's winner, ``draws`` times: ``configurations`` groups of ``GROUP`` runs of one config drawn
    from ``pool``, each group's seeds named as the first's (a sweep's shared seeds), ranked by their mean, and every
    other configuration against the best as ``show SWEEP`` judges it (``compare.winner.challengers``: paired by
    seed, Holm-adjusted over the comparisons). Each draw gives one verdict, the challenger judged most surely
    different (the smallest adjusted p): "different" when the sweep would call its best beyond noise of any other
    configuration, the family-wise false rate."""
    made = []
    for _ in range(draws):
        chosen = draw.sample(list(pool), configurations * GROUP)
        groups = [chosen[GROUP * i : GROUP * i + GROUP] for i in range(configurations)]
        members = [
            [seeds.Member(r.id, groups[0][j].seed, r.loss, None, r.blocks) for j, r in enumerate(g)] for g in groups
        ]
        members.sort(key=lambda m: statistics.fmean(x.loss for x in m))
        entries = [winner.Entry(rank + 1, {"group": rank}, m) for rank, m in enumerate(members)]
        size = Size(statistics.fmean(x.loss for x in members[0]), None)
        found = [c["verdict"] for c in winner.challengers(entries, "eval_loss", size, None) if c["verdict"]]
        made.append(min(found, key=lambda v: v["p_adjusted"] if v["p_adjusted"] is not None else 1.0))
    return made


def split_halves(first: Run, other: Run, draw: random.Random) -> float:
    """The share of ``CUTS`` random halvings of the pair's clusters whose two halves' paired differences are called
    different by their two clustered errors: the error's own check (both halves estimate one difference)."""
    a, b = first.blocks, other.blocks
    assert a is not None and b is not None
    clusters = sorted(set(a.units))
    said = 0
    for _ in range(CUTS):
        chosen = set(draw.sample(clusters, len(clusters) // 2))
        halves = [pairing.pair(_part(a, keep), _part(b, keep)) for keep in (chosen, set(clusters) - chosen)]
        found = [h for h in halves if h is not None]
        assert len(found) == 2
        (d1, se1, df1), (d2, se2, df2) = ((h["eval_loss_difference"], h["eval_loss_se"] or 0.0, h["df"]) for h in found)
        error = Error(evaluation=math.hypot(se1, se2), evaluation_df=student.satterthwaite([(se1, df1), (se2, df2)]))
        said += noise.measured("run", "paired", d2 - d1, error, Size())["within_noise"] is False
    return said / CUTS


def _part(blocks: BlockEvaluation, keep: set[int]) -> BlockEvaluation:
    rows = [i for i, c in enumerate(blocks.units) if c in keep]
    return dataclasses.replace(
        blocks,
        nats=[blocks.nats[i] for i in rows],
        targets=[blocks.targets[i] for i in rows],
        target_bytes=[blocks.target_bytes[i] for i in rows],
        clusters=[blocks.units[i] for i in rows],
    )


# Rates and their intervals.


def clopper_pearson(k: int, n: int, level: float = LEVEL) -> tuple[float, float]:
    """The exact (Clopper-Pearson) interval of a binomial rate: the rates at which ``k`` or more (the low end), or
    ``k`` or fewer (the high end), of ``n`` has a chance of ``(1 - level) / 2``, by bisection."""

    def at_most(j: int, p: float) -> float:
        return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(j + 1))

    def solve(f: Callable[[float], float], target: float) -> float:
        low, high = 0.0, 1.0  # f falls as p grows
        for _ in range(60):
            middle = (low + high) / 2
            low, high = (middle, high) if f(middle) > target else (low, middle)
        return (low + high) / 2

    tail = (1 - level) / 2
    low = 0.0 if k == 0 else solve(lambda p: at_most(k - 1, p), 1 - tail)
    high = 1.0 if k == n else solve(lambda p: at_most(k, p), tail)
    return low, high


def row(design: str, question: str, verdicts: Sequence[Verdict], *, exact: bool = True) -> dict:
    """How many of ``verdicts`` said "different", the rate and its interval (``exact`` false: draws that share runs,
    no interval), and the medians of what they rest on."""
    said = sum(v["within_noise"] is False for v in verdicts)
    low, high = clopper_pearson(said, len(verdicts)) if exact else (None, None)

    def median(key: str) -> float | None:
        values = [v[key] for v in verdicts if v[key] is not None]  # type: ignore[literal-required]
        return statistics.median(values) if values else None

    return {
        "design": design,
        "question": question,
        "n": len(verdicts),
        "different": said,
        "rate": said / len(verdicts),
        "low": low,
        "high": high,
        "median_abs_difference": statistics.median(abs(v["difference"] or 0.0) for v in verdicts),
        "median_se": median("se"),
        "median_seed_se": median("seed_se"),
        "median_evaluation_se": median("evaluation_se"),
        "median_df": median("df"),
    }


def halves_row(rates: Sequence[float], question: str) -> dict:
    """The split halves' rate over pairs, its interval Student's t over the pairs (the cuts of one pair share it)."""
    mean = statistics.fmean(rates)
    half = student.t_critical(len(rates) - 1) * statistics.stdev(rates) / math.sqrt(len(rates))
    return {
        "design": "run level, split halves (the clustered error's own check)",
        "question": question,
        "n": len(rates) * CUTS,
        "different": round(mean * len(rates) * CUTS),
        "rate": mean,
        "low": max(0.0, mean - half),
        "high": min(1.0, mean + half),
        "pairs": len(rates),
    }


# One corpus.


def analyse(home: Path, wanted: dict[str, list[int]], draws: int) -> dict:
    """Every design's rows on one corpus's cached runs: the disjoint comparisons with their exact intervals, then
    ``draws`` resampled ones of the base config's runs (``resampled``)."""
    base = [load(home, "BASE", s) for s in wanted["BASE"]]
    fast = [load(home, "LR3X", s) for s in wanted["LR3X"]]
    by_seed = {r.seed: r for r in base}
    count = len(fast) // GROUP
    groups_a = [base[6 * i : 6 * i + 3] for i in range(count)]  # seeds 6i+1..6i+3, as the 3x's
    groups_b = [base[6 * i + 3 : 6 * i + 6] for i in range(count)]
    fast_groups = [fast[GROUP * i : GROUP * i + GROUP] for i in range(count)]
    null_groups = list(zip(groups_a, groups_b, strict=True)) + list(
        zip(fast_groups[0::2], fast_groups[1::2], strict=False)
    )
    null_pairs = list(zip(base[0::2], base[1::2], strict=False)) + list(zip(fast[0::2], fast[1::2], strict=False))
    power_pairs = [(by_seed[r.seed], r) for r in fast]
    rows = [
        row("run level, clustered paired", "same config, other seed", [run_level(a, b) for a, b in null_pairs]),
        row("run level, clustered paired", "learning rate 3x (same seed)", [run_level(a, b) for a, b in power_pairs]),
    ]
    first = base[0].blocks
    assert first is not None
    if len(set(first.units)) >= 8:
        draw = random.Random(46)
        rows.append(halves_row([split_halves(a, b, draw) for a, b in null_pairs], "same config, other seed"))
        rows.append(halves_row([split_halves(a, b, draw) for a, b in power_pairs], "learning rate 3x (same seed)"))
    for design, as_seeds in (("configuration level, Welch", False), ("configuration level, paired by seed", True)):
        rows.append(row(design, "same config", [configuration(a, b, as_seeds=as_seeds) for a, b in null_groups]))
        against = groups_a if as_seeds else groups_b  # the same seeds as the 3x's, or three others
        rows.append(
            row(design, "learning rate 3x", [configuration(a, f) for a, f in zip(against, fast_groups, strict=True)])
        )
        for effect in EFFECTS:
            made = [configuration(a, b, as_seeds=as_seeds, effect=effect) for a, b in null_groups]
            rows.append(row(design, f"+{effect} nats (fixed)", made))
        for effect in (0.0, *EFFECTS) if draws else ():
            made = resampled(base, draws, random.Random(f"{design} {effect}"), as_seeds=as_seeds, effect=effect)
            question = f"{draws} draws, " + (f"+{effect} nats" if effect else "same config")
            rows.append(row(design, question, made, exact=False))
    if draws:
        found = sweep_winner(base, draws // 4, random.Random("sweep winner"))
        rows.append(
            row("sweep winner, 6 configurations x 3 seeds", f"{draws // 4} draws, same config", found, exact=False)
        )
    losses = [r.loss for r in base]
    return {
        "blocks": first.blocks,
        "clusters": len(set(first.units)),
        "cluster_unit": first.cluster_unit,
        "runs": len(base) + len(fast),
        "base_loss": statistics.fmean(losses),
        "seed_sd": statistics.stdev(losses),
        "fast_loss": statistics.fmean(r.loss for r in fast),
        "rows": rows,
    }


def pooled(results: dict[str, dict]) -> list[dict]:
    """The null rows of every corpus pooled, design by design (the done-when figure: at most 5%)."""
    found: dict[tuple[str, str], list[int]] = {}
    for result in results.values():
        for r in result["rows"]:
            if r["question"].startswith("same config") and "halves" not in r["design"]:
                found.setdefault((r["design"], r["question"]), [0, 0])
                found[(r["design"], r["question"])][0] += r["different"]
                found[(r["design"], r["question"])][1] += r["n"]
    rows = []
    for (design, question), (k, n) in found.items():
        low, high = clopper_pearson(k, n)
        rows.append(
            {"design": design, "question": question, "n": n, "different": k, "rate": k / n, "low": low, "high": high}
        )
    return rows


def machine() -> str:
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        model = next(line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Model name"))
    except (OSError, subprocess.CalledProcessError, StopIteration):
        model = platform.processor() or platform.machine()
    return f"{os.cpu_count()} vCPUs of an {model}"


def table(report: dict) -> str:
    lines = [
        f"calibration: {report['steps']} steps, eval_tokens {report['eval_tokens']}, {report['comparisons']} "
        f"comparisons a corpus, {report['draws']} resampled draws; {report['date']}, {report['machine']}, "
        f"torch {report['torch']}, "
        f"load {report['load'][0]} -> {report['load'][1]}; "
        f"training {report['train_seconds']} s ({report['trained']} runs), analyses {report['analysis_seconds']} s",
    ]
    head = f"  {'design':<58} {'question':<30} {'n':>4} {'diff.':>5} {'rate':>6}  95% interval"
    for corpus, result in report["corpora"].items():
        lines += [
            "",
            f"{corpus} ({CORPORA[corpus][0]}): {result['runs']} runs; evaluation {result['blocks']} blocks, "
            f"{result['clusters']} {result['cluster_unit']}; base eval loss {result['base_loss']:.4f} "
            f"(seed sd {result['seed_sd']:.4f}), 3x {result['fast_loss']:.4f}",
            head,
        ]
        lines += [_line(r) for r in result["rows"]]
    lines += ["", "pooled over the corpora, same config:", head]
    lines += [_line(r) for r in report["pooled"]]
    return "\n".join(lines)


def _line(r: dict) -> str:
    interval = f"{r['low']:.1%}-{r['high']:.1%}" if r["low"] is not None else f"{'(draws share runs)':<12}"
    medians = ""
    if r.get("median_se") is not None:
        seed = f", seeds' {r['median_seed_se']:.4f}" if r.get("median_seed_se") is not None else ""
        medians = (
            f"  median |d| {r['median_abs_difference']:.4f}, se {r['median_se']:.4f}{seed}, "
            f"eval. {r['median_evaluation_se']:.4f}, df {r['median_df']:.3g}"
        )
    return (
        f"  {r['design']:<58} {r['question']:<30} {r['n']:>4} {r['different']:>5} {r['rate']:>6.1%}  "
        f"{interval}{medians}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--comparisons", type=int, default=16, help="C: comparisons of each kind a corpus (9C runs)")
    parser.add_argument("--steps", type=int, default=30, help="training steps of each run (default 30)")
    parser.add_argument("--eval-tokens", type=int, default=8192, help="training.eval_tokens (default: new's 8192)")
    parser.add_argument("--corpora", default="docs,stdlib", help="of docs, stdlib (default both)")
    parser.add_argument(
        "--cache",
        type=Path,
        default=Path(os.environ.get("XDG_CACHE_HOME", "~/.cache")).expanduser() / "octlm-calibration",
    )
    parser.add_argument(
        "--draws", type=int, default=2000, help="resampled comparisons of the base config's runs a design (0: none)"
    )
    parser.add_argument("--no-train", action="store_true", help="analyse the cached runs only")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("OCTLM_NO_LOAD_CHECK", "1")
    load_start, wanted = os.getloadavg()[0], plan(args.comparisons)
    trained, started = [], time.perf_counter()
    homes = {}
    for corpus in args.corpora.split(","):
        base = base_config(corpus, args.steps, args.eval_tokens)
        homes[corpus] = cache_home(args.cache, corpus, base)
        if not args.no_train:
            trained += train_missing(homes[corpus], base, wanted, args.steps)
    train_seconds, started = time.perf_counter() - started, time.perf_counter()
    results = {corpus: analyse(home, wanted, args.draws) for corpus, home in homes.items()}
    report = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine(),
        "torch": version("torch"),
        "draws": args.draws,
        "load": [round(load_start, 2), round(os.getloadavg()[0], 2)],
        "steps": args.steps,
        "eval_tokens": args.eval_tokens,
        "comparisons": args.comparisons,
        "trained": len(trained),
        "train_seconds": round(train_seconds, 1),
        "median_run_seconds": round(statistics.median(trained), 1) if trained else None,
        "analysis_seconds": round(time.perf_counter() - started, 1),
        "cache": str(args.cache),
        "corpora": results,
        "pooled": pooled(results),
    }
    print(json.dumps(report, indent=1) if args.json else table(report))


if __name__ == "__main__":
    main()
