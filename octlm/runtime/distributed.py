"""The ranks of a data-parallel run: who this process is, and the few collectives training needs.

A process started by ``octlm --nproc N`` (``launch``) or by ``torchrun`` finds its rank in the
environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``); a plain
process is rank 0 of 1, and then every collective here is the identity and nothing is imported from
``torch.distributed``.

Exactness across a resume needs every sum to happen in the same order in every process. Gradients are
therefore summed as one flat tensor in ``named_parameters`` order (``reduce_gradients``), never through
``DistributedDataParallel``'s buckets, which are rebuilt in gradient-ready order in each new process and
so sum differently after a resume at three ranks or more. With canonical pieces (``training.micro_batches``) the
sum is not an all-reduce at all: the ranks gather the nodes of one fixed tree (``pieces``), so any world size that
divides the pieces sums the same bits.

``OCTLM_TRACE_BLOCKS=FOLDER`` makes every rank append the block indices of each of its micro-batches to
``FOLDER/rank<r>.jsonl`` (one line per step), so two layouts can be compared block for block.

``OCTLM_DISTRIBUTED_FAULT`` turns on one of three classic mistakes, for tests that show they are caught:
``rank0-rng`` (every rank restores rank 0's random state), ``plain-ddp`` (gradients averaged by
``DistributedDataParallel(model)``) and ``ring-sum`` (canonical pieces summed per rank, then all-reduced, so the
association depends on the world size). It is not a product setting.
"""

from __future__ import annotations

import contextlib
import datetime
import faulthandler
import json
import os
import re
import signal
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from octlm.core.errors import Diverged, Interrupted, OctlmError, Relayed
from octlm.runtime.launch import launched, world

if TYPE_CHECKING:
    from octlm.runtime.pieces import PieceSum

FAULTS = ("rank0-rng", "plain-ddp", "ring-sum")
FAULT_VARIABLE = "OCTLM_DISTRIBUTED_FAULT"
TRACE_VARIABLE = "OCTLM_TRACE_BLOCKS"
TIMEOUT = datetime.timedelta(minutes=30)  # a collective that waits longer than this fails the run
LEAVE_S = 60


def _backend() -> str:
    """gloo for CPU tensors, NCCL for CUDA tensors where CUDA exists (one group serves both)."""
    return "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"


@dataclass(frozen=True)
class Ranks:
    world_size: int = 1
    rank: int = 0
    local_rank: int = 0
    nnodes: int = 1
    fault: str = ""

    @property
    def leader(self) -> bool:
        """Rank 0: the only rank that writes the registry, run files, checkpoints and output."""
        return self.rank == 0

    @property
    def parallel(self) -> bool:
        return self.world_size > 1

    def backend(self, device: torch.device) -> str | None:
        """The backend that sums this run's gradients (None on one process)."""
        if not self.parallel:
            return None
        return "nccl" if device.type == "cuda" else "gloo"

    # ------------------------------------------------------------ the global batch

    def slices(self, index: torch.Tensor, micro_batches: int) -> list[torch.Tensor]:
        """This rank's micro-batches of a global batch of block indices: the global batch is cut into
        ``world_size * micro_batches`` equal parts, and rank r takes parts r*A ... r*A + A-1 in order, so
        one process accumulating A = N micro-batches sees what N ranks see."""
        size = len(index) // (self.world_size * micro_batches)
        first = self.rank * micro_batches
        parts = [index[(first + m) * size : (first + m + 1) * size] for m in range(micro_batches)]
        if os.environ.get(TRACE_VARIABLE):
            self._trace(os.environ[TRACE_VARIABLE], parts)
        return parts

    def pieces(self, index: torch.Tensor, pieces: int) -> list[tuple[int, torch.Tensor]]:
        """This rank's canonical pieces of a global batch, as (piece number, block indices): the batch is cut into
        ``pieces`` equal parts, and rank r of N takes parts r*K/N ... (r+1)*K/N - 1."""
        from octlm.runtime.pieces import leaves

        size = len(index) // pieces
        mine = [(k, index[k * size : (k + 1) * size]) for k in leaves(self.rank, self.world_size, pieces)]
        if os.environ.get(TRACE_VARIABLE):
            self._trace(os.environ[TRACE_VARIABLE], [part for _, part in mine])
        return mine

    def piece_sum(self, pieces: int) -> PieceSum:
        """One step's canonical sum of ``pieces`` pieces over the ranks (``pieces.PieceSum``)."""
        from octlm.runtime.pieces import PieceSum

        return PieceSum(pieces, self)

    def _trace(self, folder: str, parts: list[torch.Tensor]) -> None:
        with open(os.path.join(folder, f"rank{self.rank}.jsonl"), "a", encoding="utf-8") as out:
            out.write(json.dumps([part.tolist() for part in parts]) + "\n")

    @property
    def gradient_scale(self) -> float:
        """What each rank's loss is multiplied by so that the ranks' gradients add up to the global batch's:
        1 when octlm sums them, the world size under ``plain-ddp`` (DDP averages)."""
        return float(self.world_size) if self.fault == "plain-ddp" and self.parallel else 1.0

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """What the training forward runs through: the model itself, or ``DistributedDataParallel(model)``
        under the ``plain-ddp`` fault."""
        if self.fault != "plain-ddp" or not self.parallel:
            return model
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model)

    # ------------------------------------------------------------ collectives

    def reduce_gradients(self, parameters: list[torch.nn.Parameter]) -> None:
        """Sum every parameter's gradient over the ranks, as one flat tensor in parameter order."""
        if not self.parallel or self.fault == "plain-ddp":
            return
        import torch.distributed as dist

        grads = [p.grad for p in parameters if p.grad is not None]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)
        offset = 0
        for grad in grads:
            grad.copy_(flat[offset : offset + grad.numel()].view_as(grad))
            offset += grad.numel()

    def gather_tensor(self, value: torch.Tensor) -> list[torch.Tensor]:
        """Every rank's ``value`` (the same shape on every rank), in rank order, on every rank."""
        if not self.parallel:
            return [value]
        import torch.distributed as dist

        out = [torch.empty_like(value) for _ in range(self.world_size)]
        dist.all_gather(out, value.contiguous())
        return out

    def total(self, value: torch.Tensor) -> torch.Tensor:
        """``value`` summed over the ranks (a new tensor; the identity on one process)."""
        if not self.parallel:
            return value
        import torch.distributed as dist

        out = value.detach().clone()
        dist.all_reduce(out)
        return out

    def total_in_place(self, value: torch.Tensor) -> torch.Tensor:
        """``value`` summed over the ranks, in its own memory (no copy); returns it."""
        if self.parallel:
            import torch.distributed as dist

            dist.all_reduce(value)
        return value

    def agree(self, signal_number: int) -> int:
        """The largest of every rank's number (0: none received): all ranks stop at the same step, for the
        same signal (SIGTERM 15 outranks SIGINT 2 and SIGHUP 1)."""
        if not self.parallel:
            return signal_number
        import torch.distributed as dist

        flag = torch.tensor([signal_number], dtype=torch.int64)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return int(flag.item())

    def gather(self, value: Any) -> list[Any]:
        """Every rank's ``value``, in rank order, on every rank."""
        if not self.parallel:
            return [value]
        import torch.distributed as dist

        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, value)
        return out

    def share(self, value: Any = None) -> Any:
        """Rank 0's ``value`` on every rank (what other ranks pass is ignored)."""
        if not self.parallel:
            return value
        import torch.distributed as dist

        box = [value if self.leader else None]
        dist.broadcast_object_list(box, src=0, device=torch.device("cpu"))
        return box[0]

    def barrier(self) -> None:
        if self.parallel:
            import torch.distributed as dist

            dist.barrier()


_current: Ranks | None = None


def current() -> Ranks:
    """This process's ranks, joining the process group on first use when it was launched as a rank."""
    global _current
    if _current is None:
        _current = _join() if launched() else Ranks()
    return _current


def _join() -> Ranks:
    place = world()
    fault = os.environ.get(FAULT_VARIABLE, "")
    if fault not in ("", *FAULTS):
        fault = ""  # not a product setting: anything else is ignored
    ranks = Ranks(place.world_size, place.rank, place.local_rank, place.nnodes, fault)
    if ranks.parallel:
        import torch.distributed as dist

        if torch.cuda.is_available():
            torch.cuda.set_device(place.local_rank % torch.cuda.device_count())
        if not dist.is_initialized():
            dist.init_process_group(_backend(), timeout=TIMEOUT)
        # where a rank that seems stuck is: `kill -USR2 PID` prints every thread's Python stack on its stderr (from
        # the signal handler, so even inside a collective) and the rank goes on
        faulthandler.register(signal.SIGUSR2, all_threads=True)
    return ranks


def orderly(error: BaseException) -> bool:
    """Whether every rank ends with this ``error`` together: a stop the ranks agreed on, or rank 0's word
    before training. Anything else (a lost rank, a failed write) may end this rank alone."""
    return isinstance(error, (Relayed, Interrupted, Diverged))


def lost(error: BaseException, ranks: Ranks) -> BaseException:
    """A collective that failed because another rank is gone, as one line (exit 1); other errors as they are."""
    import torch.distributed as dist

    words = ("gloo", "NCCL", "Connection reset", "Connection closed", "Broken pipe")
    if not isinstance(error, dist.DistError) and not (
        isinstance(error, RuntimeError) and any(word in str(error) for word in words)
    ):
        return error
    first = (str(error).strip().splitlines() or [type(error).__name__])[0]
    first = re.sub(r"^\[[^\]]*\]\s*", "", first).split(". ")[0][:160]  # "[.../pair.cc:553] Connection closed ..."
    return OctlmError(
        f"rank {ranks.rank}: another rank of the run stopped ({first}); "
        "the newest checkpoint is intact: see that rank's message, then resume"
    )


def leave(wait: bool = True) -> None:
    """Leave the process group at the end of a rank's command; with ``wait``, once every rank is there
    (within ``LEAVE_S``). A process that exits inside a group aborts."""
    global _current
    if _current is not None and _current.parallel:
        import torch.distributed as dist

        if dist.is_initialized():
            if wait:
                with contextlib.suppress(RuntimeError):
                    dist.monitored_barrier(timeout=datetime.timedelta(seconds=LEAVE_S))
            dist.destroy_process_group()
    _current = None
