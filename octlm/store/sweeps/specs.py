"""A sweep as every reader takes it (torch-free): its spec, and its rows as they come from elsewhere, checked field by
field; and the spec described in words.

What comes from elsewhere was written by octlm, but may be damaged or made by hand: a shipped sweep's ``sweep.json``
(``sweep unpack``), a sweep's record kept beside the registry (``.octlm/sweeps/<name>.json``, read by ``doctor
--repair``), the registry's row itself (``Registry.sweep``, which every command reading one sweep goes through:
``sweep status``, ``show``, ``report``, ``extend``, ``retry``, the workers). One checker for each (``check_spec``,
``check_sweep``, ``check_trial``, ``check_decision``), each refusing in one line that names the source (a file, the
registry's row) and the key, e.g. ``sweep.json: sweep: spec.metric must be one of eval_loss, ... (not 'track')``.
A key that a spec of an older octlm lacks reads as its default (``check_spec``), so every reader finds them all.
``describe``: the spec in words, from what it holds now (after ``sweep extend``: what it has grown to).
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Callable, Mapping
from typing import Any, cast

from octlm.config.schema import split_key
from octlm.core.errors import BadInput, OctlmError
from octlm.core.home import DEFAULT_PREFIX, validate_id, validate_prefix
from octlm.core.reporting import counted
from octlm.store.sweeps.records import SweepSpec

OBJECTIVES = ("eval_loss", "perplexity", "bits_per_byte", "train_loss")  # what a sweep may minimise, its default first
MAX_TRIALS = 10_000  # in one sweep
MAX_SEEDS = 1000  # replicates of a configuration
NAME = re.compile(r"[a-z][a-z0-9_.]*(-[a-z0-9_.]+)*")
NAME_HELP = "a sweep's name is lowercase letters, digits, '_', '.' and '-', starting with a letter (e.g. lr-2026)"
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
STATUSES = ("queued", "running", "done", "failed", "stopped")

Checker = Callable[[Any], bool]


def validate_name(name: str) -> str:
    """A sweep's name (``NAME``, 64 characters at most, never one that reads as an experiment ID), else BadInput."""
    if not isinstance(name, str) or len(name) > 64 or NAME.fullmatch(name) is None:
        raise BadInput(f"sweep name {name!r}: {NAME_HELP}")
    try:
        validate_id(name.upper())
    except BadInput:
        return name
    raise BadInput(f"sweep name {name!r} reads as an experiment ID: choose one that does not end in '-' and digits")


def _whole(low: int | None = None, high: int | None = None) -> Checker:
    def check(value: Any) -> bool:
        if not isinstance(value, int) or isinstance(value, bool):
            return False
        return (low is None or value >= low) and (high is None or value <= high)

    return check


def _finite_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _text(value: Any) -> bool:
    return isinstance(value, str)


def _optional(check: Checker) -> Checker:
    return lambda value: value is None or check(value)


def _list_of(check: Checker, empty: bool = True) -> Checker:
    return lambda value: isinstance(value, list) and (empty or bool(value)) and all(check(item) for item in value)


def _map_of(check: Checker, key: Checker = _text) -> Checker:
    return lambda value: isinstance(value, dict) and all(key(k) and check(v) for k, v in value.items())


def _fields(shape: dict[str, Checker], optional: tuple[str, ...] = ()) -> Checker:
    """A mapping holding ``shape``'s keys (but ``optional`` ones), each as its check says."""

    def check(value: Any) -> bool:
        if not isinstance(value, dict) or any(key not in value for key in shape if key not in optional):
            return False
        return all(check(value[key]) for key, check in shape.items() if key in value)

    return check


def _passes(validate: Callable[[Any], object]) -> Checker:
    """A validator that raises (``validate_id``, ``validate_prefix``, ``split_key``) as a check."""

    def check(value: Any) -> bool:
        try:
            validate(value)
        except (OctlmError, TypeError, AttributeError):
            return False
        return True

    return check


def _rungs(value: Any) -> bool:
    if not _list_of(_whole(1))(value):
        return False
    return not value or len(value) >= 2 and all(b > a for a, b in zip(value, value[1:], strict=False))


def _range(value: Any) -> bool:
    if not _fields({"low": _finite_number, "high": _finite_number, "log": _flag, "int": _flag})(value):
        return False
    return bool(value["low"] < value["high"] and (value["low"] > 0 or not value["log"]))


def _flag(value: Any) -> bool:
    return isinstance(value, bool)


_ID, _KEY = _passes(validate_id), _passes(lambda key: split_key(key, "spec"))
_GRID = _map_of(_list_of(lambda _: True, empty=False), key=_KEY)
_RETRIED = _fields(
    {
        "event": lambda value: value == "retried",
        "at": _text,
        "trials": _map_of(_fields({"was": _text, "reason": _text, "target_step": _whole(0)}), key=_ID),
        "asked": _list_of(_text),
    },
    optional=("asked",),
)
_ASKED = _fields({"seeds": _optional(_whole(1)), "grid": _map_of(_list_of(lambda _: True)), "random": _whole(0)})
_EXTENDED = _fields(
    {
        "event": lambda value: value == "extended",
        "at": _text,
        "added": _whole(0),
        "seeds": _whole(1),
        "grid": _GRID,
        "asked": _ASKED,
    },
    optional=("asked",),
)
_MISSING = object()  # a key with no default: absent, it stays absent
# Each key of a spec: its check, what it must be (in words), its default for a spec that lacks it.
SPEC: dict[str, tuple[Checker, str, Any]] = {
    "grid": (_GRID, "a mapping of config keys (SECTION.KEY) to lists of values, none empty", {}),
    "ranges": (_map_of(_range, key=_KEY), "a mapping of config keys to {low, high, log, int}, low below high", {}),
    "random": (_whole(0, MAX_TRIALS), f"a whole number from 0 to {MAX_TRIALS:,}", 0),
    "seeds": (_whole(1, MAX_SEEDS), f"a whole number from 1 to {MAX_SEEDS}", 1),
    "sampler": (
        lambda value: _text(value) and bool(NAME.fullmatch(value)),
        "a sampler's name (grid, tpe, ...)",
        "grid",
    ),
    "trials": (_optional(_whole(1, MAX_TRIALS)), f"null or a whole number from 1 to {MAX_TRIALS:,}", None),
    "parallel": (_whole(1, MAX_TRIALS), f"a whole number from 1 to {MAX_TRIALS:,}", 2),
    "metric": (lambda value: _text(value) and value in OBJECTIVES, "one of " + ", ".join(OBJECTIVES), "eval_loss"),
    "seed": (_whole(), "a whole number", 0),
    "halving": (_rungs, "[] or two or more increasing steps above 0", []),
    "keep": (lambda value: _finite_number(value) and 0 < value < 1, "a number above 0 and below 1", 0.5),
    "overrides": (_list_of(lambda value: _text(value) and "=" in value), "a list of KEY=VALUE texts", []),
    "prefix": (_passes(validate_prefix), "an ID prefix such as EXP-", DEFAULT_PREFIX),
    "base_config": (lambda value: isinstance(value, dict), "a mapping (a config)", _MISSING),
    "history": (_list_of(lambda e: _RETRIED(e) or _EXTENDED(e)), "a list of extend and retry events", _MISSING),
    "shipped": (_fields({"to": _text, "at": _text, "trials": _list_of(_ID)}), "{to, at, trials}", _MISSING),
}


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_spec(spec: Any, source: str) -> SweepSpec:
    """``spec`` checked key by key (BadInput: ``SOURCE: spec.KEY must be ... (not ...)``), with the keys it lacks
    (a spec of an older octlm) at their defaults. ``source`` names where it comes from: ``PATH: sweep``."""
    if not isinstance(spec, dict):
        raise BadInput(f"{source}: spec must be a mapping (not {_shown(spec)})")
    for key, (check, wanted, _) in SPEC.items():
        if key in spec and not check(spec[key]):
            raise BadInput(f"{source}: spec.{key} must be {wanted} (not {_shown(spec[key])})")
    defaults = {key: copy.deepcopy(default) for key, (_, _, default) in SPEC.items() if default is not _MISSING}
    return cast(SweepSpec, {**defaults, **spec})


SWEEP_ROW: dict[str, tuple[Checker, str]] = {
    "name": (_passes(validate_name), NAME_HELP.replace("a sweep's name is ", "")),
    "uuid": (lambda value: _text(value) and bool(UUID.fullmatch(value)), "a UUID"),
    "base": (_optional(_ID), "an experiment ID or null"),
    "description": (_optional(_text), "a text or null"),
    "created": (_optional(_text), "a text or null"),
    "spec": (lambda _: True, "a mapping"),  # there: what it holds is check_spec's
}
TRIAL_ROW: dict[str, tuple[Checker, str]] = {
    "experiment_id": (_ID, "an experiment ID"),
    **dict.fromkeys(("position", "replicate", "rung", "target_step"), (_whole(0), "a whole number, not negative")),
    "seed": (_whole(), "a whole number"),
    "params": (lambda value: isinstance(value, dict), "a mapping"),
    "group_key": (_text, "a text"),
    "status": (lambda value: value in STATUSES, "one of " + ", ".join(STATUSES)),
    "value": (_optional(_finite_number), "a finite number or null"),
    "error": (_optional(_text), "a text or null"),
}
_GROUP = _fields(
    {"group": _text, "trials": _list_of(_ID), "value": _optional(_finite_number), "promoted": _flag, "late": _flag},
    optional=("promoted", "late"),
)
DECISION_ROW: dict[str, tuple[Checker, str]] = {
    "rung": (_whole(0), "a whole number, not negative"),
    "step": (_whole(1), "a whole number above 0"),
    "ranking": (_list_of(_GROUP), "a list of configurations ({group, trials, value, promoted})"),
    "promoted": (_list_of(_ID), "a list of experiment IDs"),
    "created": (_optional(_text), "a text or null"),
}


def _check_row(row: Any, shape: dict[str, tuple[Checker, str]], where: str) -> Mapping[str, Any]:
    if not isinstance(row, dict):
        raise BadInput(f"{where} must be a mapping (not {_shown(row)})")
    for key, (check, wanted) in shape.items():
        if key not in row:
            raise BadInput(f"{where}: {key} is missing")
        if not check(row[key]):
            raise BadInput(f"{where}: {key} must be {wanted} (not {_shown(row[key])})")
    return cast(Mapping[str, Any], row)


def check_sweep(sweep: Any, source: str) -> SweepSpec:
    """A sweep's row as ``sweep new`` makes one (``SWEEP_FIELDS``: its name, UUID, base, texts and spec), else
    BadInput ``SOURCE: sweep: KEY ...``; its spec as ``check_spec`` gives it."""
    row = _check_row(sweep, SWEEP_ROW, f"{source}: sweep")
    return check_spec(row["spec"], f"{source}: sweep")


def check_trial(trial: Any, source: str, index: int) -> None:
    """A trial's row as octlm writes one (``TRIAL_FIELDS``), else BadInput ``SOURCE: trial N: KEY ...``."""
    _check_row(trial, TRIAL_ROW, f"{source}: trial {index + 1}")


def check_decision(decision: Any, source: str, index: int) -> None:
    """A decision of halving as octlm keeps one (``DECISION_FIELDS``), else BadInput ``SOURCE: decision N: ...``."""
    _check_row(decision, DECISION_ROW, f"{source}: decision {index + 1}")


def describe(spec: SweepSpec) -> str:
    """``2 configurations x 3 seeds, grid``: the configurations the spec makes (a sampler that asks as trials
    finish: its budget, ``trials``), its seeds per configuration and its sampler."""
    seeds = int(spec.get("seeds") or 1)
    budget = spec.get("trials")
    grid = spec.get("grid") or {}
    count = budget or math.prod(len(values) for values in grid.values()) * max(int(spec.get("random") or 0), 1)
    words = f"{counted(count, 'configuration')} x {counted(seeds, 'seed')}"
    return f"{words}, {spec.get('sampler') or 'grid'}"
