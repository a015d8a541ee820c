"""Whether the process behind a ``running`` run row still runs: pid plus the process's start time.

A pid alone is not an identity: the kernel reuses pids, so a run whose process died reads as live
for as long as some other process holds its old pid. ``start_time`` reads field 22 of
``/proc/<pid>/stat`` (clock ticks since boot; ``None`` where there is no ``/proc``), which
``Registry.start_run`` records beside the pid; a live pid with another start time is another process.
A row written on another host cannot be checked from here: it reads ``unknown (host X)``, never
``running`` forever; ``registry import`` and ``unpack`` store a ``running`` row so, since a row from another home
is never checkable here, whatever its host says. A row without a start time, where start times can be read, is not
alive. Imports nothing of octlm.
"""

from __future__ import annotations

import os
import socket
from typing import Any


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


def effective_status(row: dict[str, Any]) -> dict[str, Any]:
    """A ``running`` row as it really is: ``crashed`` when its process is gone (or its pid now names
    another process), ``unknown (host X)`` when it was written on another host."""
    if row.get("status") != "running":
        return row
    host, pid = row.get("host"), row.get("pid")
    if host != socket.gethostname():
        return {**row, "status": f"unknown (host {host or 'unrecorded'})"}
    if not isinstance(pid, int) or pid <= 0:
        return {**row, "status": "crashed"}
    if pid != os.getpid() and not alive(pid, row.get("pid_start")):
        return {**row, "status": "crashed"}
    return row


def is_other_host(row: dict[str, Any]) -> bool:
    return str(row.get("status", "")).startswith("unknown (host ")
