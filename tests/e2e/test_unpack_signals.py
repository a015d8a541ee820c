"""Issue 25 item 7: an ``unpack`` stopped by SIGTERM, SIGINT or SIGHUP removes its staging folder and exits
143/130/129 (real signals to a real child process, started with the default dispositions); ``doctor`` lists the
staging folder a killed unpack left behind and ``--repair`` removes it, while a live unpack's is left alone."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
from conftest import cli, json_out, write_corpus, write_experiment

from octlm.core.liveness import start_time

BIG = 3 << 30  # the checkpoint member as the manifest lists it: copying it takes seconds
STEP = "octlm-pack/checkpoints/step-000004.pt"


@pytest.fixture(scope="module")
def slow_pack(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real pack whose checkpoint member is replaced by BIG zero bytes (a hole in a sparse file on disk: the
    tar member itself is plain), its manifest entry's size changed to match: unpack copies it all, then refuses
    its checksum. A signal arrives while it copies."""
    home = tmp_path_factory.mktemp("a") / "home"
    write_corpus(home)
    write_experiment(home, training={"steps": 8}, checkpoint={"interval": 4, "keep": 3})
    assert cli(home, "train", "EXP-001", "--until", "4", "-q").exit_code == 0
    pack = home.parent / "real.tar"
    assert cli(home, "pack", "EXP-001", "-o", str(pack)).exit_code == 0
    out = home.parent / "slow.tar"
    with tarfile.open(pack) as source, open(out, "wb") as target:
        for info in source.getmembers():
            data = source.extractfile(info).read()
            if info.name.endswith("manifest.json"):
                manifest = json.loads(data)
                manifest["files"]["checkpoints/step-000004.pt"]["size"] = BIG
                data = json.dumps(manifest).encode()
            info.size = BIG if info.name == STEP else len(data)
            target.write(info.tobuf(tarfile.PAX_FORMAT))
            if info.name == STEP:
                target.seek(BIG, os.SEEK_CUR)  # BIG is a multiple of 512: no padding
            else:
                target.write(data + b"\0" * (-len(data) % 512))
        target.write(b"\0" * 1024)
    return out


def default_dispositions() -> None:
    for signum in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_DFL)


def staging(home: Path) -> list[Path]:
    return sorted(home.glob(".unpack-*"))


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGHUP, 129)])
def test_a_stopped_unpack_removes_its_staging_folder(
    slow_pack: Path, tmp_path: Path, signum: signal.Signals, code: int
) -> None:
    home = tmp_path / "b"
    home.mkdir()
    command = [sys.executable, "-m", "octlm", "--home", str(home), "unpack", str(slow_pack)]
    env = {**os.environ, "NO_COLOR": "1"}
    child = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env, preexec_fn=default_dispositions)
    deadline = time.monotonic() + 60
    while not any(p.stat().st_size > 1 << 20 for s in staging(home) for p in s.iterdir()):
        assert child.poll() is None and time.monotonic() < deadline, child.stderr.read() if child.stderr else ""
        time.sleep(0.01)
    child.send_signal(signum)
    _, stderr = child.communicate(timeout=60)
    assert child.returncode == code, stderr
    assert len(stderr.strip().splitlines()) == 1 and signum.name in stderr and "Traceback" not in stderr
    assert staging(home) == []
    with sqlite3.connect(home / "registry.db") as conn:
        assert conn.execute("select count(*) from experiments").fetchone() == (0,)


def test_doctor_lists_a_killed_unpacks_staging_folder_and_repair_removes_it(home: Path) -> None:
    left = home / ".unpack-999999-12345-abcd"  # a pid no process has
    older = home / ".unpack-k2j3h4"  # an older octlm's name, without a pid
    live = home / f".unpack-{os.getpid()}-{start_time(os.getpid())}-live"
    for folder in (left, older, live):
        folder.mkdir()
        (folder / "step-000004.pt").write_bytes(b"\0" * 4096)
    assert cli(home, "doctor").exit_code == 1
    report = json_out(cli(home, "doctor", "--json"))
    found = sorted(p["where"] for p in report["problems"] if p["kind"] == "stale unpack staging folder")
    assert found == sorted([left.name, older.name]) and not report["healthy"]
    assert cli(home, "doctor", "--repair").exit_code == 0
    assert staging(home) == [live]
    assert cli(home, "doctor").exit_code == 0
