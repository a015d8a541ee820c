"""Starting the ranks of a data-parallel run: ``octlm COMMAND --nproc N [--nnodes M --node-rank K
--rdzv-endpoint HOST:PORT]`` runs N copies of the command on this box through torch's own elastic
launcher (``torch.distributed.launcher.api.elastic_launch``, the engine inside ``torchrun``), and ends
with the ranks' exit code: 0, 1, 2, 3, 130 or 143 reach the shell as they are (``torchrun`` turns
every failure into 1). A signal to this process reaches every rank once (the launcher forwards it);
the ranks agree on the step to stop at and rank 0 writes the checkpoint.

Several boxes meet at ``--rdzv-endpoint``, where node 0 hosts the rendezvous: each node says "waiting for the
rendezvous at HOST:PORT" on stderr and waits up to ``RENDEZVOUS_S`` for the others; then one line (exit 2). Node 0
first checks that the port is free on its box (a port in use was a 75-line traceback on node 0 of two, a silent
wait on one node): one line naming the port (exit 2) before anything starts.

Torch-free at import: the CLI imports it to decide whether to launch.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import signal
import socket
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
RENDEZVOUS_S = 300  # how long a node waits for the others at the rendezvous
ENDPOINT = re.compile(r"(?P<host>[A-Za-z0-9_.\-]+|\[[0-9A-Fa-f:.]+\]):(?P<port>[0-9]{1,5})")


def octlm_command(argv: list[str]) -> list[str]:
    """The command line that runs ``octlm argv`` in a new interpreter."""
    return [sys.executable, "-P", "-c", CHILD, str(PACKAGE_FOLDER), *argv]


def launched() -> bool:
    """Whether this process is a rank of a group started by ``octlm --nproc`` or ``torchrun``."""
    return all(key in os.environ for key in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


@dataclass(frozen=True)
class World:
    """Where this process stands in its group: the one record of its rank, its rank on its node, the world size and
    the ranks per node, read from the launch environment (``octlm --nproc``'s or torchrun's ``RANK``,
    ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``) by ``world()`` and nowhere else. A process outside a
    group is rank 0 of 1."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    per_node: int = 1

    @property
    def nnodes(self) -> int:
        return max(1, self.world_size // max(1, self.per_node))

    @property
    def node_rank(self) -> int:
        return self.rank // max(1, self.per_node)


def world() -> World:
    """This process's place in its group, from its environment (``World()`` outside one)."""
    if not launched():
        return World()
    size = int(os.environ["WORLD_SIZE"])
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", str(size)))
    return World(int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0")), size, per_node)


def rank() -> int:
    """This process's rank (0 outside a group)."""
    return world().rank


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


def run(launch: Launch, argv: list[str], run_id: str, threads: int | None = None) -> int:
    """Run ``octlm argv`` on ``launch.nproc`` ranks here; returns the exit code the command ends with.
    ``run_id`` names the rendezvous: the same on every node of one run. ``threads``: each rank's
    ``OMP_NUM_THREADS`` (default: the environment's, else cores / ranks)."""
    check_endpoint(launch)
    with _quiet_store():
        from torch.distributed.elastic.multiprocessing.api import SignalException
        from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
        from torch.distributed.launcher.api import elastic_launch

    _quiet_torch_logs()
    if launch.nnodes > 1:
        sys.stderr.write(
            f"waiting for the rendezvous at {launch.rdzv_endpoint} (node {launch.node_rank} of {launch.nnodes}, "
            f"up to {RENDEZVOUS_S} s)\n"
        )
        sys.stderr.flush()
    command = octlm_command(argv)
    try:
        with _threads(str(threads) if threads else os.environ.get("OMP_NUM_THREADS") or _per_rank(launch.nproc)):
            elastic_launch(_config(launch, run_id), command[0])(*command[1:])
    except ChildFailedError as failed:
        return _exit_code({rank: (failure.exitcode, failure.timestamp) for rank, failure in failed.failures.items()})
    except SignalException as stopped:
        return 128 + int(stopped.sigval)
    except (RuntimeError, TimeoutError, ValueError) as error:  # torch's DistError and RendezvousError among them
        raise _rendezvous_failed(launch, error) from None
    return 0


def _config(launch: Launch, run_id: str) -> Any:
    from torch.distributed.launcher.api import LaunchConfig

    return LaunchConfig(
        min_nodes=launch.nnodes,
        max_nodes=launch.nnodes,
        nproc_per_node=launch.nproc,
        run_id=run_id if launch.nnodes > 1 else f"{run_id}-{uuid.uuid4().hex[:12]}",
        # Several nodes: a static rendezvous at node 0's endpoint, so --node-rank 0 holds rank 0 (the rank that
        # writes the home); one node: torchrun's --standalone (a store on a free local port).
        rdzv_backend="static" if launch.nnodes > 1 else "c10d",
        rdzv_endpoint=launch.rdzv_endpoint or "localhost:0",
        rdzv_configs={"rank": launch.node_rank, "timeout": RENDEZVOUS_S} if launch.nnodes > 1 else {},
        max_restarts=0,
        monitor_interval=0.1,
        shutdown_timeout=SHUTDOWN_S,
        signals_to_handle=",".join(_forwarded()),
    )


def _per_rank(nproc: int) -> str:
    """The threads of each of ``nproc`` ranks on this box when nothing says: the cores shared out, at least 1."""
    return str(max(1, (os.cpu_count() or 1) // nproc))


@contextlib.contextmanager
def _threads(count: str) -> Iterator[None]:
    """``OMP_NUM_THREADS`` for the ranks started meanwhile (they inherit this process's environment)."""
    before = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = count
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = before


def _host_port(endpoint: str) -> tuple[str, int]:
    match = ENDPOINT.fullmatch(endpoint)
    assert match is not None  # Launch checked it
    return match["host"].strip("[]"), int(match["port"])


def check_endpoint(launch: Launch) -> None:
    """Node 0 hosts the rendezvous: its port must be free on this box (bound here a moment, as torch's store
    binds it), else one line naming it (exit 2) instead of torch's traceback or a wait for a store that is not
    octlm's."""
    if not launch.rdzv_endpoint or launch.node_rank != 0:
        return
    host, port = _host_port(launch.rdzv_endpoint)
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as torch's store: TIME_WAIT is free
            probe.bind((host, port))
    except OSError as error:
        if error.errno == errno.EADDRINUSE:
            raise BadInput(
                f"--rdzv-endpoint {launch.rdzv_endpoint}: port {port} is in use on this box (another run or "
                "program listens there): choose a free port, the same on every node"
            ) from None
        why = error.strerror or str(error)
        raise BadInput(
            f"--rdzv-endpoint {launch.rdzv_endpoint}: node 0 cannot host the rendezvous there ({why}): give node 0's "
            "own address and a free port"
        ) from None


def _rendezvous_failed(launch: Launch, error: BaseException) -> BaseException:
    """What the launcher raised before any rank ran, as one line (exit 2): the port taken meanwhile, no rendezvous
    within ``RENDEZVOUS_S``, or something at the endpoint that is not octlm's node 0; anything else as it is."""
    import torch.distributed as dist
    from torch.distributed.elastic.rendezvous.api import RendezvousError

    text, endpoint = str(error).lower(), launch.rdzv_endpoint or "localhost"
    if "eaddrinuse" in text or "address already in use" in text:
        port = _host_port(launch.rdzv_endpoint)[1] if launch.rdzv_endpoint else 0
        return BadInput(f"--rdzv-endpoint {endpoint}: port {port} is in use on this box: choose a free port")
    if isinstance(error, TimeoutError) or "timed out" in text or "timeout" in text:
        return BadInput(
            f"no rendezvous at {endpoint} within {RENDEZVOUS_S} s: start all {launch.nnodes} nodes with the same "
            "--nnodes and --rdzv-endpoint (node 0's address and a port free there), each with its own --node-rank"
        )
    if isinstance(error, (dist.DistError, RendezvousError)):
        first = (str(error).strip().splitlines() or [type(error).__name__])[0][:160]
        return BadInput(
            f"the rendezvous at {endpoint} failed ({first}): is it node 0's address and port, with node 0's octlm "
            "started there and nothing else listening?"
        )
    return error


@contextlib.contextmanager
def _quiet_store() -> Iterator[None]:
    """torch loaded with its C++ log at FATAL in this process (the store's retries would print dozens of lines;
    octlm says what failed in one); the ranks it starts do not inherit the setting."""
    before = os.environ.get("TORCH_CPP_LOG_LEVEL")
    if "torch" not in sys.modules:
        os.environ["TORCH_CPP_LOG_LEVEL"] = "FATAL"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TORCH_CPP_LOG_LEVEL", None)
        else:
            os.environ["TORCH_CPP_LOG_LEVEL"] = before


def _forwarded() -> list[str]:
    """The signals the launcher passes on to the ranks: SIGHUP not when it is ignored (``nohup``: the ranks,
    which inherit that, go on after the terminal is gone, as one process does)."""
    names = ["SIGTERM", "SIGINT", "SIGQUIT"]
    return names if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN else [*names, "SIGHUP"]


def _exit_code(failures: dict[int, tuple[int, int]]) -> int:
    """The command's exit code from the failed ranks' (rank: (exit code, when it was seen, in whole seconds); a
    negative code: killed by that signal). A rank killed by a signal other than the launcher's own SIGTERM (which
    stops the others once one failed) is the cause, said in one line: the first one seen, since a rank the launcher
    could not stop with SIGTERM within its grace is killed with SIGKILL later (then the lower rank); else the lowest
    rank that ended with a code of its own (rank 0's: it said why)."""
    killed = {rank: (when, -code) for rank, (code, when) in failures.items() if code < 0 and -code != signal.SIGTERM}
    if killed:
        rank = min(killed, key=lambda r: (killed[r][0], r))
        number = killed[rank][1]
        raise Interrupted(
            f"rank {rank} was killed by {signal.Signals(number).name}; the other ranks were stopped: resume from the "
            "newest checkpoint",
            128 + number,
        )
    own = {rank: code for rank, (code, _) in failures.items() if code > 0}
    if own:
        return own[min(own)]
    return 128 + signal.SIGTERM


def _quiet_torch_logs() -> None:
    """The elastic launcher logs every start and failure at WARNING; octlm's ranks say what matters."""
    for name in list(logging.root.manager.loggerDict):
        if name.startswith("torch.distributed"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
