"""Starting the ranks of a data-parallel run: ``octlm COMMAND --nproc N [--nnodes M --node-rank K
--rdzv-endpoint HOST:PORT]`` runs N copies of the command on this box through torch's own elastic
launcher (``torch.distributed.launcher.api.elastic_launch``, the engine inside ``torchrun``), and ends
with the ranks' exit code: 0, 1, 2, 3, 130 or 143 reach the shell as they are (``torchrun`` turns
every failure into 1). A signal to this process reaches every rank once (the launcher forwards it);
the ranks agree on the step to stop at and rank 0 writes the checkpoint.

Torch-free at import: the CLI imports it to decide whether to launch.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

from octlm.core.errors import BadInput, Interrupted

# A rank runs the octlm that runs this process: found where the interpreter looks (an installed octlm),
# else in the folder that holds this package (appended, so it shadows nothing). ``-P``: the working
# directory is never on ``sys.path``, so a ``./octlm_cli`` planted where the user stands never runs.
CHILD = (
    "import sys; folder = sys.argv.pop(1); folder in sys.path or sys.path.append(folder); "
    "sys.argv[0] = 'octlm'; from octlm.cli.app import main; main()"
)
PACKAGE_FOLDER = Path(__file__).resolve().parent.parent
SHUTDOWN_S = 100  # after a signal, how long the ranks have to finish their step and checkpoint
MAX_RANKS = 1024
ENDPOINT = re.compile(r"(?P<host>[A-Za-z0-9_.\-]+|\[[0-9A-Fa-f:.]+\]):(?P<port>[0-9]{1,5})")


def octlm_command(argv: list[str]) -> list[str]:
    """The command line that runs ``octlm argv`` in a new interpreter."""
    return [sys.executable, "-P", "-c", CHILD, str(PACKAGE_FOLDER), *argv]


def launched() -> bool:
    """Whether this process is a rank of a group started by ``octlm --nproc`` or ``torchrun``."""
    return all(key in os.environ for key in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def rank() -> int:
    """This process's rank (0 outside a group)."""
    return int(os.environ.get("RANK", "0")) if launched() else 0


@dataclass(frozen=True)
class Launch:
    """The launch options of a training command."""

    nproc: int = 1
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str = ""

    def __post_init__(self) -> None:
        if not 1 <= self.nproc <= MAX_RANKS:
            raise BadInput(f"--nproc {self.nproc}: must be between 1 and {MAX_RANKS}")
        if not 1 <= self.nnodes <= MAX_RANKS:
            raise BadInput(f"--nnodes {self.nnodes}: must be between 1 and {MAX_RANKS}")
        if not 0 <= self.node_rank < self.nnodes:
            raise BadInput(f"--node-rank {self.node_rank}: must be between 0 and --nnodes - 1 ({self.nnodes - 1})")
        if self.nnodes > 1 and not self.rdzv_endpoint:
            raise BadInput(
                f"--nnodes {self.nnodes}: give --rdzv-endpoint HOST:PORT (node 0's address), the same on every node"
            )
        match = ENDPOINT.fullmatch(self.rdzv_endpoint) if self.rdzv_endpoint else None
        if self.rdzv_endpoint and (match is None or not 0 < int(match["port"]) < 65536):
            raise BadInput(f"--rdzv-endpoint {self.rdzv_endpoint!r}: expected HOST:PORT, such as 10.0.0.1:29500")

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes

    @property
    def wanted(self) -> bool:
        """Whether this process starts ranks (it is not one already, and more than one is asked for)."""
        return self.world_size > 1 and not launched()


def run(launch: Launch, argv: list[str], run_id: str) -> int:
    """Run ``octlm argv`` on ``launch.nproc`` ranks here; returns the exit code the command ends with.
    ``run_id`` names the rendezvous: the same on every node of one run."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    _quiet_torch_logs()
    config = LaunchConfig(
        min_nodes=launch.nnodes,
        max_nodes=launch.nnodes,
        nproc_per_node=launch.nproc,
        run_id=run_id if launch.nnodes > 1 else f"{run_id}-{uuid.uuid4().hex[:12]}",
        # Several nodes: a static rendezvous at node 0's endpoint, so --node-rank 0 holds rank 0 (the rank that
        # writes the home); one node: torchrun's --standalone (a store on a free local port).
        rdzv_backend="static" if launch.nnodes > 1 else "c10d",
        rdzv_endpoint=launch.rdzv_endpoint or "localhost:0",
        rdzv_configs={"rank": launch.node_rank} if launch.nnodes > 1 else {},
        max_restarts=0,
        monitor_interval=0.1,
        shutdown_timeout=SHUTDOWN_S,
        signals_to_handle=",".join(_forwarded()),
    )
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // launch.nproc)))
    command = octlm_command(argv)
    try:
        elastic_launch(config, command[0])(*command[1:])
    except ChildFailedError as failed:
        return _exit_code({rank: failure.exitcode for rank, failure in failed.failures.items()})
    except SignalException as stopped:
        return 128 + int(stopped.sigval)
    return 0


def _forwarded() -> list[str]:
    """The signals the launcher passes on to the ranks: SIGHUP not when it is ignored (``nohup``: the ranks,
    which inherit that, go on after the terminal is gone, as one process does)."""
    names = ["SIGTERM", "SIGINT", "SIGQUIT"]
    return names if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN else [*names, "SIGHUP"]


def _exit_code(codes: dict[int, int]) -> int:
    """The command's exit code from the failed ranks' (a negative code: killed by that signal). A rank killed
    by a signal other than the launcher's own SIGTERM (which stops the others once one failed) is the cause,
    said in one line; else the lowest rank that ended with a code of its own (rank 0's: it said why)."""
    killed = {rank: -code for rank, code in codes.items() if code < 0 and -code != signal.SIGTERM}
    if killed:
        rank = min(killed)
        name = signal.Signals(killed[rank]).name
        raise Interrupted(
            f"rank {rank} was killed by {name}; the other ranks were stopped: resume from the newest checkpoint",
            128 + killed[rank],
        )
    own = {rank: code for rank, code in codes.items() if code > 0}
    if own:
        return own[min(own)]
    return 128 + signal.SIGTERM


def _quiet_torch_logs() -> None:
    """The elastic launcher logs every start and failure at WARNING; octlm's ranks say what matters."""
    for name in list(logging.root.manager.loggerDict):
        if name.startswith("torch.distributed"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
