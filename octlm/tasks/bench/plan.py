"""What ``octlm bench`` times, decided before torch loads (torch-free): the config (an experiment's, a preset's or
EXP-008's), the precisions, ``--compile``, and ``--determinism``. A profile is fixed when torch loads, so
``--determinism local,cross-vendor,portable`` times each tier in a process of its own (``by_profile``): the processes
alternate, local, portable, portable, local, ..., so that a machine whose speed drifts moves both alike, and each
profile's figure is the median of its processes."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
from typing import Any, Literal, cast

from octlm import config as cfg
from octlm.config import Config
from octlm.config.presets import preset as preset_raw
from octlm.core.errors import BadInput, OctlmError
from octlm.core.home import Home
from octlm.runtime import determinism
from octlm.runtime.launch import octlm_command
from octlm.store import experiments
from octlm.tasks.bench.records import BenchReport, ByProfile, ProfileRun

DEFAULT_EXPERIMENT = "EXP-008"  # the shipped experiment, timed when no ID or preset is given


def resolve_config(home: Home, experiment_id: str | None, preset: str | None) -> Config:
    """The config to time: an experiment's, a preset's, or (with neither) EXP-008's when the home has it, else day1."""
    if preset and experiment_id:
        raise BadInput("give an experiment ID or --preset, not both")
    if preset:
        return cfg.from_dict(preset_raw(preset), f"preset {preset}")
    if experiment_id is None and not home.config_path(DEFAULT_EXPERIMENT).exists():
        return cfg.from_dict(preset_raw("day1"), "preset day1")
    config = experiments.load(home, experiment_id or DEFAULT_EXPERIMENT)
    if config.tokenizer.file:  # the model's vocabulary is the file's (tokenizers and numpy, not torch)
        from octlm.data.fingerprints import with_vocabulary

        return with_vocabulary(home, config)
    return config


def parse_list(text: str | None, default: str, allowed: tuple[str, ...], flag: str) -> list[str]:
    """``--precision fp32,bf16`` or ``--determinism local,portable`` (default: the config's), each checked."""
    source = default if text is None else text
    items = [item.strip() for item in source.split(",") if item.strip()]
    if not items:
        raise BadInput(f"{flag} {source!r}: give one or more of {', '.join(allowed)}, separated by commas")
    for item in items:
        if item not in allowed:
            raise BadInput(f"{flag} {item}: must be one of {', '.join(allowed)}")
    return items


def parse_precisions(text: str | None, config: Config) -> list[str]:
    return parse_list(text, config.training.precision, cfg.PRECISIONS, "--precision")


def with_choices(config: Config, compile: bool | None, determinism: str | None = None) -> Config:
    """``--compile`` / ``--no-compile`` and one ``--determinism`` over the config's (None: the config's)."""
    keys: dict[str, Any] = {} if compile is None else {"training.compile": compile}
    if determinism is not None:
        keys["training.determinism"] = determinism
        if determinism != "local" and compile is None:
            keys["training.compile"] = False  # the pinning tiers refuse compile: time it eager unless told otherwise
    return config.with_keys(keys, "--compile" if compile is not None else "--determinism") if keys else config


def variant(config: Config, pieces: int | None, threads: int | None) -> Config:
    """The config a variant of ``bench --nproc`` times: ``pieces`` canonical pieces (0: per-rank slices; None: the
    config's), ``threads`` threads (None: the config's)."""
    keys: dict[str, Any] = {}
    if pieces is not None:
        keys["training.micro_batches"] = pieces
        if pieces:
            keys["training.grad_accum_steps"] = 1
    if threads:
        keys["training.threads"] = threads
    return config.with_keys(keys, "--micro-batches") if keys else config


def by_profile(argv: list[str], profiles: list[str], rounds: int) -> ByProfile:
    """Run ``octlm argv --determinism P --json`` for each profile, alternating, ``rounds`` times each; the report
    of each process, and per profile and precision the median tokens/s and its ratio to the first profile's, and
    the median CPU time of a step and its ratio to the first profile's (``cpu_cost``: above 1 costs more)."""
    order = [p for r in range(rounds) for p in (profiles if r % 2 == 0 else profiles[::-1])]
    runs: list[ProfileRun] = [
        {"determinism": profile, **_child([*argv, "--determinism", profile, "--json"])} for profile in order
    ]
    rates, cpu = _medians(runs, profiles, "tokens_per_second"), _medians(runs, profiles, "cpu_ms_per_step")
    ratios = {p: {k: round(v / rates[profiles[0]][k], 3) for k, v in m.items()} for p, m in rates.items()}
    costs = {p: {k: round(v / cpu[profiles[0]][k], 3) for k, v in m.items()} for p, m in cpu.items()}
    return {
        "profiles": profiles,
        "rounds": rounds,
        "median_tokens_per_second": rates,
        "ratio": ratios,
        "median_cpu_ms_per_step": cpu,
        "cpu_cost": costs,
        "runs": runs,
    }


def _medians(
    runs: list[ProfileRun], profiles: list[str], key: Literal["tokens_per_second", "cpu_ms_per_step"]
) -> dict[str, dict[str, float]]:
    """Per profile and precision, the median of ``key`` over that profile's processes."""
    medians: dict[str, dict[str, float]] = {}
    for profile in profiles:
        mine = [r for r in runs if r["determinism"] == profile]
        for row in mine[0]["results"]:
            values = [x[key] for r in mine for x in r["results"] if x["precision"] == row["precision"]]
            medians.setdefault(profile, {})[row["precision"]] = statistics.median(values)
    return medians


def _child(argv: list[str]) -> BenchReport:
    """One process of ``by_profile``, without any profile's settings of this one (each pins its own)."""
    env = determinism.without_pins(os.environ)
    done = subprocess.run(octlm_command(argv), capture_output=True, text=True, stdin=subprocess.DEVNULL, env=env)
    if done.returncode:
        said = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise OctlmError(f"`octlm {' '.join(argv)}` failed with exit {done.returncode}: {said}")
    try:
        return cast(BenchReport, json.loads(done.stdout))  # a bench of our own, --json
    except ValueError:
        raise OctlmError(f"`octlm {' '.join(argv)}` printed no JSON report") from None
