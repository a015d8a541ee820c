"""Typed config values: coercion to a field's type and range checks, each failure one line naming the key.

Knows nothing of octlm's config sections, so the config modules can all build on it. Messages name only
the dotted key (``training.steps: expected an integer, got text ('many')``); whoever knows the file
(``config.from_dict``, ``Config.with_keys``) puts its name in front. A value quoted in a message is cut
to ``SHOWN`` characters (``shown``), so a megabyte of YAML never comes back as an error line.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any, get_args, get_origin

from octlm.core.errors import ConfigError

_FLOAT_TEXT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
SHOWN = 60  # characters of an offending value quoted in a message

# Range rules a field can name in its metadata ("bound"), with the test each value must pass.
BOUNDS: dict[str, tuple[Callable[[Any], bool], str]] = {  # name: (test of a number, the rule in words)
    "positive": (lambda value: value > 0, "must be positive"),
    "non-negative": (lambda value: value >= 0, "must not be negative"),
    "fraction": (lambda value: 0.0 <= value < 1.0, "must be at least 0 and below 1"),
}


def coerce(value: Any, kind: Any, where: str) -> Any:
    """Check ``value`` against a field type; return it normalised or raise naming ``where``.

    Lists become tuples, a single text a one-item tuple, integers of float fields floats, and
    number-like text of float fields a number (YAML 1.1 reads 3e-4 as text).
    """
    if get_origin(kind) is tuple:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, (list, tuple)) or not value:
            raise ConfigError(f"{where}: expected a non-empty list of strings, got {kind_of(value)}")
        return tuple(coerce(item, get_args(kind)[0], f"{where}[{i}]") for i, item in enumerate(value))
    if kind is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {kind_of(value)}")
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {kind_of(value)}")
        return value
    if kind is float:
        if isinstance(value, str) and _FLOAT_TEXT.fullmatch(value.strip()):
            value = float(value)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number, got {kind_of(value)}")
        if not math.isfinite(value):
            raise ConfigError(f"{where}: expected a finite number, got {shown(value)}")
        return float(value)
    if kind is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected text, got {kind_of(value)}")
        return value
    raise TypeError(kind)  # pragma: no cover - a programming error, not user input


def check_bound(value: Any, bound: str, where: str, maximum: int | None = None) -> None:
    """Raise naming ``where`` unless ``value`` keeps to the named range rule ("" for none) and,
    when given, stays at or below ``maximum`` (every size has one, so nothing overflows later)."""
    if bound:
        test, rule = BOUNDS[bound]
        if not test(value):
            raise ConfigError(f"{where}: {rule}, got {shown(value)}")
    if maximum is not None and value > maximum:
        raise ConfigError(f"{where}: must be at most {maximum:,}, got {shown(value)}")


def check_choice(value: Any, choices: tuple[str, ...], where: str) -> None:
    """Raise naming ``where`` unless ``value`` is one of ``choices`` (empty: anything goes)."""
    if choices and value not in choices:
        raise ConfigError(f"{where}: must be one of {', '.join(choices)}, got {shown(value, quote=True)}")


def shown(value: Any, quote: bool = False) -> str:
    """``value`` for a message, cut to ``SHOWN`` characters with an ellipsis (``repr`` with ``quote``)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**SHOWN:
        return f"a number of about {int(abs(value).bit_length() * 0.30103) + 1} digits"
    text = repr(value) if quote else str(value)
    return text if len(text) <= SHOWN else text[: SHOWN - 1] + "…"


def kind_of(value: Any) -> str:
    """What a value is, for messages: ``text ('many')``, ``a number (10.5)``, ``a list``."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, (int, float)):
        return f"a number ({shown(value)})"
    if isinstance(value, str):
        return f"text ({shown(value, quote=True)})"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def type_name(kind: Any) -> str:
    """A field type as the docs name it: ``int``, ``float``, ``bool``, ``str``, ``list of str``."""
    if get_origin(kind) is tuple:
        return f"list of {type_name(get_args(kind)[0])}"
    return str(kind.__name__)
