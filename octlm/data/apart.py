"""Memory-hungry work in a short-lived child process, so that what it takes goes back to the OS.

Training a BPE tokenizer on a large corpus and encoding it hold hundreds of MB in the tokenizers
library's threads; in the training process that memory would stay resident for the whole run (freed
memory is kept for the steps: see ``allocator``). ``run_apart`` forks, runs the work in the child with a
reporter that sends each call (``phase``, ``note``, ``warn``) back through a pipe to the real reporter,
and returns the work's result (JSON-able). Only on Linux, where fork is safe before torch does any work.

Anything but success in the child (an error, a signal, no fork here) returns None: the caller then does
the work in its own process, as before, where an error surfaces with its own type and message. The child
dies with its parent (``PR_SET_PDEATHSIG``), so a killed training command leaves no child behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

from octlm.core.reporting import QuietReporter, Reporter

PR_SET_PDEATHSIG = 1  # from linux/prctl.h
FORWARDED = ("phase", "note", "warn")


class _PipeReporter(QuietReporter):
    """The child's reporter: each call becomes a JSON line on the pipe."""

    def __init__(self, pipe: Any, interactive: bool):
        self.pipe, self.interactive = pipe, interactive

    def _send(self, method: str, *args: Any) -> None:
        self.pipe.write(json.dumps({"call": method, "args": list(args)}) + "\n")
        self.pipe.flush()

    def phase(self, name: str, detail: str = "") -> None:
        self._send("phase", name, detail)

    def note(self, message: str) -> None:
        self._send("note", message)

    def warn(self, message: str, again: bool = False) -> None:
        self._send("warn", message, again)


def available() -> bool:
    return sys.platform == "linux" and hasattr(os, "fork") and os.environ.get("OCTLM_NO_FORK") != "1"


def run_apart(work: Callable[[Reporter], Any], reporter: Reporter) -> Any | None:
    """``work(reporter)`` in a forked child; its result, or None where it did not succeed there."""
    if not available():
        return None
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read)
        _child(work, write, reporter.interactive)
    os.close(write)
    try:
        result = _relay(read, reporter)
        _, status = os.waitpid(pid, 0)
    except BaseException:  # interrupted while waiting: the child goes too
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        raise
    return result if os.waitstatus_to_exitcode(status) == 0 else None


def _relay(read: int, reporter: Reporter) -> Any | None:
    result = None
    with os.fdopen(read, "r", encoding="utf-8") as pipe:
        for line in pipe:
            message = json.loads(line)
            if message.get("call") in FORWARDED:
                getattr(reporter, message["call"])(*message["args"])
            elif "result" in message:
                result = message["result"]
    return result


def _child(work: Callable[[Reporter], Any], write: int, interactive: bool) -> None:
    code = 1
    try:
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        with os.fdopen(write, "w", encoding="utf-8") as pipe:
            result = work(_PipeReporter(pipe, interactive))
            pipe.write(json.dumps({"result": result}) + "\n")
        code = 0
    except BaseException:  # the parent does the work itself and reports what goes wrong
        code = 1
    finally:
        os._exit(code)
