"""``octlm sweep new``'s options, parsed and checked before anything is built or written (torch-free): the sweep's
name, ``--grid`` values (typed as the config holds them, each once, only keys that change what a trial trains),
``--range`` bounds, halving's rungs, the metric a sweep minimises and the options every sampler takes (what each
sampler reads and how many trials it makes are the samplers' table's: ``samplers``). One line each, naming the
option.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from octlm import config as cfg
from octlm.config import flatten
from octlm.config.schema import split_key
from octlm.core.errors import BadInput, OctlmError
from octlm.core.home import DEFAULT_PREFIX
from octlm.store import experiments
from octlm.store.sweeps.records import Range
from octlm.store.sweeps.specs import MAX_SEEDS, OBJECTIVES
from octlm.store.sweeps.specs import validate_name as validate_name  # the check is the store's: every reader's

SEED = "training.seed"


@dataclass(frozen=True)
class SweepRequest:
    """The options of ``octlm sweep new``."""

    name: str
    base: str
    grid: Sequence[str] = ()  # KEY=V1,V2,...
    ranges: Sequence[str] = ()  # KEY=LOW:HIGH[:log]
    random: int = 0
    seeds: int = 1
    sampler: str | None = None
    trials: int | None = None  # Optuna's budget of configurations
    parallel: int = 2  # Optuna: configurations asked for ahead
    metric: str = "eval_loss"
    halving: str | None = None  # RUNG,RUNG,...
    keep: float = 0.5
    seed: int = 0  # of the random draws and of Optuna's sampler
    overrides: Sequence[str] = ()  # --set, for every trial
    prefix: str = DEFAULT_PREFIX


def parse_grid(items: Sequence[str], base: cfg.Config) -> dict[str, list[Any]]:
    """``--grid KEY=V1,V2`` (repeatable) as {key: [values, typed as the config holds them]}; BadInput naming the
    malformed one or the value the key cannot take."""
    grid: dict[str, list[Any]] = {}
    for item in items:
        key, sep, text = item.partition("=")
        values = [value.strip() for value in text.split(",")]
        if not sep or not key.strip() or not all(values):
            raise BadInput(f"--grid {item!r}: expected KEY=V1,V2,... e.g. training.learning_rate=1e-3,3e-3")
        _check_key(key.strip(), "--grid")
        typed = [_typed(base, key.strip(), value) for value in values]
        seen: dict[str, int] = {}
        for value in typed:
            seen[repr(value)] = seen.get(repr(value), 0) + 1
        twice = next((text for text, value in zip(values, typed, strict=True) if seen[repr(value)] > 1), None)
        if twice is not None:
            raise BadInput(f"--grid {item!r}: {twice} is given twice (as the config holds it): each value once")
        grid[key.strip()] = typed
    return grid


def _typed(base: cfg.Config, key: str, text: str) -> Any:
    """``text`` as the config holds it at ``key`` (``1e-3`` -> 0.001), checked as the config checks it: the key's
    section and the config rebuilt with it (not the whole config from YAML: a grid may hold 1,000 values), with the
    canonical pieces a trial of that value takes (``experiments.refitted_pieces``: a batch they no longer cut takes
    others, as ``new --from`` gives)."""
    origin = f"--grid {key}={text}"
    try:
        value = cfg.parse_yaml(text, origin) if text.strip() else ""
        pieces = experiments.refitted_pieces(base, key, value)
        refitted = {} if pieces is None else {"training.micro_batches": pieces}
        built = base.with_keys({key: value, **refitted}, origin)
    except OctlmError as error:
        raise BadInput(str(error)) from None
    return flatten(built.to_dict())[key]  # as a config file holds it (data.sources a list)


def parse_ranges(items: Sequence[str]) -> dict[str, Range]:
    """``--range KEY=LOW:HIGH[:log]`` as {key: {low, high, log, int}}; BadInput naming the malformed one."""
    kinds = {item["key"]: item["type"] for item in cfg.describe_keys()}
    ranges: dict[str, Range] = {}
    for item in items:
        key, _, text = item.partition("=")
        parts, key = text.split(":"), key.strip()
        _check_key(key, "--range")
        try:
            low, high = float(parts[0]), float(parts[1])
        except (ValueError, IndexError):
            example = "training.learning_rate=1e-4:1e-2:log"
            raise BadInput(f"--range {item!r}: expected KEY=LOW:HIGH[:log], e.g. {example}") from None
        log = parts[2:] == ["log"]
        if len(parts) > 2 + log or not math.isfinite(low) or not math.isfinite(high) or not low < high:
            raise BadInput(f"--range {item!r}: expected KEY=LOW:HIGH[:log] with LOW below HIGH")
        if kinds.get(key) not in ("int", "float") or (log and low <= 0):
            raise BadInput(f"--range {item!r}: a range needs a numeric key (and LOW above 0 with :log)")
        ranges[key] = {"low": low, "high": high, "log": log, "int": kinds[key] == "int"}
    return ranges


def _check_key(key: str, option: str) -> None:
    try:
        split_key(key, option)
    except OctlmError as error:
        raise BadInput(str(error)) from None
    if key == SEED:
        raise BadInput(f"{option} {key}: replicates differ in the seed; ask for them with --seeds S")
    if key in cfg.BOOKKEEPING:
        raise BadInput(
            f"{option} {key}: does not change what a trial trains (it is not in the fingerprint), so every trial "
            "would train the same bits; sweep a key that `octlm config keys` marks as fingerprinted"
        )


def parse_rungs(text: str | None, config: cfg.Config) -> list[int]:
    """``--halving 100,400,1600``: increasing steps, each an evaluation step of the trials (a multiple of
    ``training.eval_interval``), so every rung's loss is measured where it is decided."""
    if not text:
        return []
    try:
        rungs = [int(part) for part in text.split(",")]
    except ValueError:
        raise BadInput(f"--halving {text!r}: expected increasing steps, e.g. 100,400,1600") from None
    if len(rungs) < 2 or any(b <= a for a, b in zip(rungs, rungs[1:], strict=False)) or rungs[0] <= 0:
        raise BadInput(f"--halving {text!r}: expected two or more increasing steps, e.g. 100,400,1600")
    interval = config.training.eval_interval
    if off := [rung for rung in rungs[:-1] if rung % interval]:
        raise BadInput(
            f"--halving {text}: rung {off[0]} is not a multiple of training.eval_interval ({interval}), so no "
            f"evaluation falls there; choose multiples or --set training.eval_interval=N"
        )
    return rungs


def check_metric(metric: str) -> None:
    """``--metric``: one of the figures every trial records and a sweep minimises; BadInput naming them."""
    if metric not in OBJECTIVES:
        raise BadInput(f"--metric {metric!r}: a sweep minimises one of {', '.join(OBJECTIVES)}")


def check_options(request: SweepRequest, grid: dict[str, list[Any]], ranges: dict[str, Range]) -> None:
    """The options every sampler takes (what each sampler reads, needs and checks: ``samplers.check``)."""
    if not 1 <= request.seeds <= MAX_SEEDS:
        raise BadInput(f"--seeds {request.seeds}: give 1 to {MAX_SEEDS} replicates")
    if not 0 < request.keep < 1:
        raise BadInput(f"--keep {request.keep}: the fraction promoted at each rung, above 0 and below 1")
    if not grid and not ranges and request.seeds < 2:
        raise BadInput("a sweep varies something: give --grid KEY=V1,V2, --random N --range KEY=LOW:HIGH or --seeds S")
