"""Process and machine policy, decided before torch does any work: the device, whether
``torch.compile`` can run here, deterministic kernels, the determinism profile's checks and thread count, and
the allocator."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import platform
import shutil
from collections.abc import Mapping

import torch

from octlm.config import Config
from octlm.config.tiers import TIERS, Tier
from octlm.core.errors import BadInput, ConfigError, Refused
from octlm.core.provenance import __version__
from octlm.core.records import Environment
from octlm.core.reporting import Reporter
from octlm.runtime import determinism, lean, load
from octlm.runtime.native import allocator


def _mps_available() -> bool:
    return getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()


def select_device(name: str) -> torch.device:
    """``training.device``: auto (cuda, else mps, else cpu) or a device that must exist here."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        return torch.device("mps") if _mps_available() else torch.device("cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise BadInput("training.device: cuda was asked for but no CUDA device is available; use auto or cpu")
    if name == "mps" and not _mps_available():
        raise BadInput("training.device: mps was asked for but is not available; use auto or cpu")
    return torch.device(name)


def compile_problem(device: torch.device) -> str | None:
    """Why ``torch.compile`` cannot run on ``device`` here, or None."""
    if device.type == "cpu" and not any(shutil.which(name) for name in ("c++", "g++", "clang++")):
        return "torch.compile needs a C++ compiler (c++, g++ or clang++) on PATH on a CPU"
    if device.type == "cuda" and importlib.util.find_spec("triton") is None:
        return "torch.compile needs Triton on a GPU (pip install triton)"
    if device.type not in ("cpu", "cuda"):
        return f"torch.compile is not supported by octlm on {device.type}"
    return None


def require_compile(device: torch.device) -> None:
    """Refuse ``training.compile`` where it cannot run: one line (exit 2) before a run starts,
    instead of a traceback at the first step."""
    problem = compile_problem(device)
    if problem:
        raise ConfigError(f"training.compile: {problem}; or set training.compile: false")


def device_for(config: Config) -> torch.device:
    """The device a run will use; refuses what cannot run here before anything is changed. A rank of a
    data-parallel run on GPUs uses the GPU its process group chose (``distributed``: by local rank)."""
    device = select_device(config.training.device)
    if device.type == "cuda" and torch.distributed.is_available() and torch.distributed.is_initialized():
        device = torch.device("cuda", torch.cuda.current_device())
    if config.training.compile:
        require_compile(device)
    tier = config.training.determinism
    if tier != "local" and device.type == "cpu" and config.training.precision != "fp32":
        raise ConfigError(
            f"training.precision: {config.training.precision} on a CPU is not covered by training.determinism: "
            f"{tier} (its kernels were not measured to agree across processors); use fp32, or determinism: local"
        )
    return device


def configure_determinism(device: torch.device, compiled: bool = False) -> None:
    """Deterministic kernels everywhere; on CUDA also what that requires; without torch's compiler loaded where the
    process never compiles (``lean``)."""
    if device.type == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    lean.lean(compiled)
    if device.type == "cpu":
        # Deterministic mode also fills every new tensor's memory before a kernel writes it (NaN for floats), so
        # that a kernel reading memory it never wrote gives the same bits every time. ATen's CPU kernels write
        # every element of what they allocate, so on a CPU the fill changes no bit (the golden canaries, the
        # checkpoint digests and EXP-008's next-batch loss are the same without it) and costs a pass over memory
        # per allocation: 145 of the 188 fills of a day1 step, about 2% of its CPU time. A GPU keeps it.
        torch.utils.deterministic.fill_uninitialized_memory = False  # type: ignore[attr-defined]


def require_profile(config: Config) -> None:
    """Refuse to train under a profile this process does not hold (torch loaded before ``determinism.pin``, or a
    processor without the profile's instruction set)."""
    profile = config.training.determinism
    wanted = TIERS[profile].capability
    determinism.pin(config)  # torch is loaded here: refuses unless the profile is held
    if wanted and torch.backends.cpu.get_cpu_capability() != wanted:
        have = torch.backends.cpu.get_cpu_capability()
        raise BadInput(f"training.determinism: {profile} needs a processor with {wanted}; this one runs {have}")


def thread_invariant(config: Config) -> bool:
    """Whether the step's bits do not depend on the thread count: canonical pieces under a tier whose MKL branch is
    strict (every tier but ``portable``; ``tests/train/test_thread_invariance.py``)."""
    return config.training.micro_batches > 0 and TIERS[config.training.determinism].strict_with_pieces


_TAKEN: list[load.Choice] = []  # the threads this process took from the free cores (once)


def set_threads(config: Config, recorded: int | None = None) -> None:
    """``training.threads`` when set; else, where the count does not change the bits (``thread_invariant``) and
    ``OMP_NUM_THREADS`` is unset, the cores free at this start (measured once per process: ``threads_taken``);
    else, under a tier that pins kernels, the count a resumed checkpoint ``recorded``."""
    if _free_to_choose(config):
        if not _TAKEN:
            _TAKEN.append(load.free_threads())
        wanted: int | None = _TAKEN[0].threads
    else:
        wanted = config.training.threads or (recorded if TIERS[config.training.determinism].pins_kernels else None)
    if wanted and wanted != torch.get_num_threads():
        torch.set_num_threads(wanted)


def _free_to_choose(config: Config) -> bool:
    """Whether this process takes its threads from the free cores (``set_threads``)."""
    return not config.training.threads and thread_invariant(config) and not os.environ.get("OMP_NUM_THREADS")


def threads_taken() -> load.Choice | None:
    """The threads this process took from the free cores (``set_threads``), if it did."""
    return _TAKEN[0] if _TAKEN else None


def threads_came(config: Config) -> str:
    """How this process's thread count came where it cannot change the bits (``thread_invariant``): ``chosen`` from
    the free cores (``set_threads``), else ``asked``; "" where it can (``load.oversubscribed``'s remedy)."""
    return ("chosen" if _free_to_choose(config) else "asked") if thread_invariant(config) else ""


def prepare_process(config: Config) -> torch.device:
    """Everything a training process decides once, first: device, profile, threads, determinism, allocator."""
    load.begin()  # what other processes do from here to the first step (the busy-box warning)
    device = device_for(config)
    require_profile(config)
    set_threads(config)
    configure_determinism(device, config.training.compile)
    allocator.keep_freed_memory()
    return device


def environment(
    device: torch.device, precision: str, optimizer_impl: str, *, profile: str = "local", canary: str | None = None
) -> Environment:
    """The environment record: what a checkpoint records of the process and machine that wrote it, compared on
    resume (``environment_warnings``, ``check_environment``). Under a profile other than ``local`` it names the
    profile and the canary's digest (``canary.environment`` computes it)."""
    record: Environment = {
        "octlm": __version__,
        "torch": str(torch.__version__),
        "python": platform.python_version(),
        "platform": f"{platform.system()}-{platform.machine()}",
        "device": device.type,
        "dtype": precision,
        "threads": torch.get_num_threads(),
        "optimizer": optimizer_impl,
        "processor": determinism.processor(),
        "kernels": determinism.kernel_settings(),
    }
    if TIERS[profile].pins_kernels:
        record["determinism"], record["canary"] = determinism.describe(profile), canary
    return record


AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=AUTOCAST[precision])


def check_environment(
    saved: Mapping[str, object], current: Mapping[str, object], name: str, reporter: Reporter, pieces: bool = False
) -> None:
    """Before loading: under a tier that pins kernels, whether this machine agrees with the one that wrote
    checkpoint ``name`` (their canaries, and which tier would have made the move exact); then every difference
    that may make the resume inexact (with canonical ``pieces``, whose kernels are pinned to be thread-invariant,
    a different thread count is not one, except under ``portable``, whose MKL branch has no strict mode)."""
    if "canary" in current:
        if saved.get("canary") == current["canary"]:
            reporter.note(f"this machine agrees with the one that wrote {name} (canary {current['canary']})")
        else:
            there = saved.get("canary") or "none recorded"
            reporter.warn(
                f"this machine does not agree with the one that wrote {name} (canary {current['canary']} here, "
                f"{there} there): the resume will not be bit-identical{_remedy(saved, current)}"
            )
    if pieces and _tier_of(current).strict_with_pieces:
        saved, current = {**saved, "threads": None}, {**current, "threads": None}
    _check_kernels(saved, current, name, reporter)
    _check_intel_path(saved, current, name, reporter)
    for message in environment_warnings(saved, current):
        reporter.warn(message)


def _check_kernels(saved: Mapping[str, object], current: Mapping[str, object], name: str, reporter: Reporter) -> None:
    """The variables that change the kernels (``determinism.KERNEL_VARIABLES``), as set when ``name`` was written
    and now: under ``local`` a difference is warned of; under a tier that pins kernels it is refused (exit 3). A
    checkpoint from before they were recorded is not compared."""
    if "kernels" not in saved:
        return
    there, here = determinism.parse_kernels(saved.get("kernels")), determinism.parse_kernels(current.get("kernels"))
    changed = [key for key in sorted(set(there) | set(here)) if there.get(key) != here.get(key)]
    if not changed:
        return
    shown = ", ".join(f"{key} {there.get(key) or 'unset'} -> {here.get(key) or 'unset'}" for key in changed)
    if "canary" in current:
        raise Refused(
            f"{name} was written under other kernel settings ({shown}): under training.determinism "
            f"{current.get('determinism')} the resume would not be bit-identical; set them as they were"
        )
    reporter.warn(
        f"resuming under other kernel settings ({shown}) than {name} was written under: the run continues, but not "
        "bit-identically; set them as they were before the run starts"
    )


INTERPOSED = "Intel (interposed)"  # the MKL path of a process where a library tells MKL the processor is Intel


def _check_intel_path(
    saved: Mapping[str, object], current: Mapping[str, object], name: str, reporter: Reporter
) -> None:
    """Whether MKL was told that the processor is Intel (``cross-vendor``'s library, or one preloaded) when ``name``
    was written and now: on any other processor its kernels differ, so a difference is warned of under ``local`` and
    refused (exit 3) under a tier that pins kernels, as the kernel variables are. A checkpoint that did not record
    MKL's path is not compared."""
    if "mkl" not in saved:
        return
    there, here = saved.get("mkl") == INTERPOSED, current.get("mkl") == INTERPOSED
    if there == here:
        return
    told = "told" if there else "not told"
    shown = f"MKL was {told} that the processor is Intel when {name} was written, and is{' not' if there else ''} now"
    why = "a library tells it so under training.determinism: cross-vendor, or one named in LD_PRELOAD"
    if "canary" in current:
        raise Refused(
            f"{shown} ({why}): under training.determinism {current.get('determinism')} the resume would not be "
            "bit-identical; start it as the run was started"
        )
    reporter.warn(
        f"{shown} ({why}): its kernels differ on a processor that is not Intel, so the run continues, but not "
        "bit-identically; start it as the run was started"
    )


def _remedy(saved: Mapping[str, object], current: Mapping[str, object]) -> str:
    """Which tier would have made a move between these machines exact, when one would."""
    there, here = saved.get("mkl"), current.get("mkl")
    if there and here and there != here and _tier_of(saved).pins_kernels and not _tier_of(saved).across_vendors:
        across = " or ".join(tier.name for tier in TIERS.values() if tier.across_vendors)
        return f" (MKL ran its {there} path there, {here} here: training.determinism: {across} covers both vendors)"
    return ""


def _tier_of(record: Mapping[str, object]) -> Tier:
    """The tier an environment record names (``portable (MKL_CBWR=...)``; none: ``local``)."""
    return TIERS.get(str(record.get("determinism") or "local").split(" ")[0], TIERS["local"])


PINNED = ("torch", "python", "platform", "device", "dtype", "threads", "optimizer", "determinism")
WHY = {
    "torch": "each torch release has kernels of its own",
    "device": "another device runs other kernels",
    "threads": "sums split across threads add up in another order",
    "determinism": "the profiles pin different kernels",
    "processor": "the local tier's kernels are chosen per processor; training.determinism: vendor pins them for "
    "one vendor's processors, portable for Intel and AMD alike",
}


def environment_warnings(saved: Mapping[str, object], current: Mapping[str, object]) -> list[str]:
    """The differences between the environment a checkpoint recorded and this one that may change the bits. Under
    a tier that pins kernels (both sides), the processor is not one of them (the canary speaks for it); a GPU
    always is."""
    portable = "canary" in current and "canary" in saved
    keys = PINNED if portable or "processor" not in saved else (*PINNED, "processor")
    changed = [key for key in keys if saved.get(key) != current.get(key)]
    lines = []
    if changed:
        shown = ", ".join(f"{key} {saved.get(key)} -> {current.get(key)}" for key in changed)
        reasons = "; ".join(WHY[key] for key in changed if key in WHY)
        lines.append(
            f"resuming in a different environment ({shown}): the run continues, but bit-exact resume is promised "
            "only on one torch release, platform, device and thread count" + (f" ({reasons})" if reasons else "")
        )
    if portable and current.get("device") != "cpu":
        lines.append(
            f"the determinism tiers pin CPU kernels only: on {current.get('device')} the resume may not be exact"
        )
    return lines


def peak_rss() -> int | None:
    """This process's peak resident memory, in bytes (None where ``resource`` is missing)."""
    try:
        import resource
    except ImportError:
        return None
    scale = 1 if platform.system() == "Darwin" else 1024  # ru_maxrss is in bytes on macOS, KiB on Linux
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * scale


BF16_PROBE = 256  # the square products bf16_over_fp32 times: some 10 ms on 2 cores; 0.1 s where bf16 is emulated
BF16_SLOWER = 0.9  # below this share of fp32's rate, bf16 is said to be slower here


def bf16_over_fp32(size: int = BF16_PROBE, repeats: int = 3) -> float:
    """bf16 matrix products' rate over fp32's on this CPU, as ``bench`` measures its matmul peaks but shorter: the
    median of ``repeats`` products of ``size`` x ``size`` each (after one to warm up). Draws from no random stream
    of the run (its operands come from a generator of their own)."""
    import statistics
    import time

    generator = torch.Generator().manual_seed(0)
    seconds = {}
    for dtype in (torch.float32, torch.bfloat16):
        a, b = (torch.rand(size, size, generator=generator).to(dtype) for _ in range(2))
        torch.mm(a, b)
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            torch.mm(a, b)
            times.append(time.perf_counter() - started)
        seconds[dtype] = statistics.median(times)
    return seconds[torch.float32] / seconds[torch.bfloat16]


def bf16_warning(config: Config, device: torch.device, ratio: float | None = None) -> str | None:
    """One line when a run asks for bf16 on a CPU whose bf16 products are slower than its fp32 ones (``ratio``:
    bf16's rate over fp32's, measured now when not given); None otherwise. A CPU without bf16 instructions (AVX-512
    BF16, AMX), or an environment that keeps oneDNN from them (``ONEDNN_MAX_CPU_ISA``), emulates them: autocast then
    costs more than it saves. (The tiers that pin kernels refuse bf16 on a CPU before this.)"""
    if config.training.precision != "bf16" or device.type != "cpu":
        return None
    ratio = bf16_over_fp32() if ratio is None else ratio
    if ratio >= BF16_SLOWER:
        return None
    isa = os.environ.get("ONEDNN_MAX_CPU_ISA")
    why = f" with ONEDNN_MAX_CPU_ISA={isa} in the environment" if isa else " on this CPU"
    return (
        f"bf16 matrix products run at {ratio:.2f}x the rate of fp32's{why}, measured at start: "
        "training.precision fp32 trains faster here (octlm bench --precision fp32,bf16 compares the two steps)"
    )
