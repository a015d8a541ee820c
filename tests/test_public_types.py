"""Issue 34 item 1, as a ratchet: the public functions of the package whose signature still says ``dict[str, Any]``
(or ``Mapping[str, Any]``: a parameter or the return) are counted from the source, and the count may only go down.
Lower ``LIMIT`` when you type one (the issue's goal was 20). The fields of the records that cross modules (a
dataclass's, a TypedDict's, a NamedTuple's) are held the same way (issue 47 item 5): each field that still says it
is named in ``UNTYPED_FIELDS`` with its reason, and no other may appear.

The true free-form mappings are named once, with their reason, in ``octlm/core/records/freeform.py`` (a config
tree, a torch state dict); signatures that use those names are counted apart (``FREE_FORM_USES`` is their ceiling,
so a new use is a decision, not a drift), and no other alias of ``dict[str, Any]`` may exist anywhere in the
package: a mapping renamed is not a mapping typed."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "octlm"
LIMIT = 1  # 2026-12-03: from 151; the one left: store.base.cells.decoded, any table's row before its reader types it
FREE_FORM = {"ConfigTree", "StateDict", "TableRow"}  # octlm/core/records/freeform.py says why each is free-form
FREE_FORM_USES = 50  # 32 config trees, 12 state dicts, 6 rows of chosen columns
MERGED_ROW = (  # store/merge.Merge: why its rows are not the tables' row types
    "rows to insert, made from another home's export records: each checked against its table's columns as it is "
    "written (store.base.checked), and a child names its run by run_uuid until the transaction knows its id"
)
UNTYPED_FIELDS = {  # "path Class.field": why the field is not typed
    "octlm/store/merge.py Merge.experiments": MERGED_ROW,
    "octlm/store/merge.py Merge.runs": MERGED_ROW,
    "octlm/store/merge.py Merge.run_updates": MERGED_ROW,
    "octlm/store/merge.py Merge.checkpoints": MERGED_ROW,
    "octlm/store/merge.py Merge.verifications": MERGED_ROW,
    "octlm/store/merge.py Merge.notes": MERGED_ROW,
    "octlm/store/merge.py Merge.metrics": MERGED_ROW,
}
FREE_FORM_FIELDS = 23  # 15 config trees (a config, a sweep's configuration), 7 state dicts, 1 list of chosen rows


def untyped(root: Path, spelled: tuple[str, ...] = ("dict[str, Any]", "Mapping[str, Any]")) -> list[str]:
    """``path:line name`` of each public function (not ``_private``, not inside a private class or a function)
    with one of ``spelled`` (a word of it, for a name) in its annotations."""
    found: list[str] = []

    def says(note: ast.expr | None) -> bool:
        text = "" if note is None else ast.unparse(note)
        return any(word in text if "[" in word else re.search(rf"\b{word}\b", text) for word in spelled)

    def visit(node: ast.AST, path: Path, public: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                arguments = child.args
                annotated = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
                annotated += [a for a in (arguments.vararg, arguments.kwarg) if a is not None]
                notes = [a.annotation for a in annotated if a.annotation is not None] + [child.returns]
                if public and not child.name.startswith("_"):
                    if any(says(note) for note in notes):
                        found.append(f"{path.relative_to(root.parent)}:{child.lineno} {child.name}")
                visit(child, path, False)
            elif isinstance(child, ast.ClassDef):
                visit(child, path, public and not child.name.startswith("_"))
            else:
                visit(child, path, public)

    for path in sorted(root.rglob("*.py")):
        visit(ast.parse(path.read_text()), path, True)
    return found


def test_untyped_public_signatures_do_not_grow() -> None:
    found = untyped(PACKAGE)
    assert len(found) <= LIMIT, f"{len(found)} public functions say dict[str, Any] (at most {LIMIT}):\n" + "\n".join(
        found
    )


def test_the_count_sees_a_planted_one(tmp_path: Path) -> None:
    root = tmp_path / "octlm"
    root.mkdir()
    (root / "a.py").write_text(
        "from typing import Any\n\n\ndef shown(row: dict[str, Any]) -> None: ...\n\n\n"
        "def _hidden(row: dict[str, Any]) -> None: ...\n\n\nclass Rows:\n"
        "    def read(self) -> list[dict[str, Any]]: ...\n"
    )
    assert untyped(root) == ["octlm/a.py:4 shown", "octlm/a.py:11 read"]


def untyped_fields(root: Path, spelled: tuple[str, ...] = ("dict[str, Any]", "Mapping[str, Any]")) -> list[str]:
    """``path Class.field`` of each field of a record (a dataclass, a TypedDict, a NamedTuple, wherever it is
    defined) with one of ``spelled`` (a word of it, for a name) in its annotation."""
    trees = {path: ast.parse(path.read_text()) for path in sorted(root.rglob("*.py"))}
    classes = [node for tree in trees.values() for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
    typed_dicts, grown = {"TypedDict"}, True
    while grown:  # a TypedDict's subclasses, however deep, and wherever their bases are
        bases = {node.name: {ast.unparse(base).split(".")[-1] for base in node.bases} for node in classes}
        grown = bool(found := {name for name, of in bases.items() if of & typed_dicts} - typed_dicts)
        typed_dicts |= found

    def record(node: ast.ClassDef) -> bool:
        bases = {ast.unparse(base).split(".")[-1] for base in node.bases}
        decorators = [ast.unparse(decorator) for decorator in node.decorator_list]
        return bool(bases & (typed_dicts | {"NamedTuple"})) or any(
            re.match(r"(dataclasses\.)?dataclass\b", decorator) for decorator in decorators
        )

    found: list[str] = []
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and record(node):
                for field in node.body:
                    if isinstance(field, ast.AnnAssign) and _says(field.annotation, spelled):
                        found.append(f"{path.relative_to(root.parent)} {node.name}.{ast.unparse(field.target)}")
    return found


def _says(note: ast.expr | None, spelled: tuple[str, ...]) -> bool:
    text = "" if note is None else ast.unparse(note)
    return any(word in text if "[" in word else re.search(rf"\b{word}\b", text) for word in spelled)


def test_untyped_fields_are_the_named_ones() -> None:
    found = untyped_fields(PACKAGE)
    assert sorted(found) == sorted(UNTYPED_FIELDS), (
        "fields of records that say dict[str, Any], beyond those named with their reason in UNTYPED_FIELDS: type "
        "them (a TypedDict, a dataclass), or name the reason:\n" + "\n".join(sorted(set(found) ^ set(UNTYPED_FIELDS)))
    )
    uses = untyped_fields(PACKAGE, tuple(sorted(FREE_FORM)))
    assert len(uses) <= FREE_FORM_FIELDS, f"{len(uses)} fields hold a free-form mapping:\n" + "\n".join(uses)


def test_the_field_count_sees_a_planted_one(tmp_path: Path) -> None:
    root = tmp_path / "octlm"
    root.mkdir()
    (root / "a.py").write_text(
        "from dataclasses import dataclass, field\nfrom typing import Any, NamedTuple, NotRequired, TypedDict\n\n\n"
        "class Base(TypedDict):\n    rows: list[dict[str, Any]]\n\n\n"
        "@dataclass(frozen=True)\nclass Held:\n    row: dict[str, Any] = field(default_factory=dict)\n"
        "    fine: dict[str, int]\n\n\n"
        "class Pair(NamedTuple):\n    left: Mapping[str, Any]\n\n\n"
        "class Plain:\n    loose: dict[str, Any]\n"
    )
    (root / "b.py").write_text(
        "from a import Base\n\n\nclass Grown(Base):\n    extra: NotRequired[dict[str, dict[str, Any]]]\n\n\n"
        "class Further(Grown):\n    tree: ConfigTree\n"
    )
    assert untyped_fields(root) == [
        "octlm/a.py Base.rows", "octlm/a.py Held.row", "octlm/a.py Pair.left", "octlm/b.py Grown.extra",
    ]  # fmt: skip
    assert untyped_fields(root, ("ConfigTree",)) == ["octlm/b.py Further.tree"]


def aliases_of_any_dict(root: Path) -> list[str]:
    """``path name`` of each module-level name bound to ``dict[str, Any]`` (``X = ...`` or ``X: TypeAlias = ...``)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                target, value = node.targets[0].id, node.value
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                target, value = node.target.id, node.value
            else:
                continue
            if ast.unparse(value).replace("'", "") == "dict[str, Any]":
                found.append(f"{path.relative_to(root.parent)} {target}")
    return found


def test_the_free_form_mappings_are_the_named_ones() -> None:
    from octlm.core.records import freeform

    assert set(freeform.FREE_FORM) == FREE_FORM
    assert aliases_of_any_dict(PACKAGE) == [f"octlm/core/records/freeform.py {name}" for name in freeform.FREE_FORM]
    uses = untyped(PACKAGE, tuple(sorted(FREE_FORM)))
    assert len(uses) <= FREE_FORM_USES, f"{len(uses)} public functions take or give a free-form mapping:\n" + "\n".join(
        uses
    )


def test_an_alias_in_another_module_is_seen(tmp_path: Path) -> None:
    root = tmp_path / "octlm"
    root.mkdir()
    (root / "b.py").write_text(
        "from typing import Any, TypeAlias\n\nRow: TypeAlias = dict[str, Any]\nBag = dict[str, Any]\n"
        "Ok = dict[str, int]\n"
    )
    (root / "c.py").write_text(
        "def read(tree: ConfigTree) -> None: ...\n\n\ndef kept(trees: ConfigTrees) -> None: ...\n"
    )
    assert aliases_of_any_dict(root) == ["octlm/b.py Row", "octlm/b.py Bag"]
    assert untyped(root, ("ConfigTree",)) == ["octlm/c.py:1 read"]


STRICT = {  # what `mypy --strict` turns on, less the flags mypy takes globally only (set in [tool.mypy] itself)
    "disallow_any_generics",
    "disallow_subclassing_any",
    "disallow_untyped_calls",
    "disallow_untyped_defs",
    "disallow_incomplete_defs",
    "check_untyped_defs",
    "disallow_untyped_decorators",
    "warn_return_any",
    "no_implicit_reexport",
    "strict_equality",
    "extra_checks",
}


def test_the_torch_free_packages_are_checked_strictly() -> None:
    """Issue 34: mypy strict on every package that does not import torch (CI runs mypy with pyproject's settings)."""
    import tomllib

    from test_layering import TORCH_FREE

    settings = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["tool"]["mypy"]
    assert settings["warn_unused_ignores"] and settings["warn_redundant_casts"]
    strict = [o for o in settings["overrides"] if all(o.get(flag) is True for flag in STRICT)]
    covered = {module for override in strict for module in override["module"]}
    assert {f"octlm.{package}.*" if package else "octlm" for package in TORCH_FREE} <= covered
