"""What a step may not do: diverge, or (when asked) spike.

Before the optimizer applies a step, ``StepGuard.check`` reads the step's loss and gradient norm (one host sync,
which on a CPU costs nothing): a non-finite loss, or a non-finite gradient norm outside fp16 (where the gradient
scaler skips such a step by design), stops the run at once with ``Diverged`` (exit 4), before the update and before
any checkpoint, so the newest checkpoint is the last good state. With ``training.spike_guard`` on, a loss or
gradient norm more than ``spike_sigma`` standard deviations above the mean of the last ``spike_window`` steps
stops the run (``stop``) or leaves that step's update out (``skip``: the batch is read, the step counted, the
weights and optimizer moments unchanged). The window and the skipped steps are part of the training state, in
every checkpoint, so a resume decides exactly as the uninterrupted run did.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import torch

from octlm.config import TrainingConfig
from octlm.core.errors import Diverged
from octlm.core.reporting import counted


@dataclass
class StepGuard:
    mode: str = "off"  # off | stop | skip
    sigma: float = 6.0
    window: int = 100
    fp16: bool = False  # a non-finite gradient norm is the gradient scaler's to handle
    losses: deque[float] = field(default_factory=deque)
    norms: deque[float] = field(default_factory=deque)
    skipped: list[int] = field(default_factory=list)

    @classmethod
    def of(cls, training: TrainingConfig) -> StepGuard:
        return cls(training.spike_guard, training.spike_sigma, training.spike_window, training.precision == "fp16")

    def check(self, step: int, loss: torch.Tensor, norm: torch.Tensor) -> bool:
        """Whether step ``step`` (1-based) may be applied: ``Diverged`` for a non-finite value or a spike under
        ``stop``; False for a spike under ``skip``."""
        loss_value, norm_value = (float(value) for value in torch.stack([loss.float(), norm.float()]).tolist())
        if not math.isfinite(loss_value):
            raise Diverged(f"diverged at step {step}: the training loss is {loss_value}")
        if not math.isfinite(norm_value):
            if self.fp16:
                return True  # the scaler skips the update and lowers its scale
            raise Diverged(f"diverged at step {step}: the gradient norm is {norm_value}")
        if self.mode == "off":
            return True
        spike = self._spike(loss_value, norm_value)
        if spike and self.mode == "stop":
            raise Diverged(f"stopped at step {step} by training.spike_guard: {spike}")
        if spike:
            self.skipped.append(step)
            return False
        self._remember(loss_value, norm_value)
        return True

    def _spike(self, loss: float, norm: float) -> str | None:
        if len(self.losses) < self.window:
            return None
        for name, value, seen in (("training loss", loss, self.losses), ("gradient norm", norm, self.norms)):
            mean = math.fsum(seen) / len(seen)
            deviation = math.sqrt(math.fsum((x - mean) ** 2 for x in seen) / len(seen))
            if value > mean + self.sigma * deviation and deviation > 0:
                above = (value - mean) / deviation
                return (
                    f"{name} {value:.6g} is {above:.1f} sigma above the mean {mean:.6g} of the last "
                    f"{counted(len(seen), 'step')}"
                )
        return None

    def _remember(self, loss: float, norm: float) -> None:
        self.losses.append(loss)
        self.norms.append(norm)
        while len(self.losses) > self.window:
            self.losses.popleft()
            self.norms.popleft()

    def state_dict(self) -> dict[str, torch.Tensor]:
        if self.mode == "off":
            return {}
        return {
            "losses": torch.tensor(list(self.losses), dtype=torch.float64),
            "norms": torch.tensor(list(self.norms), dtype=torch.float64),
            "skipped": torch.tensor(self.skipped, dtype=torch.int64),
        }

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.losses = deque(float(x) for x in state["losses"].tolist()) if "losses" in state else deque()
        self.norms = deque(float(x) for x in state["norms"].tolist()) if "norms" in state else deque()
        self.skipped = [int(x) for x in state["skipped"].tolist()] if "skipped" in state else []
