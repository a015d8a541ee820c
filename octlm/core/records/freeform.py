"""The mappings whose keys are not the type checker's to know, each named once with its reason. Every other mapping
that crosses a module boundary is a TypedDict or a dataclass. ``tests/test_public_types.py`` counts the signatures
that use these names apart from those that still spell ``dict[str, Any]``, and allows no other alias of it.
"""

from __future__ import annotations

from typing import Any, TypeAlias

ConfigTree: TypeAlias = dict[str, Any]
"""A config or one of its sections as YAML holds it (nested mappings of scalars and lists), or flattened to dotted
keys (a sweep's configuration: {config key: value}). Free-form on purpose: its
keys are checked at run time by ``config.schema`` against the section dataclasses, naming the file and key; a
TypedDict would repeat those classes and fall out of step with them."""

StateDict: TypeAlias = dict[str, Any]
"""What torch's ``state_dict()`` gives and ``load_state_dict()`` takes (torch itself types them ``dict[str, Any]``):
tensors and nested state keyed by parameter names or by torch's own internals, saved and restored whole."""

TableRow: TypeAlias = dict[str, Any]
"""A row of ``octlm show``'s table after the user chose its columns (``--columns``, ``--where``, ``--sort``): the fixed
columns of the list's spec (``views.listing.columns``), any field of a run's newest record and any config key asked
for, by its dotted name: which keys a row has is the user's choice, so no one TypedDict types it."""

FREE_FORM = ("ConfigTree", "StateDict", "TableRow")
