"""The launcher's one line when ranks fail: the rank that was killed first is named, not the lowest rank killed.

Found in a full run of the suite (2026-12-04, a loaded box): rank 1 was SIGKILLed, rank 0 did not stop within the
elastic agent's 30 s of grace after its SIGTERM and was SIGKILLed in turn, and the command said "rank 0 was killed by
SIGKILL". torch records when it saw each failure (whole seconds); the first one is the cause."""

from __future__ import annotations

import signal

import pytest

from octlm.core.errors import Interrupted
from octlm.runtime import launch

KILL, TERM = -signal.SIGKILL, -signal.SIGTERM


def said(failures: dict[int, tuple[int, int]]) -> tuple[str, int]:
    with pytest.raises(Interrupted) as raised:
        launch._exit_code(failures)
    return str(raised.value), raised.value.exit_code


def test_the_rank_killed_first_is_named_when_the_launcher_killed_another_after_its_grace() -> None:
    assert said({0: (KILL, 1_000_031), 1: (KILL, 1_000_000)}) == (
        "rank 1 was killed by SIGKILL; the other ranks were stopped: resume from the newest checkpoint",
        128 + signal.SIGKILL,
    )


def test_ranks_killed_in_the_same_second_name_the_lowest_and_the_launchers_sigterm_is_no_cause() -> None:
    assert said({3: (-signal.SIGSEGV, 7), 2: (KILL, 7), 0: (TERM, 5)})[0].startswith("rank 2 was killed by SIGKILL")
    assert said({1: (-signal.SIGSEGV, 9), 0: (TERM, 7)})[1] == 128 + signal.SIGSEGV


def test_ranks_that_ended_with_codes_of_their_own_give_the_lowest_ranks_code() -> None:
    assert launch._exit_code({1: (3, 4), 0: (1, 5)}) == 1
    assert launch._exit_code({1: (TERM, 4), 0: (TERM, 4)}) == 128 + signal.SIGTERM
