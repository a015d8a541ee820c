"""``octlm config keys``: every config key with its type, default, fingerprint membership and meaning. Torch-free."""

from __future__ import annotations

from typing import Any

from octlm import config as cfg
from octlm.cli import formats, render
from octlm.cli.common import JsonOption, handled

KEY_HEADERS = ("key", "type", "default", "fingerprinted", "help")


@handled
def keys(as_json: JsonOption = False) -> None:
    """List every config key: its type, default, whether it is in the fingerprint, and what it does."""
    from octlm.views.details import SCHEMA_VERSION

    described = cfg.describe_keys()
    if as_json:
        render.emit_json({"schema_version": SCHEMA_VERSION, "keys": described})
        return
    rows = (
        (k["key"], k["type"], default_text(k["default"]), "yes" if k["fingerprinted"] else "no", k["doc"])
        for k in described
    )
    render.print_table(KEY_HEADERS, rows)


def default_text(value: Any) -> str:
    """A default as one would write it in YAML: ``[builtin:docs]``, ``false``, ``10000``, ``""``."""
    return formats.yaml_value(value)
