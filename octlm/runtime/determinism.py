"""The determinism profile of a process (``training.determinism``), torch-free.

``local`` changes nothing: bit-exact resume on one machine, as always. ``portable`` pins the CPU kernels torch
dispatches per processor, so that two x86-64 machines with AVX2 and the same torch release compute the same bits:
Intel MKL's code path (``MKL_CBWR``), ATen's vectorised kernels (``ATEN_CPU_CAPABILITY``) and oneDNN's
(``ONEDNN_MAX_CPU_ISA``). MKL and ATen read them when torch loads, so ``pin`` sets them before torch is
imported: the commands call it after loading the config and before importing anything that imports torch,
and every process they start (``verify-resume``'s segments, the ranks of ``--nproc``) inherits them. A process
that imported torch under other settings cannot be pinned any more: ``pin`` refuses (exit 3) rather than
train with kernels other than the profile's; run the command in a new process (``octlm ...``).

Canonical pieces (``training.micro_batches``) add MKL's strict reproducible mode to either profile
(``MKL_CBWR=AUTO,STRICT``, or ``AVX2,STRICT`` under portable): without it, MKL's sgemm splits a long inner
dimension between threads, so one process on 2 threads and two ranks on 1 thread each compute different bits
for the same piece (measured on day1's shape; docs/performance.md). It changes the bits of one thread too, so it
is never applied to a run without pieces.
"""

from __future__ import annotations

import os
import platform
import sys

from octlm.config import Config
from octlm.core.errors import Refused

# Measured on an AMD EPYC (AVX-512) with torch 2.13.0+cpu (docs/performance.md): ATEN_CPU_CAPABILITY changes
# the bits of softmax, SiLU, norms, fused AdamW and attention; MKL_CBWR=AVX2 pins the matmuls on an Intel
# processor with AVX-512 (MKL takes its AVX2 path on AMD already); ONEDNN_MAX_CPU_ISA costs nothing in fp32.
PORTABLE = {"MKL_CBWR": "AVX2", "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
PROFILES: dict[str, dict[str, str]] = {"local": {}, "portable": PORTABLE}
CAPABILITY = {"portable": "AVX2"}  # what torch.backends.cpu.get_cpu_capability() says under the profile


def settings(determinism: str, pieces: bool = False) -> dict[str, str]:
    """The environment a profile pins (nothing for ``local``); with canonical ``pieces``, MKL's strict mode too."""
    pinned = dict(PROFILES[determinism])
    if pieces:
        pinned["MKL_CBWR"] = pinned.get("MKL_CBWR", "AUTO") + ",STRICT"  # ?gemm's bits independent of threads
    return pinned


def describe(determinism: str) -> str:
    """``portable (MKL_CBWR=AVX2 ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2)``, or ``local``."""
    pinned = " ".join(f"{key}={value}" for key, value in settings(determinism).items())
    return f"{determinism} ({pinned})" if pinned else determinism


def unpinned(determinism: str, pieces: bool = False) -> dict[str, str]:
    """The settings of the profile this process's environment does not hold (empty: pinned)."""
    return {key: value for key, value in settings(determinism, pieces).items() if os.environ.get(key) != value}


def pin(config: Config) -> None:
    """Set the profile's environment before torch loads; refuse when torch is already loaded without it."""
    pieces = config.training.micro_batches > 0
    missing = unpinned(config.training.determinism, pieces)
    if not missing:
        return
    if "torch" in sys.modules:
        shown = " ".join(f"{key}={value}" for key, value in missing.items())
        what = "training.micro_batches" if pieces else f"training.determinism: {config.training.determinism}"
        raise Refused(
            f"{config.id or 'this config'}: {what} needs {shown} before torch is imported, "
            "and this process imported torch without them: run it as its own `octlm` command (a new process)"
        )
    os.environ.update(missing)


def processor() -> str:
    """The processor's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as file:
            for line in file:
                if line.startswith("model name") and ":" in line:
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
