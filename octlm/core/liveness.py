"""Whether the process behind a ``running`` run row still runs: pid plus the process's start time.

A pid alone is not an identity: the kernel reuses pids, so a run whose process died reads as live
for as long as some other process holds its old pid. ``start_time`` reads field 22 of
``/proc/<pid>/stat`` (clock ticks since boot; ``None`` where there is no ``/proc``), which
``Registry.start_run`` records beside the pid; a live pid with another start time is another process.
A row written on another host cannot be checked from here: it reads ``unknown (host X)``, never
``running`` forever; ``registry import`` and ``unpack`` store a ``running`` row so, since a row from another home
is never checkable here, whatever its host says; one whose host is this one reads ``crashed`` unless its pid and
start time show it alive. A row without a start time, where start times can be read, is not alive. Imports nothing
of octlm.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import Any, TypeVar, cast

Row = TypeVar("Row", bound=Mapping[str, Any])  # a row with status, host, pid and pid_start (a run's, a claim's)


def start_time(pid: int) -> int | None:
    """The start time of process ``pid`` in clock ticks since boot; None if gone or unknowable."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as handle:
            text = handle.read().decode("ascii", "replace")
        # The command name (field 2) is in parentheses and may itself hold spaces or ")".
        return int(text[text.rindex(")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # gone, or a pid no process can have
        return False
    except PermissionError:  # alive, but another user's
        return True
    return True


def alive(pid: int, recorded_start: int | None) -> bool:
    """Process ``pid`` runs and is still the same process. Where start times can be read (``/proc``), a row without
    one is not alive: octlm records it beside every pid, so such a row was written elsewhere (an import, an edit)."""
    if not pid_alive(pid):
        return False
    now = start_time(pid)
    if recorded_start is None:
        return now is None
    return now in (None, recorded_start)


def effective_status(row: Row) -> Row:
    """A ``running`` row as it really is: ``crashed`` when its process is gone (or its pid now names
    another process), ``unknown (host X)`` when it was written on another host."""
    host, pid = row.get("host"), row.get("pid")
    if str(row.get("status")).startswith("unknown (host ") and host == socket.gethostname():
        return _imported(row)  # imported from another home on this very host: checkable after all
    if row.get("status") != "running":
        return row
    if host != socket.gethostname():
        return _with_status(row, f"unknown (host {host or 'unrecorded'})")
    if not isinstance(pid, int) or pid <= 0:
        return _with_status(row, "crashed")
    if pid != os.getpid() and not alive(pid, row.get("pid_start")):
        return _with_status(row, "crashed")
    return row


def is_other_host(row: Mapping[str, object]) -> bool:
    return str(row.get("status", "")).startswith("unknown (host ")


def _imported(row: Row) -> Row:
    """An imported ``unknown (host <this host>)`` row: ``crashed`` unless its process can be shown alive (a pid with
    its start time); without a start time it never can."""
    pid = row.get("pid")
    if isinstance(pid, int) and pid > 0 and row.get("pid_start") is not None and alive(pid, row.get("pid_start")):
        return row
    return _with_status(row, "crashed")


def _with_status(row: Row, status: str) -> Row:
    """A copy of the row (of the same keys) with another status."""
    return cast(Row, {**row, "status": status})
