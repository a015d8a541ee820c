"""A process that never compiles need not load torch's compiler. ``torch.use_deterministic_algorithms`` imports
Inductor to set its flag too, and the optimizer's ``add_param_group``, ``state_dict``, ``load_state_dict``,
``zero_grad`` and ``step`` import ``torch._dynamo`` on their first call, to wrap themselves against tracing: about
1.2 s of imports (sympy among them) in every training process, a third of a small run's start (measured here: an
eager ``octlm resume`` of a tiny experiment, 3.3 s with them). Outside a compiled region those wrappers do nothing,
so an eager process (``lean``, before its optimizer is built) sets ATen's deterministic switch alone, gives each
wrapped optimizer method its own function as the "disabled" one the wrapper caches (``__dynamo_disable``), and
steps with the optimizer's own step function under ``torch.no_grad`` (``step``), as its wrapper does. The same
kernels run in the same order: the bits are the same (the golden digests and every resume test hold it). A
compiled process, or a torch whose wrappers are not where this expects them, gets torch as it is.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch

_RAW_STEP: dict[type, Callable[..., Any]] = {}  # optimizer class -> its step unwrapped, once ``lean`` has run
_LEAN: list[bool] = []


def lean(compiled: bool) -> None:
    """Deterministic kernels, without torch's compiler where the process never compiles (see the module)."""
    switch = getattr(torch._C, "_set_deterministic_algorithms", None)
    probe = _disable_probe()
    if compiled or switch is None or probe is None:
        torch.use_deterministic_algorithms(True)
        return
    switch(True, warn_only=False)
    for function in vars(torch.optim.Optimizer).values():
        raw = getattr(function, "__wrapped__", None)
        if raw is not None and getattr(function, "__code__", None) is probe and not hasattr(raw, "__dynamo_disable"):
            raw.__dynamo_disable = raw  # what the wrapper would build with torch._dynamo, outside tracing: itself
    _LEAN.append(True)


def _disable_probe() -> Any:
    """The code object of ``torch._disable_dynamo``'s wrapper (None: this torch has none)."""
    try:
        from torch._compile import _disable_dynamo
    except ImportError:
        return None
    return getattr(_disable_dynamo(lambda: None), "__code__", None)


def step(optimizer: torch.optim.Optimizer) -> None:
    """``optimizer.step()``: in a lean process its own step function, under ``no_grad`` as its wrapper runs it."""
    if not _LEAN:
        optimizer.step()
        return
    kind = type(optimizer)
    if kind not in _RAW_STEP:
        _RAW_STEP[kind] = inspect.unwrap(kind.step)
    with torch.no_grad():
        _RAW_STEP[kind](optimizer)
