"""Experiment configs: frozen, typed dataclasses, loaded from YAML and valid by construction.

Every error names the file and the dotted key (``EXP-008.yaml: training.warmup_steps: ...``).
The fingerprint covers only the fields that determine the training trajectory; see
``BOOKKEEPING`` for the fields left out, so changing how often a run evaluates or
checkpoints never blocks a resume.

The dataclasses and the fingerprint live in ``config_schema`` (each section validates itself
when built or replaced), value coercion in ``validation``; this module adds YAML files, presets,
``--set`` overrides and ``describe_keys``, and is where the rest of octlm imports all of them from.
Torch-free: ``octlm new``, ``octlm show`` and ``octlm config keys`` must start fast.
"""

from __future__ import annotations

import copy
from dataclasses import Field, fields
from pathlib import Path
from typing import Any, TypedDict

import yaml

from octlm.config import presets
from octlm.config.schema import (
    BOOKKEEPING,
    SECTIONS,
    TOP_LEVEL,
    Config,
    InitConfig,
    field_kinds,
    split_key,
)
from octlm.config.validation import kind_of, shown, type_name
from octlm.core.errors import ConfigError
from octlm.core.records.freeform import ConfigTree

# libyaml's emitter where PyYAML was built with it (the wheels are), else the pure-Python one: the same YAML text
# (tests/config/test_config.py compares them), about 20x faster for a sweep writing 1,000 trial files.
DUMPER: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def from_dict(raw: Any, origin: str = "<config>") -> Config:
    """Build and validate a Config from a parsed YAML mapping; ``origin`` names the file."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{origin}: expected a mapping of sections at the top, got {kind_of(raw)}")
    for key in raw:
        if key not in SECTIONS and key not in TOP_LEVEL:
            known = ", ".join((*TOP_LEVEL, *SECTIONS))
            raise ConfigError(f"{origin}: {shown(key)}: unknown key; known keys: {known}")
    top = {key: raw[key] for key in TOP_LEVEL if raw.get(key) is not None}
    raw = file_vocabulary(raw)
    try:
        sections: dict[str, Any] = {n: cls(**_section_values(cls, raw.get(n), n)) for n, cls in SECTIONS.items()}
        return Config(**top, **sections)
    except ConfigError as error:
        raise ConfigError(f"{origin}: {error}") from None


def _section_values(cls: type, raw: Any, where: str) -> dict[str, Any]:
    """A section's raw mapping, checked for its shape and unknown keys (the section checks the values)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping of keys, got {kind_of(raw)}")
    known = [f.name for f in fields(cls)]
    for key in raw:
        if key not in known:
            raise ConfigError(f"{where}.{shown(key)}: unknown key; known keys of {where}: {', '.join(known)}")
    return raw


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, but a key given twice in one mapping is an error (naming key and line)
    instead of the last one silently winning."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        lines: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # ``<<: *base`` may be overridden by the keys beside it
            key = self.construct_object(key_node, deep=True)
            try:
                first = lines.get(key)
            except TypeError:
                continue  # an unhashable key: the safe loader's own error follows
            if first is not None:
                problem = f"duplicate key {shown(key, quote=True)} (first on line {first})"
                raise yaml.constructor.ConstructorError(None, None, problem, key_node.start_mark)
            lines[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep)


def parse_yaml(text: str, origin: str) -> Any:
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise ConfigError(f"{origin}:{where}: malformed YAML: {problem}") from None
    except (ValueError, RecursionError) as error:  # an integer of 5000 digits, nesting a parser cannot follow
        raise ConfigError(f"{origin}: malformed YAML: {shown(error)}") from None


def load(path: Path) -> Config:
    """Load and validate an experiment config file."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path}: cannot be read: {error}") from None
    raw = parse_yaml(text, path.name)
    return from_dict(resolve_preset(raw, path.name), path.name)


def resolve_preset(raw: Any, origin: str) -> Any:
    """A config may name ``preset:``; its keys fill in what the file leaves out."""
    if not isinstance(raw, dict) or not raw.get("preset"):
        return raw
    name = raw["preset"]
    if not isinstance(name, str):
        raise ConfigError(f"{origin}: preset: expected text, got {kind_of(name)}")
    base = presets.preset(name, origin=f"{origin}: preset")
    return merge(base, file_vocabulary(raw))


def file_vocabulary(raw: ConfigTree, named: bool = False) -> ConfigTree:
    """``raw`` with ``tokenizer.vocab_size: 0`` (the file's) where its tokenizer section names a file and no
    vocab_size (or, ``named``, where it names a file at all): a preset's vocabulary, the default's or that of the
    experiment it was copied from is for the BPE octlm trains, not the user's word on a file's."""
    section = raw.get("tokenizer")
    if isinstance(section, dict) and section.get("file") and (named or "vocab_size" not in section):
        return {**raw, "tokenizer": {**section, "vocab_size": 0}}
    return raw


def merge(base: ConfigTree, override: ConfigTree) -> ConfigTree:
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def apply_overrides(raw: ConfigTree, overrides: list[str], origin: str = "--set") -> ConfigTree:
    """Apply ``a.b=c`` overrides to a raw config mapping; values are parsed as YAML scalars.

    Keys are checked here; values when the result goes through ``from_dict``.
    """
    out = copy.deepcopy(raw)
    for item in overrides:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"{origin} {shown(item, quote=True)}: expected KEY=VALUE, for example training.steps=400")
        section, name = split_key(key, origin)
        if section is None:
            out[name] = text
            continue
        value = parse_yaml(text, f"{origin} {key}") if text.strip() else ""
        target = out.setdefault(section, {})
        if not isinstance(target, dict):
            target = out[section] = {}
        target[name] = value
    keys = {item.partition("=")[0].strip() for item in overrides}
    return file_vocabulary(out, named="tokenizer.file" in keys and "tokenizer.vocab_size" not in keys)


def to_yaml(config: Config) -> str:
    """The resolved config as YAML, sections in their usual order."""
    body = config.to_dict()
    ordered = {k: body[k] for k in TOP_LEVEL if body.get(k)}
    ordered.update({k: body[k] for k in SECTIONS if k != "init" or config.init != InitConfig()})
    return yaml.dump(ordered, Dumper=DUMPER, sort_keys=False, default_flow_style=False)


class KeyDoc(TypedDict):
    """One config key as ``octlm config keys --json`` and the config reference describe it."""

    key: str
    type: str
    default: Any  # the key's default as YAML writes it: a number, text, a list or null, by key
    fingerprinted: bool
    doc: str


def describe_keys() -> list[KeyDoc]:
    """Every config key in file order (top-level keys, then the sections'), one dict each:
    ``key``, ``type``, ``default``, ``fingerprinted`` and ``doc`` (the help text, choices spelled out).

    ``ADDED_LATER`` keys count as fingerprinted: they are, once they differ from their default.
    """
    top = [_describe(spec.name, spec, str) for spec in fields(Config) if spec.name in TOP_LEVEL]
    return top + [
        _describe(f"{section}.{spec.name}", spec, field_kinds(cls)[spec.name])
        for section, cls in SECTIONS.items()
        for spec in fields(cls)
    ]


def _describe(key: str, spec: Field[Any], kind: Any) -> KeyDoc:
    choices, maximum = spec.metadata["choices"], spec.metadata.get("maximum")
    spelled = f"{', '.join(choices[:-1])} or {choices[-1]}" if len(choices) > 1 else "".join(choices)
    return {
        "key": key,
        "type": type_name(kind),
        "default": list(spec.default) if isinstance(spec.default, tuple) else spec.default,
        "fingerprinted": key not in BOOKKEEPING,
        "doc": spec.metadata["doc"].replace("{choices}", spelled) + (f"; at most {maximum:,}" if maximum else ""),
    }
