"""Config dicts as trees: flattening to dotted keys, canonical JSON (what fingerprints hash) and field-by-field
differences. Plain dicts in, plain values out; nothing of octlm."""

from __future__ import annotations

import json
from typing import Any

from octlm.core.records.freeform import ConfigTree


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def flatten(tree: ConfigTree, prefix: str = "") -> ConfigTree:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, dotted + "."))
        else:
            out[dotted] = value
    return out


def diff(old: ConfigTree, new: ConfigTree) -> list[str]:
    """Field-by-field differences of two resolved config dicts: ``key: old -> new``."""
    a, b = flatten(old), flatten(new)
    lines = []
    for key in sorted(set(a) | set(b)):
        if a.get(key, "<absent>") != b.get(key, "<absent>"):
            lines.append(f"{key}: {_show(a.get(key, '<absent>'))} -> {_show(b.get(key, '<absent>'))}")
    return lines


def _show(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)
