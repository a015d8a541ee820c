"""``octlm config keys``: every config key with its type, default, fingerprint membership and meaning. Torch-free."""

from __future__ import annotations

from typing import Any

from octlm import config as cfg
from octlm.cli import formats, render
from octlm.cli.common import JsonOption, handled
from octlm.config.files import KeyDoc

KEY_HEADERS = ("key", "type", "default", "fingerprinted", "help")


@handled
def keys(as_json: JsonOption = False) -> None:
    """List every config key: its type, default, whether it is in the fingerprint, and what it does."""
    from octlm.views.details import SCHEMA_VERSION

    described = keys_described()
    if as_json:
        render.emit_json({"schema_version": SCHEMA_VERSION, "keys": described})
        return
    rows = (
        (k["key"], k["type"], default_text(k["default"]), "yes" if k["fingerprinted"] else "no", k["doc"])
        for k in described
    )
    render.print_table(KEY_HEADERS, rows)


def keys_described() -> list[KeyDoc]:
    """Every config key as ``describe_keys`` describes it, but ``data.sources``, whose documentation is made from the
    data formats' table (``data.formats.sources_doc``: a layer above the config's, so it is joined here)."""
    from octlm.data.formats import sources_doc

    described = cfg.describe_keys()
    for key in described:
        if key["key"] == "data.sources":
            key["doc"] = sources_doc()
    return described


def default_text(value: Any) -> str:
    """A default as one would write it in YAML: ``[builtin:docs]``, ``false``, ``10000``, ``""``."""
    return formats.yaml_value(value)
