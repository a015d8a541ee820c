"""``octlm work --ray``: the Ray cluster as the driver sees it (``Cluster``): connecting (a one-line error when Ray is
not installed or nothing answers at the address), the mailbox actor on the driver's own node, a trial submitted as a
Ray task (``remote.train_trial``), how many trials the cluster can train at once, and a task's end told apart: its
outcome, or lost with its node (any error of Ray's own rather than the task's). Ray is imported here and in
``remote`` only: it is an extra, ``octlm[ray]``.

Tasks are not retried by Ray (``max_retries=0``): a retry would start again from the pack it was first given; the
driver resubmits a lost trial itself, from the newest checkpoint it holds (``driver``). Each task is a fresh
process (``max_calls=1``), so that it can pin its trial's determinism tier before torch loads.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass
from typing import Any

from octlm.core.errors import BadInput
from octlm.tasks.sweeps.working import remote

RAY_EXTRA = "pip install 'octlm[ray]'"
PROBE_S = 5.0  # how long an address is given to answer before `--ray ADDRESS` is refused
LOCAL = "local"


@dataclass(frozen=True)
class Ended:
    """A task that ended: its outcome, or why Ray lost it (``lost``: the node died, the worker crashed, ...)."""

    outcome: remote.Outcome | None
    lost: str | None


class Cluster:
    """A connection to a Ray cluster, its mailbox and the trial task (see the module)."""

    def __init__(self, ray: Any, address: str):
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self.ray, self.address = ray, address
        self.node = ray.get_runtime_context().get_node_id()
        strategy = NodeAffinitySchedulingStrategy(self.node, soft=False)
        actor = ray.remote(num_cpus=0, max_restarts=0)(remote.Mailbox)
        self.mailbox = actor.options(scheduling_strategy=strategy).remote()
        self.task = ray.remote(max_retries=0, max_calls=1)(remote.train_trial)

    @classmethod
    def connect(cls, address: str, cpus: int) -> Cluster:
        """Connect to the Ray at ``address``: HOST:PORT, ``auto`` (``RAY_ADDRESS``, else the Ray running on this
        box, as Ray means it) or ``local`` (a Ray of ``cpus`` CPUs started for this call and stopped after it);
        BadInput, one line, when Ray is not installed or nothing answers there."""
        try:
            import ray
        except ImportError:
            raise BadInput(f"--ray: Ray is not installed here: {RAY_EXTRA} (on every machine of the cluster)") from None
        # Ray's own chatter (a started instance, its token) stays in its logs; what octlm says is the driver's lines
        options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.ERROR}
        if address == LOCAL:
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # a Ray started by octlm reports nowhere
            options["num_cpus"] = cpus
        else:
            _probe(os.environ.get("RAY_ADDRESS", "") if address == "auto" else address)
        try:
            ray.init(address=address, **options)
        except (ConnectionError, RuntimeError, ValueError, TimeoutError) as error:
            said = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
            raise BadInput(f"--ray {address}: Ray could not be joined there ({said}); nothing was claimed") from None
        return cls(ray, address)

    def capacity(self, threads: int) -> int:
        """How many trials of ``threads`` CPUs each the cluster's nodes hold now (at least 1: a task waits for a
        node when none is free)."""
        return max(1, int(self.ray.cluster_resources().get("CPU", 0) // max(threads, 1)))

    def submit(self, job: remote.Job) -> Any:
        """The trial as a Ray task of ``job.threads`` CPUs; its object ref."""
        return self.task.options(num_cpus=job.threads).remote(job, self.mailbox)

    def take(self) -> tuple[list[remote.Shipment], dict[int, remote.Heard]]:
        """The checkpoints the tasks shipped since the last call, and what each claim's newest try said last (its
        try, node and step: every ``remote.PROGRESS_S`` and at each checkpoint)."""
        taken: tuple[list[remote.Shipment], dict[int, remote.Heard]] = self.ray.get(self.mailbox.take.remote())
        return taken

    def ready(self, refs: list[Any], timeout: float) -> list[Any]:
        """The refs among ``refs`` whose tasks have ended, waiting at most ``timeout`` seconds for one."""
        if not refs:
            return []
        done, _ = self.ray.wait(refs, num_returns=1, timeout=timeout, fetch_local=False)
        if done:  # and any other that ended meanwhile
            done, _ = self.ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=False)
        return list(done)

    def ended(self, ref: Any) -> Ended:
        """A ready task's end: its outcome, or why Ray lost it (an error of the task's own body is an outcome:
        ``remote.train_trial`` returns its trial's failure)."""
        try:
            return Ended(self.ray.get(ref), None)
        except self.ray.exceptions.RayError as error:
            said = (str(error).strip().splitlines() or [""])[0][:160]
            return Ended(None, f"{type(error).__name__}: {said}" if said else type(error).__name__)

    def halt(self) -> None:
        """Tell every running task to checkpoint and stop (it asks the mailbox at its next step or checkpoint)."""
        self.ray.get(self.mailbox.halt.remote())

    def close(self) -> None:
        self.ray.shutdown()


def _probe(address: str) -> None:
    """BadInput unless something answers at ``address`` (HOST:PORT) within ``PROBE_S``: ``ray.init`` would wait
    minutes on an address where nothing listens."""
    if not address or "://" in address:
        return  # ``auto`` without RAY_ADDRESS (Ray looks on this box and says so at once), or Ray's client
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise BadInput(f"--ray {address}: give the head's HOST:PORT (`ray start --head` prints it; 6379 by default)")
    try:
        socket.create_connection((host, int(port)), timeout=PROBE_S).close()
    except OSError as error:
        raise BadInput(
            f"--ray {address}: nothing answers there ({error.strerror or error}): start Ray's head with `ray start "
            "--head` on that machine, or give its address; nothing was claimed"
        ) from None
