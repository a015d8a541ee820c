"""Issue 34 item 1, as a ratchet: the public functions of the package whose signature still says ``dict[str, Any]``
(a parameter or the return) are counted from the source, and the count may only go down. Lower ``LIMIT`` when you
type one; the issue's goal is 20, each a true free-form mapping with a comment saying so."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "octlm"
LIMIT = 105  # 2026-12-03: from 151 (the registry, sweep, claim, run-start, environment, lifecycle records typed)


def untyped(root: Path) -> list[str]:
    """``path:line name`` of each public function (not ``_private``, not inside a private class or a function)
    with ``dict[str, Any]`` in its annotations."""
    found: list[str] = []

    def visit(node: ast.AST, path: Path, public: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                arguments = child.args
                annotated = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
                annotated += [a for a in (arguments.vararg, arguments.kwarg) if a is not None]
                notes = [a.annotation for a in annotated if a.annotation is not None] + [child.returns]
                if public and not child.name.startswith("_"):
                    if any(note is not None and "dict[str, Any]" in ast.unparse(note) for note in notes):
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
