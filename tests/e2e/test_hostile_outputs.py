"""Issue 25, the outputs side: what ``-o FILE`` of ``report``, ``pack`` and ``registry export`` does with each kind
of target (a device, a FIFO, ``/dev/stdout``, a link, a folder, a socket), and ``export -o DIR`` into another home.
Devices are made with ``mknod`` in a temporary folder (never the real ``/dev/null``), FIFOs are real FIFOs with a
real reader."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import cli, octlm

from octlm.core.home import Home
from octlm.store.experiments import load, register
from octlm.store.registry import Registry

NULL, FULL = os.makedev(1, 3), os.makedev(1, 7)
WRITERS: dict[str, Callable[[Path], list[str]]] = {
    "report": lambda out: ["report", "EXP-001", "-o", str(out)],
    "pack": lambda out: ["pack", "EXP-001", "-o", str(out)],
    "registry export": lambda out: ["registry", "export", "-o", str(out)],
}


@pytest.fixture
def registered(home: Path) -> Path:
    """The tiny EXP-001, registered (no training: every writer works on it)."""
    with Registry(home / "registry.db") as registry:
        register(Home(home), registry, load(Home(home), "EXP-001"))
    return home


def device(folder: Path, name: str, number: int) -> Path:
    path = folder / name
    os.mknod(path, stat.S_IFCHR | 0o666, number)
    return path


def one_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def no_temporaries(folder: Path) -> None:
    assert not [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]


def expected(home: Path, tmp_path: Path, writer: str) -> bytes:
    """What the writer puts in a regular file: the bytes a device or FIFO should get."""
    plain = tmp_path / f"plain-{writer.replace(' ', '-')}"
    result = cli(home, *WRITERS[writer](plain))
    assert result.exit_code == 0, result.stderr
    return plain.read_bytes()


@pytest.mark.parametrize("writer", WRITERS)
def test_a_copy_of_dev_null_stays_a_character_device(registered: Path, tmp_path: Path, writer: str) -> None:
    null = device(tmp_path, "null", NULL)
    result = cli(registered, *WRITERS[writer](null))
    assert result.exit_code == 0, result.stderr
    info = null.lstat()
    assert stat.S_ISCHR(info.st_mode) and info.st_rdev == NULL
    no_temporaries(tmp_path)


@pytest.mark.parametrize("writer", WRITERS)
def test_a_copy_of_dev_full_is_one_line_and_exit_3(registered: Path, tmp_path: Path, writer: str) -> None:
    full = device(tmp_path, "full", FULL)
    result = cli(registered, *WRITERS[writer](full))
    assert result.exit_code == 3, (result.stdout, result.stderr)
    line = one_line(result)
    assert str(full) in line and "No space left on device" in line and "character device" in line
    assert stat.S_ISCHR(full.lstat().st_mode) and full.lstat().st_rdev == FULL
    no_temporaries(tmp_path)


@pytest.mark.parametrize("writer", WRITERS)
def test_a_fifo_with_a_reader_gets_every_byte(registered: Path, tmp_path: Path, writer: str) -> None:
    want = expected(registered, tmp_path, writer)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    result = cli(registered, *WRITERS[writer](fifo))
    reader.join(timeout=30)
    assert result.exit_code == 0, result.stderr
    assert got == [want] and stat.S_ISFIFO(fifo.lstat().st_mode)
    no_temporaries(tmp_path)


@pytest.mark.parametrize("writer", WRITERS)
def test_a_fifo_without_a_reader_is_refused_at_once(registered: Path, tmp_path: Path, writer: str) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    started = time.monotonic()
    result = cli(registered, *WRITERS[writer](fifo))
    assert result.exit_code == 3 and time.monotonic() - started < 20
    line = one_line(result)
    assert str(fifo) in line and "FIFO" in line and "reader" in line
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


@pytest.mark.parametrize("writer", WRITERS)
def test_a_folder_or_a_socket_is_refused_with_exit_3(registered: Path, tmp_path: Path, writer: str) -> None:
    folder = tmp_path / "folder"
    folder.mkdir()
    result = cli(registered, *WRITERS[writer](folder))
    assert result.exit_code == 3 and str(folder) in one_line(result) and "a folder" in one_line(result)
    assert list(folder.iterdir()) == []
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(tmp_path / "sock"))
        result = cli(registered, *WRITERS[writer](tmp_path / "sock"))
        assert result.exit_code == 3 and "a socket" in one_line(result)
        assert stat.S_ISSOCK((tmp_path / "sock").lstat().st_mode)


def test_report_dash_o_dot_is_exit_3(registered: Path) -> None:
    result = octlm(registered, "report", "EXP-001", "-o", ".", cwd=registered)
    assert result.returncode == 3, result.stderr
    assert "a folder" in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("writer", WRITERS)
def test_a_link_to_proc_self_fd_1_writes_to_stdout(registered: Path, tmp_path: Path, writer: str) -> None:
    """What ``-o /dev/stdout`` does, on a link of the test's own (the real /dev/stdout is never the target)."""
    want = expected(registered, tmp_path, writer)
    link = tmp_path / "stdout"
    link.symlink_to("/proc/self/fd/1")
    command = [sys.executable, "-m", "octlm", "--home", str(registered), *WRITERS[writer](link)]
    result = subprocess.run(command, capture_output=True, timeout=120, env={**os.environ, "NO_COLOR": "1"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(want)  # then pack and registry export say what they wrote
    assert link.is_symlink() and os.readlink(link) == "/proc/self/fd/1"
    no_temporaries(tmp_path)


@pytest.mark.parametrize("writer", WRITERS)
def test_a_regular_file_is_replaced_and_a_link_to_one_replaces_its_target(
    registered: Path, tmp_path: Path, writer: str
) -> None:
    want = expected(registered, tmp_path, writer)
    old, link = tmp_path / "old", tmp_path / "link"
    old.write_bytes(b"old content")
    link.symlink_to(old)
    for target in (old, link):
        old.write_bytes(b"old content")
        result = cli(registered, *WRITERS[writer](target))
        assert result.exit_code == 0, result.stderr
        assert old.read_bytes() == want and link.is_symlink() and os.readlink(link) == str(old)
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    result = cli(registered, *WRITERS[writer](dangling))
    assert result.exit_code == 3 and "link" in one_line(result) and not (tmp_path / "nowhere").exists()
    no_temporaries(tmp_path)


# ---------------------------------------------------------------- item 3: export -o DIR into another home


@pytest.mark.parametrize("mark", ["registry.db", "experiments"])
@pytest.mark.parametrize("force", [False, True])
def test_export_never_replaces_another_home(registered: Path, tmp_path: Path, mark: str, force: bool) -> None:
    other = tmp_path / "other-home"
    (other / "checkpoints" / "EXP-007").mkdir(parents=True)
    (other / "checkpoints" / "EXP-007" / "step-000004.pt").write_bytes(b"weights")
    if mark == "experiments":
        (other / "experiments").mkdir()
        (other / "experiments" / "EXP-007.yaml").write_text("id: EXP-007\n")
    else:
        (other / "registry.db").write_bytes(b"a registry")
    before = sorted(str(p.relative_to(other)) for p in other.rglob("*"))
    result = cli(registered, "export", "EXP-001", "-o", str(other), *(["--force"] if force else []))
    assert result.exit_code == 3, result.stderr
    line = one_line(result)
    assert str(other) in line and "octlm home" in line and mark in line
    assert sorted(str(p.relative_to(other)) for p in other.rglob("*")) == before
