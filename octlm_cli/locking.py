"""One writer per experiment: an advisory ``flock`` on ``checkpoints/<ID>/lock``.

The kernel drops the lock when its holder dies, so a lock left by a dead process never
blocks; the file's text (pid and host) only serves the refusal message.
"""

from __future__ import annotations

import fcntl
import os
import socket
from pathlib import Path
from typing import IO

from .errors import Refused


class ExperimentLock:
    def __init__(self, folder: Path, experiment_id: str):
        self.path = folder / "lock"
        self.experiment_id = experiment_id
        self.handle: IO[str] | None = None

    def __enter__(self) -> ExperimentLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            handle.close()
            raise Refused(
                f"{self.experiment_id} is already being trained by {holder}: "
                "wait for it to finish or stop it (SIGTERM checkpoints and exits)"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} on {socket.gethostname()}")
        handle.flush()
        self.handle = handle
        return self

    def __exit__(self, *exc: object) -> None:
        if self.handle is not None:
            self.handle.truncate(0)
            fcntl.flock(self.handle, fcntl.LOCK_UN)
            self.handle.close()
            self.handle = None
