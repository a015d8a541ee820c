"""Many experiments: the ``octlm sweep`` group (``sweep``: new, status, extend, retry, pack, unpack) and the queue's
workers with the live view (``work``: ``octlm work``, ``octlm watch``). Torch-free at import. ``COMMANDS`` and
``SWEEP_COMMANDS`` are what the app registers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from octlm.cli.commands.sweeps import sweep, work

COMMANDS: dict[str, Callable[..., Any]] = {"work": work.work, "watch": work.watch}
SWEEP_COMMANDS: dict[str, Callable[..., Any]] = {
    "new": sweep.sweep_new,
    "status": sweep.sweep_status,
    "extend": sweep.sweep_extend,
    "retry": sweep.sweep_retry,
    "pack": sweep.sweep_pack,
    "unpack": sweep.sweep_unpack,
}
