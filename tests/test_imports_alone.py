"""Each module of the package imports alone, in an interpreter where no other octlm module has been imported.

The interpreter here imports the heavy third-party libraries once, then forks a child per module: the child
starts with none of octlm loaded (a fresh interpreter as far as the package is concerned) and imports that one
module. An import cycle that only bites in one order, or a module that works only because another was imported
first, fails here while the static checks in ``test_layering`` pass it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_layering import PACKAGE, modules

CHILD = r"""
import importlib, os, sys, traceback
if sys.argv[1] == "preload":
    import torch, numpy, tokenizers, typer, rich, yaml, jinja2  # loaded once, shared by every child
names = sys.argv[2:]
failed = []
for name in names:
    pid = os.fork()
    if pid == 0:
        try:
            assert not [m for m in sys.modules if m == "octlm" or m.startswith("octlm.")]
            importlib.import_module(name)
        except BaseException:
            traceback.print_exc()
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    if status:
        failed.append(name)
print("FAILED:" + ",".join(failed))
"""


def alone(names: list[str], cwd: Path, preload: bool = True) -> list[str]:
    command = [sys.executable, "-c", CHILD, "preload" if preload else "-", *names]
    done = subprocess.run(command, capture_output=True, text=True, cwd=cwd, timeout=600, check=True)
    line = next(line for line in done.stdout.splitlines() if line.startswith("FAILED:"))
    return [name for name in line.removeprefix("FAILED:").split(",") if name] + (
        [done.stderr] if "FAILED:" not in line else []
    )


@pytest.mark.slow  # about 25 s on two quiet cores: 150 children
def test_every_module_imports_alone() -> None:
    names = [name for name in modules(PACKAGE) if ".corpora" not in name and name != "octlm.__main__"]  # runs the CLI
    assert len(names) > 100
    assert alone(names, PACKAGE.parent) == []


def test_a_module_that_needs_another_imported_first_fails(tmp_path: Path) -> None:
    """The check can fail: in a planted package, ``a`` and ``b`` import each other, which works in one order only."""
    (tmp_path / "planted").mkdir()
    (tmp_path / "planted" / "__init__.py").write_text("")
    (tmp_path / "planted" / "a.py").write_text("import planted.b\nVALUE = 1\n")
    (tmp_path / "planted" / "b.py").write_text("from planted import a\nDOUBLE = a.VALUE * 2\n")  # a cycle
    assert alone(["planted.b"], tmp_path, preload=False) == []  # first imported, b happens to work ...
    assert alone(["planted.a"], tmp_path, preload=False) == ["planted.a"]  # ... but a, first, finds b half-made
