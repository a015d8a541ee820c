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


@pytest.mark.parametrize("given", ["1,100000", "2,4097", "4097", "\u0661", "1,\u0662", "\uff11", "1,2\u00b2"])
@pytest.mark.parametrize("tier", [[], ["--determinism", "local"]])
def test_every_count_is_checked_and_the_message_names_threads(home: Path, given: str, tier: list[str]) -> None:
    """Issue 45 item 18a: only the first count was checked (``1,100000`` ran 100,000 threads: SIGSEGV), digits of
    other scripts passed (``\u0661``, Arabic-Indic one, ran as 1 thread), and a first count over the limit was blamed
    on ``--determinism``. Every count: ASCII digits, 1 to training.threads' limit, one line naming --threads."""
    result = cli(home, "canary", *tier, "--threads", given)
    assert result.exit_code == 2, result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("octlm: error: --threads") and "--determinism" not in lines[0]
    assert "positive whole numbers up to 4,096" in lines[0] and "ASCII digits" in lines[0], lines
