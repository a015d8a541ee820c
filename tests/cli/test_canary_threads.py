"""Issue 37 item 2: ``octlm canary --threads 1,2,4`` prints the digest at each thread count and says whether they
agree (the step it runs has no pieces, so here they need not: 4 threads split its SiLU otherwise)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import cli, holds, json_out


def test_the_digest_at_each_thread_count(home: Path) -> None:
    result = cli(home, "canary", "--determinism", "local", "--threads", "1,2", "--json")
    assert result.exit_code == 0, result.stderr
    found = json_out(result)
    holds(found, "octlm canary --json")
    assert list(found["by_threads"]) == ["1", "2"] and found["threads"] == 1
    assert found["by_threads"]["1"] == found["digest"]
    assert all(re.fullmatch(r"[0-9a-f]{16}", digest) for digest in found["by_threads"].values())
    said = cli(home, "canary", "--determinism", "local", "--threads", "2,1").stdout.splitlines()
    verdicts = [line for line in said if line.startswith(("the same digest at 2, 1 threads", "the digest differs"))]
    assert len(verdicts) == 1, said
    alone = json_out(cli(home, "canary", "--determinism", "local", "--threads", "1", "--json"))
    assert "by_threads" not in alone and alone["digest"] == found["digest"]


@pytest.mark.parametrize("given", ["0", "1,x", "1,,2", "-1"])
def test_threads_that_are_not_positive_whole_numbers_are_one_line(home: Path, given: str) -> None:
    result = cli(home, "canary", "--determinism", "local", "--threads", given)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--threads" in lines[0] and "positive whole numbers" in lines[0], lines
