"""One name, one meaning (issue 47 item 5), held from the source as the layering test holds the imports:

- A name imported bare (``from octlm.x import NAME``) has lost its module, so the reader takes it for the one thing it
  names: a public class, alias or constant imported that way anywhere (the package, its tests, the benchmarks) is
  defined in one module only. The issue found four ``METRICS``, two ``METRIC_FIELDS``, two ``Request``; the rule
  found three ``Verdict``, three ``Plan``, two ``Fingerprints`` and more, each renamed for what it is. Where two
  modules define the same thing for their own documents, ``SAME_MEANING`` names it with its reason.
- A module is imported under its own name, or under one that names no other module of the package (its own
  package's name may stand for it: ``machine as runtime``): ``side_by_side as compare`` was read as ``compare/``.
- An error is recognized by its type (``core/errors``: ``BeingTrained``, ``InExperimentFile``) or its code (an
  ``errno``, SQLite's result code), never by the words of its message, which quote paths and names the user chose:
  the worker took every refusal in a home whose folder said "already being trained" for a trial being trained.
  Where another library raises one type for several causes and only its text tells them apart, ``BY_TEXT`` names the
  function with its reason.

Each rule is also tried on a planted violation."""

from __future__ import annotations

import ast
import functools
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAME_MEANING = {  # a name several modules define for the same thing, each its own: why it is one meaning
    "SCHEMA_VERSION": "the version of its module's own --json documents (show's, sweep status's, the export records')",
    "REQUIRED": "the keys its module's records must hold, with their types (an export record's, a checkpoint's)",
    "SEED": "the config key training.seed, named where each layer reads it (tasks may not import views)",
}
BY_TEXT = {  # "path function": why the error's text is read
    "octlm/runtime/launch.py _rendezvous_failed": "torch's elastic launcher raises one error type for a port in use, "
    "a timeout and a refused rendezvous; only its text tells them apart",
    "octlm/runtime/distributed.py lost": "gloo and NCCL report a lost peer as a RuntimeError whose text names them",
    "octlm/cli/common.py _resources": "torch reports a failed CPU allocation (and MPS memory) as a RuntimeError whose "
    "text says so; a GPU's OutOfMemoryError is recognized by its type's name first",
}
ERROR_NAMES = {"error", "exc", "exception", "err"}


@functools.cache
def _sources(root: Path, *folders: str) -> dict[Path, ast.Module]:
    return {path: ast.parse(path.read_text()) for folder in folders for path in sorted((root / folder).rglob("*.py"))}


def _defined(tree: ast.Module) -> list[str]:
    """The public names a module defines at its top: classes, aliases and constants (capitalized)."""
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [target.id for target in node.targets if isinstance(target, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
    return [name for name in names if name[:1].isupper()]


def homonyms(root: Path) -> list[str]:
    """``NAME: module, module`` for each name imported bare from the package that more than one module defines."""
    defined: dict[str, set[str]] = defaultdict(set)
    for path, tree in _sources(root, "octlm").items():
        for name in _defined(tree):
            defined[name].add(str(path.relative_to(root)))
    imported = {
        alias.name
        for tree in _sources(root, "octlm", "tests", "benchmarks").values()
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "octlm"
        for alias in node.names
    }
    return [f"{name}: {', '.join(sorted(defined[name]))}" for name in sorted(imported) if len(defined[name]) > 1]


def test_a_name_imported_bare_means_one_thing() -> None:
    found = [line for line in homonyms(ROOT) if line.split(":")[0] not in SAME_MEANING]
    assert not found, "names defined by several modules and imported bare (rename each for what it is):\n" + "\n".join(
        found
    )
    assert {line.split(":")[0] for line in homonyms(ROOT)} == set(SAME_MEANING)  # none named that is one already


def misleading_aliases(root: Path) -> list[str]:
    """``path:line module as NAME`` for each package module imported under the name of another of its modules or
    packages (not one of its own packages)."""
    package = root / "octlm"
    names = {path.stem for path in package.rglob("*.py") if path.name != "__init__.py"}
    names |= {path.parent.name for path in package.rglob("__init__.py") if path.parent != package}
    modules = {".".join(path.relative_to(root).with_suffix("").parts) for path in package.rglob("*.py")}
    found = []
    for path, tree in _sources(root, "octlm", "tests", "benchmarks").items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or (node.module or "").split(".")[0] != "octlm":
                continue
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if alias.asname in names - set(full.split(".")) and (full in modules or f"{full}.__init__" in modules):
                    found.append(f"{path.relative_to(root)}:{node.lineno} {full} as {alias.asname}")
    return found


def test_no_module_is_imported_under_another_module_s_name() -> None:
    found = misleading_aliases(ROOT)
    assert not found, "modules imported under another module's name:\n" + "\n".join(found)


def _mentions(node: ast.AST, texts: set[str], errors: set[str]) -> bool:
    """Whether ``node`` reads an error's text: ``str(error)``, ``error.args``, or a name holding either."""
    for part in ast.walk(node):
        if isinstance(part, ast.Name) and part.id in texts:
            return True
        if isinstance(part, ast.Call) and getattr(part.func, "id", None) in ("str", "repr") and part.args:
            if isinstance(part.args[0], ast.Name) and part.args[0].id in errors:
                return True
        if isinstance(part, ast.Attribute) and part.attr == "args" and getattr(part.value, "id", None) in errors:
            return True
    return False


def _reads_text(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    arguments = [*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs]
    errors = {a.arg for a in arguments if a.arg in ERROR_NAMES or "Error" in ast.unparse(a.annotation or ast.Pass())}
    errors |= {node.name for node in ast.walk(function) if isinstance(node, ast.ExceptHandler) and node.name}
    texts: set[str] = set()
    for node in ast.walk(function):  # names that hold an error's text: text = str(error).lower(), also unpacked
        if isinstance(node, ast.Assign):
            for target in node.targets:
                pairs = [(target, node.value)]
                if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                    pairs = list(zip(target.elts, node.value.elts, strict=False))
                texts |= {t.id for t, value in pairs if isinstance(t, ast.Name) and _mentions(value, texts, errors)}
    for node in ast.walk(function):
        compared = isinstance(node, ast.Compare) and any(
            isinstance(op, (ast.In, ast.NotIn, ast.Eq, ast.NotEq)) for op in node.ops
        )
        searched = isinstance(node, ast.Call) and getattr(node.func, "attr", "") in ("startswith", "endswith", "find")
        if (compared or searched) and _mentions(node, texts, errors):
            return True
    return False


def errors_read_by_text(root: Path) -> list[str]:
    """``path function`` of each function that tells errors apart by the words of their message."""
    found = []
    for path, tree in _sources(root, "octlm").items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _reads_text(node):
                found.append(f"{path.relative_to(root)} {node.name}")
    return found


def test_errors_are_recognized_by_type_never_by_their_text() -> None:
    found = errors_read_by_text(ROOT)
    assert sorted(found) == sorted(BY_TEXT), (
        "errors told apart by their message (give them a type in core/errors, or read their code), or a reason in "
        "BY_TEXT that no longer applies:\n" + "\n".join(sorted(set(found) ^ set(BY_TEXT)))
    )


def test_each_rule_finds_a_planted_violation(tmp_path: Path) -> None:
    (tmp_path / "octlm" / "views" / "compare").mkdir(parents=True)
    (tmp_path / "octlm" / "tasks").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "benchmarks").mkdir()
    for name in ("octlm/__init__.py", "octlm/views/__init__.py", "octlm/views/compare/__init__.py"):
        (tmp_path / name).write_text("")
    (tmp_path / "octlm" / "views" / "side_by_side.py").write_text("METRICS = ('eval_loss',)\n\n\nclass Verdict: ...\n")
    (tmp_path / "octlm" / "tasks" / "export.py").write_text("METRICS = ('step',)\nVerdict = dict\n")
    (tmp_path / "octlm" / "views" / "show.py").write_text(
        "from octlm.views import side_by_side as compare\nfrom octlm.views.side_by_side import METRICS\n"
    )
    (tmp_path / "tests" / "test_x.py").write_text("from octlm.tasks.export import Verdict\n")
    (tmp_path / "octlm" / "tasks" / "work.py").write_text(
        "def run(trial):\n    try:\n        trial()\n    except OSError as error:\n"
        "        if 'already being trained' not in str(error):\n            raise\n\n\n"
        "def told(error: BaseException) -> bool:\n    text, n = str(error).lower(), 1\n"
        "    return text.startswith('x')\n\n\n"
        "def said(error: BaseException) -> str:\n    return str(error).splitlines()[0]  # shown, not compared\n"
    )
    assert homonyms(tmp_path) == [
        "METRICS: octlm/tasks/export.py, octlm/views/side_by_side.py",
        "Verdict: octlm/tasks/export.py, octlm/views/side_by_side.py",
    ]
    assert misleading_aliases(tmp_path) == ["octlm/views/show.py:1 octlm.views.side_by_side as compare"]
    assert errors_read_by_text(tmp_path) == ["octlm/tasks/work.py run", "octlm/tasks/work.py told"]
