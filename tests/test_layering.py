"""Layering and size rules for octlm_cli, checked by parsing its source with ast (nothing is imported).

- Light start-up: `octlm --help`, `show` and `new` must not load torch, numpy or tokenizers, so the CLI and
  the bookkeeping modules (registry, migrations, show, compare, experiments, listing, plots) import them, or
  octlm modules that import them at module level, only inside function bodies.
- Data flows one way: config -> data -> model -> loop -> checkpoint -> registry -> cli. The loop knows no
  bookkeeping or CLI, only __main__ enters the CLI from outside, and module-level imports have no cycle.
- Small units: functions of at most 40 lines and modules of at most 350 lines stay reviewable.
Line length is ruff's job. Modules are found by walking the package, so new ones are covered automatically.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "octlm_cli"
HEAVY = {"torch", "numpy", "tokenizers"}
LIGHT = {
    "registry", "migrations", "show", "compare", "experiments", "listing", "plots", "report", "report_sections",
    "charts", "exchange", "importing", "registry_exchange", "packing", "mounts", "compile_cache",
}  # fmt: skip
LOOP_MUST_NOT_IMPORT = {"registry", "session", "runner", "show", "compare"}
MAX_FUNCTION, MAX_MODULE = 40, 350


def modules(root: Path) -> dict[str, Path]:
    """{dotted name: path} for every .py file under the package directory `root`."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = [root.name, *path.relative_to(root).with_suffix("").parts]
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(root: Path) -> dict[str, list[tuple[str, int, bool]]]:
    """{module: [(imported module, line, at module level)]} for the package directory `root`."""
    mods = modules(root)
    return {
        name: file_imports(path, name.split(".")[: None if path.name == "__init__.py" else -1], mods)
        for name, path in mods.items()
    }


def file_imports(path: Path, package: list[str], mods: dict) -> list[tuple[str, int, bool]]:
    """Imports of one file; relative ones are resolved against `package` (a list of name parts)."""
    found, todo = [], [(ast.parse(path.read_text(), str(path)), True)]
    while todo:
        node, top = todo.pop()
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno, top) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            source = node.module or ""
            if node.level:
                source = ".".join(package[: len(package) - node.level + 1] + [source] * bool(source))
            subs = [f"{source}.{alias.name}" for alias in node.names]  # `from pkg import submodule`
            found += [(sub if sub in mods else source, node.lineno, top) for sub in subs]
        runtime = not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not (
            isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        )
        todo += [(child, top and runtime) for child in ast.iter_child_nodes(node)]
    return sorted(found, key=lambda edge: edge[1])


def short(name: str) -> str:
    return name.partition(".")[2]  # "octlm_cli.cli.app" -> "cli.app"


def is_cli(short_name: str | None) -> bool:
    return short_name is not None and f"{short_name}.".startswith("cli.")


def heavy_modules(graph: dict) -> set[str]:
    """Modules importing torch/numpy/tokenizers at module level, directly or via other octlm modules."""
    heavy: set[str] = set()
    while new := {
        m
        for m, edges in graph.items()
        if m not in heavy and any(top and (t.split(".")[0] in HEAVY or t in heavy) for t, _, top in edges)
    }:
        heavy |= new
    return heavy


def import_rule(reason: str, offends):
    """Rule flagging every import for which offends(importer, imported or None, at module level, heavy)."""

    def offenders(root: Path) -> list[str]:
        mods, graph = modules(root), imports(root)
        heavy = heavy_modules(graph)
        return [
            f"{mods[name].relative_to(root.parent)}:{line} imports {target} ({reason})"
            for name, edges in graph.items()
            for target, line, top in edges
            if offends(
                short(name),
                short(target) if target in mods else None,
                top,
                target.split(".")[0] in HEAVY or target in heavy,
            )
        ]

    return offenders


loop_offenders = import_rule(
    "the loop must not know bookkeeping or the CLI",
    lambda src, dst, top, heavy: src == "loop" and (dst in LOOP_MUST_NOT_IMPORT or is_cli(dst)),
)
light_offenders = import_rule(
    "heavy at module level; import it inside the function",
    lambda src, dst, top, heavy: (is_cli(src) or src.split(".")[-1] in LIGHT) and top and heavy,
)
cli_entry_offenders = import_rule(
    "only __main__ may import the CLI",
    lambda src, dst, top, heavy: is_cli(dst) and not is_cli(src) and src != "__main__",
)


def cycle_offenders(root: Path) -> list[str]:
    edges = imports(root)
    graph = {m: sorted({t for t, _, top in e if top and t in edges and t != m}) for m, e in edges.items()}
    cycles, done, stack = [], set(), []

    def dfs(module: str) -> None:
        stack.append(module)
        for target in graph[module]:
            if target in stack:
                cycles.append("cycle: " + " -> ".join(stack[stack.index(target) :] + [target]))
            elif target not in done:
                dfs(target)
        stack.pop()
        done.add(module)

    for module in sorted(graph):
        if module not in done:
            dfs(module)
    return cycles


def function_offenders(root: Path) -> list[str]:
    bad = []
    for path in sorted(root.rglob("*.py")):
        nodes = ast.walk(ast.parse(path.read_text(), str(path)))
        for node in sorted(
            (n for n in nodes if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), key=lambda n: n.lineno
        ):
            if (size := node.end_lineno - node.lineno + 1) > MAX_FUNCTION:
                bad.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.name} ({size} lines)")
    return bad


def module_offenders(root: Path) -> list[str]:
    sizes = {path: len(path.read_text().splitlines()) for path in sorted(root.rglob("*.py"))}
    return [f"{p.relative_to(root.parent)}:1 {p.stem} ({n} lines)" for p, n in sizes.items() if n > MAX_MODULE]


RULES = {
    "loop-imports-one-way": loop_offenders,
    "light-modules-stay-light": light_offenders,
    "only-main-imports-cli": cli_entry_offenders,
    "no-import-cycles": cycle_offenders,
    f"functions-at-most-{MAX_FUNCTION}-lines": function_offenders,
    f"modules-at-most-{MAX_MODULE}-lines": module_offenders,
}


@pytest.mark.parametrize("rule", RULES)
def test_package_obeys(rule: str) -> None:
    if offenders := RULES[rule](PACKAGE):
        pytest.fail(f"{rule}: {len(offenders)} offender(s):\n" + "\n".join(offenders), pytrace=False)


GOOD = {
    "__init__.py": "__version__ = '0'\n",
    "__main__.py": "from .cli.app import main\n",
    "config.py": "import yaml\n\n\n@staticmethod\ndef ok():\n" + "    x = 1\n" * (MAX_FUNCTION - 1),
    "model.py": "import torch.nn.functional as F\nfrom .config import Config\n",
    "loop.py": "from . import model\n",
    "registry.py": "import json\n" * MAX_MODULE,
    "show.py": "from .registry import Registry\n\n\ndef f():\n    from . import loop\n    import torch\n",
    "cli/__init__.py": "",
    "cli/app.py": "from .. import show\nfrom . import render\n\n\ndef main():\n    from ..loop import step\n",
    "cli/render.py": "import rich\n",
}
BREAK = {  # rule -> (file, source appended to it that breaks that rule); GOOD sits at the size limits
    "loop-imports-one-way": ("loop.py", "def f():\n    from . import registry\n"),
    "light-modules-stay-light": ("cli/render.py", "from ..loop import step\n"),  # torch via loop -> model
    "only-main-imports-cli": ("registry.py", "def f():\n    from .cli import app\n"),
    "no-import-cycles": ("config.py", "from . import loop\n"),
    f"functions-at-most-{MAX_FUNCTION}-lines": ("config.py", "def long():\n" + "    x = 1\n" * MAX_FUNCTION),
    f"modules-at-most-{MAX_MODULE}-lines": ("registry.py", "import os\n"),
}


@pytest.mark.parametrize("rule", RULES)
def test_rule_on_synthetic_package(rule: str, tmp_path: Path) -> None:
    root = tmp_path / "octlm_cli"
    for name, source in GOOD.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(source)
    assert {r: check(root) for r, check in RULES.items()} == {r: [] for r in RULES}
    name, extra = BREAK[rule]
    (root / name).write_text(GOOD[name] + extra)
    offenders = RULES[rule](root)
    assert offenders and all(Path(name).stem in line for line in offenders), offenders
