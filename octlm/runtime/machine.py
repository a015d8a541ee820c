"""Process and machine policy, decided before torch does any work: the device, whether
``torch.compile`` can run here, deterministic kernels, the determinism profile's checks and thread count, and
the allocator."""

from __future__ import annotations

import importlib.util
import os
import platform
import shutil
from typing import Any

import torch

from octlm import __version__
from octlm.config import Config
from octlm.core.errors import BadInput, ConfigError
from octlm.runtime import allocator, determinism


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
    if config.training.determinism == "portable" and device.type == "cpu" and config.training.precision != "fp32":
        raise ConfigError(
            f"training.precision: {config.training.precision} on a CPU is not portable (its kernels were not "
            "measured to agree across processors); use fp32, or training.determinism: local"
        )
    return device


def configure_determinism(device: torch.device) -> None:
    """Deterministic kernels everywhere; on CUDA also what that requires."""
    if device.type == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    torch.use_deterministic_algorithms(True)


def require_profile(config: Config) -> None:
    """Refuse to train under a profile this process does not hold (torch loaded before ``determinism.pin``, or a
    processor without the profile's instruction set)."""
    profile = config.training.determinism
    missing, wanted = determinism.unpinned(profile), determinism.CAPABILITY.get(profile)
    if missing:
        determinism.pin(config)  # refuses: torch is loaded here
    if wanted and torch.backends.cpu.get_cpu_capability() != wanted:
        have = torch.backends.cpu.get_cpu_capability()
        raise BadInput(f"training.determinism: {profile} needs a processor with {wanted}; this one runs {have}")


def set_threads(config: Config, recorded: int | None = None) -> None:
    """``training.threads`` when set; else, under portable, the count a resumed checkpoint ``recorded``."""
    wanted = config.training.threads or (recorded if config.training.determinism == "portable" else None)
    if wanted and wanted != torch.get_num_threads():
        torch.set_num_threads(wanted)


def prepare_process(config: Config) -> torch.device:
    """Everything a training process decides once, first: device, profile, threads, determinism, allocator."""
    device = device_for(config)
    require_profile(config)
    set_threads(config)
    configure_determinism(device)
    allocator.keep_freed_memory()
    return device


def environment(device: torch.device, precision: str, optimizer_impl: str) -> dict[str, Any]:
    """What a checkpoint records of the process that wrote it (compared on resume); the processor's name and,
    under portable, the profile and the canary are added by ``canary.environment``."""
    return {
        "octlm": __version__,
        "torch": str(torch.__version__),
        "python": platform.python_version(),
        "platform": f"{platform.system()}-{platform.machine()}",
        "device": device.type,
        "dtype": precision,
        "threads": torch.get_num_threads(),
        "optimizer": optimizer_impl,
    }
