"""Every option parsed strictly, every failure one line and its exit code, a reader that leaves early no error."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from conftest import cli

from octlm.cli import common

OCTLM = [sys.executable, "-m", "octlm"]


def run(home: Path | None, *args: str | bytes, **kwargs) -> subprocess.CompletedProcess:
    command = [*OCTLM, *(["--home", str(home)] if home else []), *args]
    env = {**os.environ, "NO_COLOR": "1", **kwargs.pop("env", {})}
    return subprocess.run(command, capture_output=True, timeout=120, env=env, **kwargs)


def one_line(done: subprocess.CompletedProcess, code: int = 2) -> str:
    stderr = done.stderr.decode("utf-8", "replace")
    assert done.returncode == code, stderr
    assert stderr.count("\n") == 1 and "Traceback" not in stderr, stderr
    return stderr


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["sample", "EXP-001", "--temperature", "nan"], "--temperature nan: must be a finite number"),
        (["sample", "EXP-001", "--temperature", "inf"], "--temperature inf"),
        (["sample", "EXP-001", "--seed", "1e23"], "'--seed'"),
        (["sample", "EXP-001", "--seed", "99999999999999999999999"], "--seed 99999999999999999999999: must be at most"),
        (["sample", "EXP-001", "--max-new-tokens", "100000000"], "--max-new-tokens 100000000: must be at most 100,000"),
        (["sample", "EXP-001", "--prompt", b"caf\xe9"], "--prompt: not valid UTF-8"),
        (["new", "--description", b"\xff\xfe"], "--description: not valid UTF-8"),
        (["overfit", "EXP-001", "--steps", "1e20"], "'--steps'"),
        (["overfit", "EXP-001", "--steps", "100000000000000000000"], "must be at most 1,000,000,000"),
        (["bench", "--precision", ",,"], "--precision ',,'"),
        (["bench", ""], "malformed experiment ID ''"),
        (["show", "--bogus"], "No such option: --bogus"),
        (["doctor", "--other-hosts"], "give it with --repair"),
        (["new", "--set", "training.steps=" + "9" * 40], "training.steps: must be at most 1,000,000,000"),
    ],
)
def test_bad_options_are_one_line_and_exit_2(home: Path, args: list, fragment: str) -> None:
    assert fragment in one_line(run(home, *args))


@pytest.mark.parametrize(
    "error, code, fragment",
    [
        (OverflowError("Python int too large to convert to C long"), 2, "a number too large"),
        (ValueError("could not convert string to float: 'x'"), 2, "bad value"),
        (UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"), 2, "not valid UTF-8"),
        (MemoryError(), 3, "out of memory"),
        (RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory"), 3, "memory"),
        (type("OutOfMemoryError", (RuntimeError,), {})("CUDA error"), 3, "out of memory on the device"),
        (BrokenPipeError(32, "Broken pipe"), 0, ""),
    ],
)
def test_handled_maps_every_failure_to_one_line(error: BaseException, code: int, fragment: str, capsys) -> None:
    @common.handled
    def command() -> None:
        raise error

    with pytest.raises(typer.Exit) as caught:
        command()
    assert caught.value.exit_code == code
    stderr = capsys.readouterr().err
    assert fragment in stderr and stderr.count("\n") == (1 if fragment else 0), stderr


@pytest.mark.parametrize("reader", ["show --csv | head -1", "show | head -1", "show --json | head -c 10"])
def test_a_reader_that_leaves_early_is_no_error(home: Path, reader: str) -> None:
    assert cli(home, "new", "--description", "d" * 300_000).exit_code == 0  # far more than a pipe holds
    script = f"set -o pipefail; {' '.join(OCTLM)} --home '{home}' {reader} >/dev/null"
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == "", done.stderr
