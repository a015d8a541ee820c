"""Issue 34 item 3: the world size is owned by one record (``runtime.launch.World``), read once from the launch
environment by ``launch.world()``; no other module reads the launcher's variables."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from octlm.runtime import launch

PACKAGE = Path(__file__).resolve().parents[2] / "octlm"
LAUNCHER = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}


def test_a_process_outside_a_group_is_rank_0_of_1(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    assert launch.world() == launch.World() and launch.rank() == 0
    assert (launch.World().nnodes, launch.World().node_rank) == (1, 0)


def test_rank_3_of_two_nodes_of_two(monkeypatch: pytest.MonkeyPatch) -> None:
    variables = {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2", **LAUNCHER}
    for key, value in variables.items():
        monkeypatch.setenv(key, value)
    place = launch.world()
    assert (place.rank, place.local_rank, place.world_size, place.per_node) == (3, 1, 4, 2)
    assert (place.nnodes, place.node_rank) == (2, 1) and launch.rank() == 3
    monkeypatch.delenv("LOCAL_WORLD_SIZE")  # torchrun always sets it; without it, one node holds them all
    assert launch.world().nnodes == 1


def test_no_other_module_reads_the_launchers_variables() -> None:
    reads = re.compile(r"environ(\.get)?[\[(]\s*\"(RANK|LOCAL_RANK|WORLD_SIZE|LOCAL_WORLD_SIZE)\"")
    found = {
        str(path.relative_to(PACKAGE)): len(reads.findall(path.read_text()))
        for path in PACKAGE.rglob("*.py")
        if reads.search(path.read_text())
    }
    assert found == {"runtime/launch.py": 4}  # in world(), each variable once
