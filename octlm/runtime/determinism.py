"""The determinism tiers of a process (``training.determinism``), torch-free.

``local`` changes nothing: bit-exact resume on one machine, as always. The other tiers pin the CPU kernels torch
dispatches per processor: Intel MKL's code path (``MKL_CBWR``), ATen's vectorised kernels
(``ATEN_CPU_CAPABILITY``) and oneDNN's (``ONEDNN_MAX_CPU_ISA``). Which machines then agree was measured under
emulation (qemu-user: Intel Haswell, Skylake-Client and Skylake-Server, AMD EPYC-Rome and EPYC-Milan, and this
project's Intel Xeon and AMD EPYC natively; docs/performance.md):

* ``portable``: MKL's COMPATIBLE branch, the one branch MKL honours on every vendor's processor (on AMD it
  ignores every other one and runs its Zen kernels). Any x86-64 processor with AVX2, Intel or AMD, at the
  same torch release and thread count. It costs 2-3x ``local``'s step on CPU.
* ``vendor``: MKL's strict AVX2 branch. On Intel it agrees at any thread count; on AMD MKL runs its Zen path,
  which agrees across Zen generations. Processors of one vendor only, at about 1.2-1.4x ``local``.
* ``cross-vendor``: ``vendor``'s pins, with MKL told that every processor is an Intel one (``native/mkl``, loaded
  by ``pin`` before torch), so AMD runs Intel's AVX2 kernels too: Intel and AMD alike at ``vendor``'s cost on
  Intel. Each run checks its canary against the tier's golden digest at start (``train.canary.require_golden``).

MKL and ATen read the variables when torch loads, so ``pin`` sets them before torch is imported: the commands
call it after loading the config and before importing anything that imports torch, and every process they start
(``verify-resume``'s segments, the ranks of ``--nproc``) inherits them (not the library: each of those pins its
tier itself, and loads it then, from the folder it checks). A process that imported torch under
other settings cannot be pinned any more: ``pin`` refuses (exit 3) rather than train with kernels other than
the tier's; run the command in a new process (``octlm ...``).

Canonical pieces (``training.micro_batches``) need MKL's strict reproducible mode: without it, MKL's sgemm splits
a long inner dimension between threads, so one process on 2 threads and two ranks on 1 thread each compute
different bits for the same piece (measured on day1's shape; docs/performance.md). ``local`` then pins
``MKL_CBWR=AUTO,STRICT`` (it changes the bits of one thread too, so never without pieces); ``vendor`` is strict
already; ``portable``'s COMPATIBLE branch has no strict mode (measured: its bits agree at 1, 2 and 4 threads and
differ at 3), so under ``portable`` a resume still compares the thread count.
"""

from __future__ import annotations

import os
import platform
import re
import sys
from collections.abc import Mapping
from pathlib import Path

from octlm.config import Config
from octlm.config.tiers import TIERS, Tier
from octlm.core.errors import Refused
from octlm.runtime.native import mkl

VARIABLES = tuple(dict.fromkeys(key for tier in TIERS.values() for key in tier.pins))  # every variable a tier pins
# Every variable that changes which kernels torch, MKL and oneDNN run (a tier pins the first three): recorded by each
# checkpoint, compared on resume (``machine.check_environment``).
KERNEL_VARIABLES = (*VARIABLES, "MKL_ENABLE_INSTRUCTIONS", "MKL_DEBUG_CPU_TYPE", "DNNL_MAX_CPU_ISA")


def kernel_settings() -> str:
    """The kernel variables set in this process's environment (the user's, or a tier's pins), as the environment
    record keeps them: ``MKL_CBWR=AUTO,STRICT ATEN_CPU_CAPABILITY=avx2`` (empty: none)."""
    return " ".join(f"{key}={os.environ[key]}" for key in KERNEL_VARIABLES if os.environ.get(key))


def parse_kernels(text: object) -> dict[str, str]:
    """``kernel_settings``' text back as {variable: value}."""
    pairs = (item.partition("=") for item in str(text or "").split())
    return {key: value for key, _, value in pairs if key}


def without_pins(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without any tier's pins, MKL's Intel path among them: for a process that pins its own."""
    env = {key: value for key, value in environ.items() if key not in VARIABLES}
    entries = re.split(r"[ :]", env.pop("LD_PRELOAD", ""))  # as the loader splits them
    preload = [path for path in entries if path and not path.endswith(mkl.NAME)]
    return env | ({"LD_PRELOAD": " ".join(preload)} if preload else {})


def settings(determinism: str, pieces: bool = False) -> dict[str, str]:
    """The environment a tier pins (nothing for ``local``); with canonical ``pieces``, MKL's strict mode too."""
    pinned = dict(TIERS[determinism].pins)
    if pieces and not pinned:
        pinned["MKL_CBWR"] = "AUTO,STRICT"  # ?gemm's bits independent of threads (vendor is strict already)
    return pinned


def describe(determinism: str) -> str:
    """``portable (MKL_CBWR=COMPATIBLE ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2)``, or ``local``."""
    pinned = " ".join(f"{key}={value}" for key, value in settings(determinism).items())
    return f"{determinism} ({pinned})" if pinned else determinism


def unpinned(determinism: str, pieces: bool = False) -> dict[str, str]:
    """The settings of the profile this process's environment does not hold (empty: pinned)."""
    return {key: value for key, value in settings(determinism, pieces).items() if os.environ.get(key) != value}


def pin(config: Config) -> None:
    """Set the profile's environment (and, under ``cross-vendor``, load MKL's Intel path) before torch loads;
    refuse when torch is already loaded without it."""
    pieces, tier = config.training.micro_batches > 0, TIERS[config.training.determinism]
    missing = unpinned(tier.name, pieces)
    shim = tier.mkl_intel and mkl.loaded() is None
    if not missing and not shim:
        return
    if "torch" in sys.modules:
        shown = " ".join([*(f"{key}={value}" for key, value in missing.items()), *(["MKL's Intel path"] * shim)])
        what = "training.micro_batches" if pieces else f"training.determinism: {tier.name}"
        raise Refused(
            f"{config.id or 'this config'}: {what} needs {shown} before torch is imported, and this process "
            "imported torch without them: run it as its own `octlm` command (a new process)"
        )
    if shim:
        _load_intel_path(tier)
    os.environ.update(missing)
    _PINNED_HERE.update(missing)


def _load_intel_path(tier: Tier) -> None:
    """MKL's Intel path for ``tier`` (``runtime/native/mkl``), or one line naming the tier's fallback."""
    try:
        _INTEL_PATH_HERE.append(mkl.load())
    except mkl.Unavailable as why:
        raise Refused(
            f"training.determinism: {tier.name} cannot run here: {why}; training.determinism: {tier.fallback} "
            "covers the same machines without it, at a higher cost"
        ) from None


_PINNED_HERE: dict[str, str] = {}  # what ``pin`` set in this process (not what the user exported)
_INTEL_PATH_HERE: list[Path] = []  # the library ``pin`` loaded in this process (it cannot be unloaded)


def pinned_here() -> list[str]:
    """The variables ``pin`` set in this process (a worker starting afresh drops them: ``sweeps.worker.restart``)."""
    return list(_PINNED_HERE)


def foreign(config: Config) -> list[str]:
    """What ``pin`` set or loaded in this process that ``config``'s profile does not hold (a variable it pins
    otherwise or not at all, MKL's Intel path it does not take): a process holding any cannot train ``config``
    as its profile says, and no ``pin`` can undo them once torch runs with them (a sweep's worker starts
    afresh: ``sweeps.worker``). What the user exported is the user's: not counted."""
    tier = TIERS[config.training.determinism]
    wanted = settings(tier.name, config.training.micro_batches > 0)
    found = [key for key, value in _PINNED_HERE.items() if wanted.get(key) != value]
    return [*found, *(["MKL's Intel path"] if _INTEL_PATH_HERE and not tier.mkl_intel else [])]


def covers(determinism: str, path: str = "") -> str:
    """Which machines continue each other's runs under the tier (its ``covers`` line, MKL's ``path`` named)."""
    return TIERS[determinism].covers.format(vendor=f"its {path} path (as here)" if path else "this processor's")


def vendor() -> str:
    """The processor's vendor as ``/proc/cpuinfo`` says (``GenuineIntel``, ``AuthenticAMD``; under qemu-user the
    host's: MKL's own answer, ``canary.mkl_path``, is the emulated one's), else ``unknown``."""
    return _cpuinfo("vendor_id") or "unknown"


def _cpuinfo(key: str) -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as file:
            for line in file:
                if line.startswith(key) and ":" in line:
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def processor() -> str:
    """The processor's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    return _cpuinfo("model name") or platform.processor() or platform.machine()
