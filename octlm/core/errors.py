"""Domain errors and the exit codes they map to.

Every expected failure is one of these; the CLI prints its message as one line
on stderr and exits with its code, never with a traceback.
"""

from __future__ import annotations

CHECK_FAILED = 1
BAD_INPUT = 2
REFUSED = 3
DIVERGED = 4


class OctlmError(Exception):
    """An expected failure with a one-line, user-facing message. (A check that ran and failed
    is not an error: its command reports the verdict and exits CHECK_FAILED.)"""

    exit_code = CHECK_FAILED


class BadInput(OctlmError):
    """The user gave something octlm cannot use (file, key, argument)."""

    exit_code = BAD_INPUT


class ConfigError(BadInput):
    """A config file or override is malformed; the message names file and key."""


class Refused(OctlmError):
    """octlm refuses to act, to protect existing state (checkpoints, registry, locks)."""

    exit_code = REFUSED


class Diverged(OctlmError):
    """Training stopped at a step whose loss or gradient norm was not finite, or spiked under
    ``training.spike_guard: stop``; the checkpoints written before it are intact. Resuming would diverge again at
    the same step (training is deterministic): change the config (a lower learning rate, say) in a new experiment."""

    exit_code = DIVERGED


class Interrupted(OctlmError):
    """Stopped by a signal (SIGHUP, SIGINT or SIGTERM), after a checkpoint where one was being trained;
    exit 128 + the signal's number: 129, 130 or 143."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


class Relayed(OctlmError):
    """A rank other than 0 ends as rank 0 told it: it says nothing and exits 0, and rank 0's exit code is the
    command's (a rank that exits first with a failure code would have the launcher stop rank 0 mid-sentence)."""

    def __init__(self, exit_code: int):
        super().__init__(f"rank 0 ended the run with exit {exit_code}")
        self.exit_code = exit_code
