"""``octlm canary`` and ``bench --determinism local,cross-vendor,portable``: the determinism tiers' two commands.

The canary pins its tier (``determinism.pin``) before importing torch, as the training commands do; the
bench of several tiers imports no torch at all: it times each tier in processes of its own.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Annotated

import typer

from octlm.cli import render
from octlm.cli.common import JsonOption, complete_ids, handled, home_of
from octlm.config import TrainingConfig
from octlm.config.schema import DETERMINISMS
from octlm.config.tiers import TIERS
from octlm.core.errors import BadInput
from octlm.core.reporting import counted
from octlm.runtime import determinism, launch

MAX_THREADS = next(f.metadata["maximum"] for f in dataclasses.fields(TrainingConfig) if f.name == "threads")
CanaryIdArgument = Annotated[
    str | None,
    typer.Argument(
        metavar="[ID]",
        help="Experiment whose profile and threads to use (default: portable, torch's thread count).",
        show_default=False,
        autocompletion=complete_ids,
    ),
]
CanaryDeterminismOption = Annotated[
    str | None,
    typer.Option(
        "--determinism",
        metavar="D",
        help=f"{', '.join(DETERMINISMS[:-1])} or {DETERMINISMS[-1]} (default: the experiment's, else portable).",
        show_default=False,
    ),
]
ThreadsOption = Annotated[
    str | None,
    typer.Option(
        "--threads",
        metavar="N[,N...]",
        help="Threads (default: the experiment's training.threads); several (1,2,4) print the digest at each, the "
        "same at every count when the tier's bits here do not depend on the thread count.",
        show_default=False,
    ),
]


def bench_profiles(
    ctx: typer.Context,
    model: list[str],
    profiles: list[str],
    precisions: list[str],
    steps: int,
    compile: bool | None,
    rounds: int,
    spec: launch.Launch,
    as_json: bool,
) -> None:
    """``bench --determinism local,cross-vendor,portable``: each tier in processes of its own
    (``bench_plan.by_profile``)."""
    from octlm.tasks.bench import plan as bench_plan

    if spec.wanted:
        raise BadInput("--determinism with several profiles times one process each: leave out --nproc")
    if compile is None and set(profiles) - {"local"}:
        compile = False  # the pinning tiers refuse compile: every tier eager, so that the ratio is the tier's alone
    home = (ctx.obj or {}).get("home")
    argv = [*(["--home", str(home)] if home else []), "bench", *model, "--steps", str(steps)]
    argv += [
        "--precision",
        ",".join(precisions),
        *([] if compile is None else ["--compile" if compile else "--no-compile"]),
    ]
    report = bench_plan.by_profile(argv, profiles, rounds)
    if as_json:
        render.emit_json(report)
        return
    first = report["runs"][0]
    cpu, costs = report["median_cpu_ms_per_step"], report["cpu_cost"]
    rows = [
        (profile, name, rate, report["ratio"][profile][name], cpu[profile][name], costs[profile][name])
        for profile, rates in report["median_tokens_per_second"].items()
        for name, rate in rates.items()
    ]
    title = (
        f"bench {first['experiment'] or first['preset']} by profile: {first['parameters']:,} parameters, "
        f"{counted(rounds, 'process', 'processes')} per profile, alternating, "
        f"{counted(first['machine']['threads'], 'thread')}, "
        f"{first['machine']['device']}"
    )
    columns = ("determinism", "precision", "tokens/s (median)", f"vs {profiles[0]}", "CPU ms/step", "CPU cost")
    render.print_table(columns, rows, title=title)


@handled
def canary(
    ctx: typer.Context,
    experiment_id: CanaryIdArgument = None,
    determinism_: CanaryDeterminismOption = None,
    threads: ThreadsOption = None,
    as_json: JsonOption = False,
) -> None:
    """Run the canary, two tiny fixed training runs of octlm's own step, and print its digest and which machines
    the tier covers: two machines that print the same digest (same tier, threads and torch) continue each other's
    runs bit for bit."""
    from octlm.config import Config
    from octlm.store import experiments

    counts = _counts(threads)
    config = experiments.load(home_of(ctx), experiment_id) if experiment_id else Config()
    if determinism_ is not None and determinism_ not in DETERMINISMS:
        raise BadInput(f"--determinism {determinism_!r}: choose one of {', '.join(DETERMINISMS)}")
    if determinism_ is not None or not experiment_id:
        config = config.with_keys({"training.determinism": determinism_ or "portable"}, "--determinism")
    config = config.with_keys({"training.threads": counts[0]}, "--threads") if counts else config
    determinism.pin(config)
    from octlm.train import canary as canaries  # imports torch

    found = canaries.run(config)
    if len(counts) > 1:
        found["by_threads"] = {str(count): canaries.digest(count) for count in counts}
    if as_json:
        render.emit_json(found)
        return
    print(
        f"canary {found['digest']}: {found['profile']}, {counted(found['threads'], 'thread')}, "
        f"{found['capability']} kernels, "
        f"torch {found['torch']}, {render.plain(found['processor'])} (MKL: {found['mkl']}), {found['seconds']:.2f} s"
    )
    print(f"agrees with: {found['covers']}")
    if "golden" in found:
        print(_golden(found["golden"]["golden"], found["golden"]["at_1_thread"], config.training.determinism))
    if "by_threads" in found:
        print(_by_threads(found["by_threads"]))


def _golden(expected: str, here: str, tier: str) -> str:
    if expected == here:
        return f"the tier's golden digest at 1 thread is {expected}, and this machine computes it: its runs start here"
    return (
        f"the tier's golden digest at 1 thread is {expected}, this machine's {here}: a run under {tier} is refused "
        f"here; training.determinism: {TIERS[tier].fallback} covers the same machines"
    )


def _counts(text: str | None) -> list[int]:
    """``--threads 1,2,4`` as [1, 2, 4] (none given: []); one line (exit 2) naming ``--threads`` unless every count
    is a positive whole number in ASCII digits (``str.isdigit`` takes ``١``, and ``int`` reads it as 1) up to
    ``training.threads``' limit (each count is run: 100,000 threads ended in SIGSEGV)."""
    if text is None:
        return []
    parts = [part.strip() for part in text.split(",")]
    if not all(re.fullmatch(r"[0-9]{1,6}", part) and 0 < int(part) <= MAX_THREADS for part in parts):
        raise BadInput(
            f"--threads {text!r}: expected positive whole numbers up to {MAX_THREADS:,} (as training.threads), "
            "in ASCII digits, e.g. 1 or 1,2,4"
        )
    return list(dict.fromkeys(int(part) for part in parts))


def _by_threads(digests: dict[str, str]) -> str:
    counts = ", ".join(digests)
    if len(set(digests.values())) == 1:
        return f"the same digest at {counts} threads: the thread count does not change this tier's bits here"
    shown = ", ".join(f"{count}: {digest}" for count, digest in digests.items())
    return (
        f"the digest differs between thread counts ({shown}): keep training.threads fixed for an exact resume "
        "(canonical pieces make their own step thread-invariant: see the ranks guide)"
    )
