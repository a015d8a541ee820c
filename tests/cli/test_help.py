"""Help as a person reads it: every command with examples, readable usage lines, whole summaries, shell completion of
IDs and --set keys.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import cli, write_experiment

from octlm.cli import app as cli_app
from octlm.core.home import Home
from octlm.store.experiments import load, register
from octlm.store.registry import Registry

IDS = [f"EXP-00{n}" for n in range(1, 6)]


@pytest.fixture(scope="module")
def five(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Five experiments with runs, verdicts and run files as octlm writes them, without training."""
    home = tmp_path_factory.mktemp("daily")
    for n, experiment_id in enumerate(IDS, 1):
        write_experiment(home, experiment_id, training={"learning_rate": 0.001 * n}, data={"sources": ["builtin:docs"]})
        records = [
            {
                "step": s,
                "tokens": s * 64,
                "train_loss": 5.9629 + n / 10,
                "eval_loss": 5.96291234,
                "perplexity": 357.8,
                "bits_per_byte": 2.123456,
                "lr": 0.001,
                "gradient_norm": 1.5,
                "elapsed_seconds": 18.7,
                "tokens_per_second": 17537.3,
            }
            for s in (4, 8, 12)
        ]
        (home / "runs").mkdir(exist_ok=True)
        (home / "runs" / f"{experiment_id}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        with Registry(home / "registry.db") as registry:
            register(Home(home), registry, load(Home(home), experiment_id))
            argv = ["octlm", "train", experiment_id, "--until", "12", "--home", str(home / "a" / "long" / "path")]
            run = registry.start_run(experiment_id, "train", start_step=0, argv=argv, pid=17537, threads=2)
            status = {3: "interrupted", 4: "stopped"}.get(n, "completed")
            registry.finish_run(run, status, end_step=12, latest_metrics=records[-1], final_metrics=records[-1])
            registry.add_verification(experiment_id, "verify-resume", "pass", {"summary": "identical " * 12}, run)
    return home


def commands() -> list[list[str]]:
    return [*([str(c.name)] for c in cli_app.app.registered_commands), ["config", "keys"]]


@pytest.mark.parametrize("command", commands(), ids=" ".join)
def test_every_command_has_examples_h_and_readable_usage(tmp_path: Path, command: list[str]) -> None:
    result = cli(tmp_path, *command, "-h")
    assert result.exit_code == 0, result.stderr
    usage = result.stdout.split("Examples:", 1)
    assert len(usage) == 2 and f"octlm {' '.join(command)}" in usage[1]
    for unreadable in ("[[", "<list", "<str>", "<int>", "{ID}"):
        assert unreadable not in result.stdout, unreadable


def test_examples_of_owned_commands_name_real_options() -> None:
    for name in ("show", "doctor", "bench"):
        command = next(c for c in cli_app.app.registered_commands if c.name == name)
        flags = {
            flag
            for p in cli_app.typer.main.get_command_from_info(
                command, pretty_exceptions_short=True, rich_markup_mode=None
            ).params
            for flag in getattr(p, "opts", [])
        }
        for line in cli_app.EXAMPLES[name]:
            assert {word for word in line.split() if word.startswith("--")} <= flags, line


def test_root_help_lists_whole_summaries(tmp_path: Path) -> None:
    result = cli(tmp_path, "-h")
    assert result.exit_code == 0 and "..." not in result.stdout.split("Commands:")[1].split("Examples:")[0]
    assert "--install-completion" in result.stdout and "Examples:" in result.stdout


def complete(home: Path, words: str) -> list[str]:
    script = Path(sys.executable).parent / "octlm"
    env = {
        **os.environ,
        "_OCTLM_COMPLETE": "complete_bash",
        "COMP_WORDS": words,
        "COMP_CWORD": str(len(words.split()) - 1),
    }
    done = subprocess.run([str(script)], capture_output=True, text=True, env=env, timeout=60, cwd=home)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_completion_of_ids_and_set_keys(five: Path) -> None:
    assert complete(five, "octlm show EXP-00") == IDS
    assert complete(five, f"octlm --home {five} train EXP-004") == ["EXP-004"]
    assert complete(five, "octlm new --set training.learning_r") == ["training.learning_rate="]
