"""Domain errors and the exit codes they map to.

Every expected failure is one of these; the CLI prints its message as one line
on stderr and exits with its code, never with a traceback.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass

OK = 0
CHECK_FAILED = 1
BAD_INPUT = 2
REFUSED = 3
DIVERGED = 4
TRIAL_FAILED = 5  # ``octlm work``: a trial it took in this call failed (recorded; the others went on)
SIGNALLED = 128  # a process stopped by signal N exits 128 + N (the shell's convention)
STOPPING = (signal.SIGHUP, signal.SIGINT, signal.SIGTERM)  # the signals a command stops for: 129, 130, 143
KILLED = SIGNALLED + signal.SIGKILL  # ``work --workers``: a worker was SIGKILLed (the out-of-memory killer's signal)


@dataclass(frozen=True)
class ExitCode:
    """One row of the exit codes: the code(s) as the scripting guide's table shows them, and what they mean in the
    words ``octlm -h`` uses (each row of the guide's table begins with them and goes on to say when)."""

    codes: str
    meaning: str


EXIT_CODES = (  # the one list: `octlm -h` (and so the command reference) says it, the scripting guide's table holds it
    ExitCode(str(OK), "ok"),
    ExitCode(str(CHECK_FAILED), "a check failed"),
    ExitCode(str(BAD_INPUT), "bad input"),
    ExitCode(str(REFUSED), "refused to protect existing state"),
    ExitCode(str(DIVERGED), "diverged"),
    ExitCode(str(TRIAL_FAILED), "a trial of the queue failed"),
    ExitCode(" / ".join(str(SIGNALLED + s) for s in STOPPING), "stopped by " + " / ".join(s.name for s in STOPPING)),
    ExitCode(str(KILLED), "a sweep worker was killed"),
)


def exit_codes_said() -> str:
    """The exit codes in one sentence, as ``octlm -h`` ends: ``0 ok, 1 a check failed, ...``."""
    return ", ".join(f"{row.codes.replace(' / ', '/')} {row.meaning.replace(' / ', '/')}" for row in EXIT_CODES)


class OctlmError(Exception):
    """An expected failure with a one-line, user-facing message. (A check that ran and failed
    is not an error: its command reports the verdict and exits CHECK_FAILED.)"""

    exit_code = CHECK_FAILED


class BadInput(OctlmError):
    """The user gave something octlm cannot use (file, key, argument)."""

    exit_code = BAD_INPUT


class ConfigError(BadInput):
    """A config file or override is malformed; the message names file and key."""


class InExperimentFile(BadInput):
    """Bad input said with the experiment's file first (``experiments/ID.yaml: ...``), so that a caller that names
    the file leaves it as it is: recognized by its type, never by how its message begins."""


class Refused(OctlmError):
    """octlm refuses to act, to protect existing state (checkpoints, registry, locks)."""

    exit_code = REFUSED


class BeingTrained(Refused):
    """The experiment is already being trained: another process holds its lock. A sweep's worker passes such a trial
    over (busy: queued again) where any other refusal fails it; by this type, never by the message's words, which
    quote the holder and paths the user chose."""


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
