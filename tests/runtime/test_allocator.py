"""The allocator policy, measured in real processes: freed memory is reused, not faulted in again."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = """
import resource, torch
from octlm.runtime.native.allocator import keep_freed_memory
on = keep_freed_memory()
for _ in range(30):  # warm-up: the heap grows to the pattern's working set, then stays
    torch.ones(16 << 20)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    torch.ones(16 << 20)  # 64 MiB allocated, written and freed, as a step's activations are
print(on, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def probe(**env: str) -> tuple[bool, int]:
    result = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, env={**os.environ, **env}
    )
    on, faults = result.stdout.split()
    return on == "True", int(faults)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt is Linux-only")
def test_freed_memory_is_reused_without_page_faults() -> None:
    on, faults = probe()
    off, system_faults = probe(OCTLM_SYSTEM_MALLOC="1")
    assert on and not off
    # With the system default every 64 MiB block is a fresh mmap: ~16,000 faults each (4 KiB pages).
    assert faults < 1000 and faults * 10 < system_faults, (faults, system_faults)
