"""How a value is written, by its column's kind (torch-free): the one place that decides that an ID stays as stored,
a count gets thousands separators, a metric 4 significant figures, seconds 1 decimal, bytes MB, and a config value
as one writes it in YAML. The tables and pair lists of ``render`` write their cells through here.
"""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

# The kind of a column decides how its values are written, in every view: ``raw`` as stored (IDs,
# pids, steps), ``count`` with thousands separators, ``metric`` at 4 significant figures, ``seconds``
# with 1 decimal, ``mb`` (bytes shown in MB), ``megabytes`` (a figure already in MB), ``yaml`` (config
# values), ``text`` (free text: the only kind a narrow terminal may shorten, with an ellipsis).
COLUMN_KINDS: dict[str, str] = {
    "ID": "raw",
    "id": "raw",
    "#": "raw",
    "pid": "raw",
    "step": "raw",
    "steps": "raw",
    "threads": "raw",
    "run": "raw",
    "status": "raw",
    "kind": "raw",
    "verdict": "raw",
    "last_verdict": "raw",
    "precision": "raw",
    "tokens": "count",
    "tokens/s": "count",
    "tokens_per_second": "count",
    "step tokens": "count",
    "train loss": "metric",
    "eval loss": "metric",
    "ppl": "metric",
    "bpb": "metric",
    "MFU": "metric",
    "ms/step": "metric",
    "model GFLOP/s": "metric",
    "matmul peak GFLOP/s": "metric",
    "ckpt cost %": "metric",
    "duration s": "seconds",
    "save s": "seconds",
    "load s": "seconds",
    "1st step fresh s": "seconds",
    "1st step resumed s": "seconds",
    "wall_seconds": "seconds",
    "elapsed_seconds": "seconds",
    "size": "mb",
    "ckpt MB": "megabytes",
    "checkpoint_bytes": "mb",
    "description": "text",
    "detail": "text",
    "command": "text",
    "path": "text",
    "summary": "text",
    "help": "text",
    "where": "text",
    "notes": "text",
    "tags": "yaml",
    "archived": "yaml",
    "updated (UTC)": "raw",
    "started": "raw",
    "when": "raw",
}
METRIC_WORDS = ("loss", "perplexity", "bits_per_byte", "learning_rate", "gradient_norm")
TEXT_KINDS = frozenset({"text"})
_FLOW = re.compile(r"[,\[\]{}#]|^\s|\s$")  # what a plain YAML scalar in a flow list cannot hold


def kind_of(name: str) -> str:
    """The kind of a column (or of a comparison row) by its name; a dotted name is a config key."""
    if name in COLUMN_KINDS:
        return COLUMN_KINDS[name]
    if "." in name:
        return "yaml"
    last = name.rsplit(" ", 1)[-1].rsplit(":", 1)[-1].strip()
    if last in COLUMN_KINDS:
        return COLUMN_KINDS[last]
    return "metric" if any(word in name for word in METRIC_WORDS) else "auto"


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def significant(value: float, digits: int = 4) -> str:
    """``value`` at ``digits`` significant figures, never in exponent form between 1e-4 and 1e15."""
    if value == 0 or not 1e-4 <= abs(value) < 1e15:
        return f"{value:.{digits}g}"
    if abs(value) >= 10**digits:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}" if abs(value) >= 1 else f"{float(f'{value:.{digits}g}')!r}"


def yaml_value(value: Any) -> str:
    """A config value as one writes it in YAML: ``[builtin:docs]``, ``false``, ``10000``, ``null``."""
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(yaml_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{yaml_value(k)}: {yaml_value(v)}" for k, v in value.items()) + "}"
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e16 else repr(value)
    if isinstance(value, int):
        return str(value)
    text = str(value)
    try:
        same = text != "" and not _FLOW.search(text) and yaml.safe_load(text) == text
    except yaml.YAMLError:
        same = False
    return text if same else json.dumps(text, ensure_ascii=False)


def shown_value(value: Any) -> str:
    """A config value as a person reads it in a table: as ``yaml_value`` writes it, but text never quoted
    (``off``, ``-``, ``sweep:lr``), in a list too; an empty text is ``""``."""
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(shown_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{shown_value(k)}: {shown_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, str):
        return value if value else '""'
    return yaml_value(value)


def format_cell(kind: str, value: Any) -> str:
    """``value`` written the way its column's ``kind`` asks (see COLUMN_KINDS); None is ``-``."""
    if kind == "yaml" or isinstance(value, (list, tuple, dict, bool)):
        return shown_value(value)
    if value is None or value == "":
        return "-"
    if not _is_number(value):
        return str(value)
    if kind == "raw":
        return str(value)
    if kind == "count":
        return f"{value:,.0f}"
    if kind in ("seconds", "megabytes"):
        return f"{value:,.1f}"
    if kind == "mb":
        return f"{value / 1e6:,.1f} MB"
    if kind == "metric" or isinstance(value, float):
        return significant(float(value))
    return f"{value:,}" if abs(value) >= 100_000 else str(value)


def fmt(value: Any) -> str:
    """A value of no particular column (numbers at 4 significant figures)."""
    return format_cell("auto", value)
