"""Issue 34 item 6: the light path stays light. ``octlm --help``, ``show`` (the list, one experiment, two side by
side) and ``new`` run in a fresh interpreter without loading torch, tokenizers, jinja2 or optuna: what each would
cost at every start (torch alone is seconds). numpy is not on the list: sqlite-utils imports it whenever it is
installed (75 ms here), and a paired comparison uses it for its bootstrap. Their speed is measured in
``benchmarks/show_1000.py``, not here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import write_experiment

HEAVY = ("torch", "tokenizers", "jinja2", "optuna")
RUN_AND_LIST = (
    "import sys, runpy, json\n"
    "sys.argv = ['octlm', *sys.argv[1:]]\n"
    "try:\n    runpy.run_module('octlm', run_name='__main__')\n"
    "except SystemExit as stop:\n    code = stop.code\n"
    "else:\n    code = 0\n"
    f"print(json.dumps({{'code': code, 'loaded': [m for m in {HEAVY!r} if m in sys.modules]}}), file=sys.stderr)\n"
)


def loaded(home: Path, *args: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", RUN_AND_LIST, "--home", str(home), *args], capture_output=True, text=True, timeout=120
    )
    said = json.loads(done.stderr.strip().splitlines()[-1])
    assert said["code"] in (0, None), done.stderr
    return said["loaded"]


@pytest.mark.parametrize(
    "args",
    [("--help",), ("show",), ("show", "EXP-001"), ("show", "EXP-001", "EXP-002"), ("new", "--from", "EXP-001")],
    ids=["help", "show", "show-one", "show-two", "new"],
)
def test_the_light_commands_load_nothing_heavy(home: Path, args: tuple[str, ...]) -> None:
    write_experiment(home, "EXP-002", training={"learning_rate": 1e-3})
    assert loaded(home, *args) == []
