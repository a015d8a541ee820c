"""Keep freed host memory in the process instead of returning it to the OS after every step.

glibc serves every allocation above its mmap threshold (32 MiB at most) with a fresh ``mmap`` and
unmaps it on ``free``, so a training step that builds and frees the same large activations
page-faults through all of them again on every step. Measured on the day2 preset (fp32, 2 vCPUs):
75,000-140,000 minor page faults and 0.25-0.45 s of system time per step without this, under
8,000 and 0.05-0.09 s with it. The price: the heap never shrinks, so resident memory stays at its
peak, which a training process reaches in its first steps anyway (a full ``octlm train EXP-008``
peaked at 456 MB against 445 MB without this). Numerics are untouched.
"""

from __future__ import annotations

import ctypes
import os
import sys

M_TRIM_THRESHOLD = -1  # from glibc's malloc.h
M_MMAP_MAX = -4
_done: bool | None = None


def keep_freed_memory() -> bool:
    """Tell glibc's malloc never to mmap and never to trim; True when it took effect.

    A no-op off Linux, on a C library without ``mallopt`` (musl), or with ``OCTLM_SYSTEM_MALLOC=1``.
    """
    global _done
    if _done is not None:
        return _done
    _done = False
    if sys.platform != "linux" or os.environ.get("OCTLM_SYSTEM_MALLOC") == "1":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library this process already runs on
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _done = mallopt(M_MMAP_MAX, 0) == 1 and mallopt(M_TRIM_THRESHOLD, 2**31 - 1) == 1
    return _done
