"""The sweep commands' promises about what they load (issue 27): Optuna only for ``--sampler tpe``; ``octlm --help``,
``show``, ``new`` and a grid sweep never import it (nor ``work``'s pool torch)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml
from conftest import cli, json_out

SCRIPT = """
import sys
from typer.testing import CliRunner
from octlm.cli.app import app
home = sys.argv[1]
for args in (["--help"], ["show"], ["new", "--from", "EXP-001", "--seeds", "2"], ["show", "EXP-002"],
             ["sweep", "new", "g", "--from", "EXP-001", "--grid", "training.learning_rate=1e-3,2e-3"],
             ["sweep", "status", "g"], ["show", "g"], ["watch", "--once"]):
    result = CliRunner().invoke(app, ["--home", home, *args], catch_exceptions=False)
    assert result.exit_code == 0, (args, result.output)
    assert "optuna" not in sys.modules, args
tpe = ["sweep", "new", "t", "--from", "EXP-001", "--sampler", "tpe", "--trials", "2", "--range",
       "training.learning_rate=1e-4:1e-2:log"]
assert CliRunner().invoke(app, ["--home", home, *tpe], catch_exceptions=False).exit_code == 0
assert "optuna" in sys.modules  # the check above can see it
print("clean")
"""


def test_optuna_is_loaded_only_by_the_tpe_sampler(home: Path) -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(home)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "clean", done.stderr


def test_new_seeds_makes_replicates_that_differ_only_in_the_seed(home: Path) -> None:
    made = json_out(cli(home, "new", "--from", "EXP-001", "--seeds", "3", "--json"))
    assert made["ids"] == ["EXP-002", "EXP-003", "EXP-004"] and made["seeds"] == [1337, 1338, 1339]
    configs = [yaml.safe_load((home / "experiments" / f"{i}.yaml").read_text()) for i in made["ids"]]
    assert [c["training"].pop("seed") for c in configs] == [1337, 1338, 1339]
    assert [c.pop("description") for c in configs][1] == "from EXP-001 (seed 1338, replicate 2 of 3)"
    assert [c.pop("id") for c in configs] == made["ids"] and configs[0] == configs[1] == configs[2]
    bad = cli(home, "new", "--from", "EXP-001", "--seeds", "0")
    assert bad.exit_code == 2 and bad.stderr.count("\n") == 1 and "--seeds 0" in bad.stderr
    assert not (home / "experiments" / "EXP-005.yaml").exists()


def test_an_extended_sweep_is_described_as_it_is_now_and_its_history_in_the_commands_words(home: Path) -> None:
    """Issue 45 item 6: after `sweep extend`, `sweep status` (its first line and `--json`'s description) says the
    configurations and seeds the sweep has now, not those it was made with, and its history says each extension
    as its options were given (the values it added), not as a Python dict."""
    grid = ("--grid", "training.learning_rate=1e-3,3e-3", "--grid", "model.n_layers=1,2")
    assert cli(home, "sweep", "new", "g", "--from", "EXP-001", *grid).exit_code == 0
    first = cli(home, "sweep", "extend", "g", "--seeds", "3", "--grid", "training.learning_rate=3e-4,1e-3")
    assert first.exit_code == 0, first.stderr
    second = cli(home, "sweep", "extend", "g", "--grid", "model.n_layers=3", "--json")
    assert second.exit_code == 0 and json_out(second)["asked"] == {
        "seeds": None,
        "grid": {"model.n_layers": [3]},
        "random": 0,
    }
    status = json_out(cli(home, "sweep", "status", "g", "--json"))
    assert status["description"] == "9 configurations x 3 seeds, grid" and len(status["trials"]) == 27
    shown = cli(home, "sweep", "status", "g").stdout.splitlines()
    assert shown[0].startswith("sweep g (from EXP-001): 9 configurations x 3 seeds, grid; queued 27,")
    history = [
        line.split(": ", 1)[1] for line in shown if line.startswith(tuple(e["at"] for e in status["spec"]["history"]))
    ]
    assert history == [
        "extend --seeds 3 --grid training.learning_rate=0.0003 (14 new trials)",  # 1e-3 it had: 3 x 2 x 3 less 4
        "extend --grid model.n_layers=3 (9 new trials)",
    ]
    assert not any("{" in line for line in shown)
