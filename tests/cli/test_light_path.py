"""Issue 34 item 6: the light path stays light. ``octlm --help``, ``show`` (the list, one experiment, two side by
side) and ``new`` run in a fresh interpreter without loading torch, tokenizers, jinja2, optuna or pydantic: what each
would cost at every start (torch alone is seconds; typer 0.29 builds a pydantic adapter per parameter, 0.1 s more at
every start here, hence pyproject's ``typer<0.29``). numpy is not on the list: sqlite-utils imports it whenever it is
installed (75 ms here), and a paired comparison uses it for its clustered errors. Their speed is measured in
``benchmarks/light_path.py``, not here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import write_experiment

HEAVY = ("torch", "tokenizers", "jinja2", "optuna", "pydantic")
LIGHT = (("--help",), ("show",), ("show", "EXP-001"), ("show", "EXP-001", "EXP-002"), ("new", "--from", "EXP-001"))
# Every light command in turn in one fresh interpreter (what any of them loads stays in sys.modules), each through
# octlm's own entry point; the modules loaded, and each command's exit code, on the last line of stderr.
RUN_ALL = (
    "import json, runpy, sys\n"
    "home, codes = sys.argv[1], []\n"
    f"for args in {LIGHT!r}:\n"
    "    sys.argv = ['octlm', '--home', home, *args]\n"
    "    try:\n        runpy.run_module('octlm', run_name='__main__')\n"
    "    except SystemExit as stop:\n        codes.append(stop.code or 0)\n"
    "    else:\n        codes.append(0)\n"
    f"print(json.dumps({{'codes': codes, 'loaded': [m for m in {HEAVY!r} if m in sys.modules]}}), file=sys.stderr)\n"
)


def test_the_light_commands_load_nothing_heavy(home: Path) -> None:
    write_experiment(home, "EXP-002", training={"learning_rate": 1e-3})
    done = subprocess.run([sys.executable, "-c", RUN_ALL, str(home)], capture_output=True, text=True, timeout=120)
    said = json.loads(done.stderr.strip().splitlines()[-1])
    assert said["codes"] == [0] * len(LIGHT), done.stderr
    assert said["loaded"] == [], said
