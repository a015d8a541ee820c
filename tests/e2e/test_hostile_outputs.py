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
def test_a_regular_file_is_replaced_and_a_link_to_one_is_refused(registered: Path, tmp_path: Path, writer: str) -> None:
    """Issue 33 item 13: a link is never written through (it may have been planted in a shared folder)."""
    want = expected(registered, tmp_path, writer)
    old, link = tmp_path / "old", tmp_path / "link"
    old.write_bytes(b"old content")
    result = cli(registered, *WRITERS[writer](old))
    assert result.exit_code == 0 and old.read_bytes() == want, result.stderr
    old.write_bytes(b"old content")
    link.symlink_to(old)
    result = cli(registered, *WRITERS[writer](link))
    line = one_line(result)
    assert result.exit_code == 3 and "symbolic link" in line and str(old) in line and "nothing was written" in line
    assert old.read_bytes() == b"old content" and link.is_symlink() and os.readlink(link) == str(old)
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    result = cli(registered, *WRITERS[writer](dangling))
    assert result.exit_code == 3 and "link" in one_line(result) and not (tmp_path / "nowhere").exists()
    no_temporaries(tmp_path)


# ---------------------------------------------------------------- issue 33 item 13: sweep pack's own names


@pytest.fixture
def swept(registered: Path) -> Path:
    """A sweep of two replicates of EXP-001 (EXP-002, EXP-003), untrained: every one packs."""
    made = cli(registered, "sweep", "new", "two", "--from", "EXP-001", "--seeds", "2")
    assert made.exit_code == 0, made.stderr
    return registered


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    return victim


PLANTED: dict[str, Callable[[Path, Path], Path]] = {  # (the -o DIR, a victim file) -> the path planted in DIR
    "link at a trial's pack": lambda out, victim: _link(out / "EXP-002.tar", victim),
    "link at sweep.json": lambda out, victim: _link(out / "sweep.json", victim),
    "dangling link at a trial's pack": lambda out, victim: _link(out / "EXP-003.tar", out / "nothing"),
    "FIFO at a trial's pack": lambda out, victim: _fifo(out / "EXP-002.tar"),
    "device at a trial's pack": lambda out, victim: device(out, "EXP-003.tar", NULL),
    "folder at sweep.json": lambda out, victim: _folder(out / "sweep.json"),
}


def _link(path: Path, target: Path) -> Path:
    path.symlink_to(target)
    return path


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _folder(path: Path) -> Path:
    path.mkdir()
    return path


@pytest.mark.parametrize("case", sorted(PLANTED))
def test_sweep_pack_never_writes_through_what_was_planted_in_its_folder(swept: Path, tmp_path: Path, case: str) -> None:
    out, victim = tmp_path / "shared", _victim(tmp_path)
    out.mkdir()
    planted = PLANTED[case](out, victim)
    kind = planted.lstat().st_mode
    result = cli(swept, "sweep", "pack", "two", "-o", str(out))
    assert result.exit_code == 3, (result.stdout, result.stderr)
    line = one_line(result)
    assert str(planted) in line and "nothing was written" in line
    assert victim.read_bytes() == b"precious" and planted.lstat().st_mode == kind
    assert sorted(p.name for p in out.iterdir()) == [planted.name], "nothing written before the refusal"


def test_sweep_pack_refuses_a_linked_shard_folder(swept: Path, tmp_path: Path) -> None:
    out, elsewhere = tmp_path / "shared", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (out / "shard-1").symlink_to(elsewhere)
    result = cli(swept, "sweep", "pack", "two", "-o", str(out), "--shards", "2")
    assert result.exit_code == 3 and "shard-1" in one_line(result) and "symbolic link" in one_line(result)
    assert list(elsewhere.iterdir()) == [] and sorted(p.name for p in out.iterdir()) == ["shard-1"]
    assert cli(swept, "sweep", "pack", "two", "-o", str(tmp_path / "fresh"), "--shards", "2").exit_code == 0


OUTPUT_WRITERS: dict[str, Callable[[Path], list[str]]] = {
    **WRITERS,
    "export": lambda out: ["export", "EXP-001", "--format", "safetensors", "-o", str(out)],
    "sweep pack": lambda out: ["sweep", "pack", "two", "-o", str(out)],
}


@pytest.mark.parametrize("writer", OUTPUT_WRITERS)
def test_no_writer_follows_a_planted_link(swept: Path, tmp_path: Path, writer: str) -> None:
    """Every writer: a link where it writes (the ``-o`` file, export's ``-o`` folder, or the trial's pack that
    ``sweep pack`` names in its ``-o`` folder) is refused, and what the link names is left as it was."""
    victim = tmp_path / "victim"
    if writer == "export":
        victim.mkdir()
    else:
        victim.write_bytes(b"precious")
    out = tmp_path / "out"
    if writer == "sweep pack":
        out.mkdir()
        _link(out / "EXP-002.tar", victim)
    else:
        _link(out, victim)
    result = cli(swept, *OUTPUT_WRITERS[writer](out))
    assert result.exit_code == 3, (result.stdout, result.stderr)
    assert "symbolic link" in one_line(result)
    assert list(victim.iterdir()) == [] if victim.is_dir() else victim.read_bytes() == b"precious"


# ---------------------------------------------------------------- issue 45 item 13: links another user could plant


def _shared(tmp_path: Path, mode: int) -> Path:
    folder = tmp_path / f"shared-{mode:o}"
    folder.mkdir()
    folder.chmod(mode)
    return folder


SHARED: dict[str, Callable[[Path], Path]] = {  # where another user could plant a link -> a fresh name there
    "the real /dev/shm": lambda tmp_path: Path("/dev/shm") / f"octlm-test-{os.getpid()}-{tmp_path.name}",
    "a sticky world-writable folder": lambda tmp_path: _shared(tmp_path, 0o1777) / "out",
    "a group-writable folder": lambda tmp_path: _shared(tmp_path, 0o770) / "out",
    "another user's folder": lambda tmp_path: _foreign(tmp_path) / "out",
}


def _foreign(tmp_path: Path) -> Path:
    folder = tmp_path / "foreign"
    folder.mkdir(mode=0o755)
    os.chown(folder, 4242, 4242)
    return folder


@pytest.mark.parametrize("writer", WRITERS)
@pytest.mark.parametrize("where", SHARED)
@pytest.mark.parametrize("target", ["the victim's file", "a character device"])
def test_a_link_planted_where_others_write_is_never_followed(
    registered: Path, tmp_path: Path, writer: str, where: str, target: str
) -> None:
    """Issue 45 item 13: a link that another user planted in ``/dev/shm`` (world-writable, under ``/dev`` but none
    of the kernel's) made ``pack`` and ``report`` overwrite the victim's own file. A link in a folder others can
    write, or in another user's folder, is refused whatever it points to, and what it points to is left as it was."""
    if where == "the real /dev/shm" and not os.access("/dev/shm", os.W_OK):
        pytest.skip("no writable /dev/shm here")
    link = SHARED[where](tmp_path)
    victim = tmp_path / "victim"
    if target == "a character device":
        victim = device(tmp_path, "victim-null", NULL)
    else:
        victim.write_bytes(b"precious")
    before = victim.lstat()
    link.symlink_to(victim)
    try:
        result = cli(registered, *WRITERS[writer](link))
        line = one_line(result)
        assert result.exit_code == 3 and str(link) in line and "planted" in line and "nothing was written" in line
        assert link.is_symlink() and os.readlink(link) == str(victim)
    finally:
        link.unlink()
    after = victim.lstat()
    assert (after.st_mode, after.st_ino, after.st_mtime_ns) == (before.st_mode, before.st_ino, before.st_mtime_ns)
    assert target == "a character device" or victim.read_bytes() == b"precious"
    no_temporaries(link.parent)


@pytest.mark.parametrize("writer", WRITERS)
def test_a_link_owned_by_another_user_is_never_followed(registered: Path, tmp_path: Path, writer: str) -> None:
    """Issue 45 item 13, the link's own owner: one of another user's in the user's own folder is refused too."""
    null, link = device(tmp_path, "null", NULL), tmp_path / "out"
    link.symlink_to(null)
    os.lchown(link, 4242, 4242)
    result = cli(registered, *WRITERS[writer](link))
    line = one_line(result)
    assert result.exit_code == 3 and "another user (uid 4242)" in line and "nothing was written" in line
    link.unlink()
    link.symlink_to(null)  # the user's own link in the user's own folder is written through, as before
    assert cli(registered, *WRITERS[writer](link)).exit_code == 0 and null.lstat().st_rdev == NULL


@pytest.mark.parametrize("writer", WRITERS)
@pytest.mark.parametrize("name", ["/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"])
def test_the_kernel_s_links_still_write_to_a_redirected_stdout(
    registered: Path, tmp_path: Path, writer: str, name: str
) -> None:
    """What the kernel makes for a process's own files is still followed (``-o /dev/stdout > FILE``): the only links
    to a regular file that octlm writes through."""
    want = expected(registered, tmp_path, writer)
    redirected = tmp_path / "redirected"
    command = [sys.executable, "-m", "octlm", "--home", str(registered), *WRITERS[writer](Path(name))]
    with redirected.open("wb") as stdout:
        result = subprocess.run(command, stdout=stdout, stderr=subprocess.PIPE, timeout=120)
    assert result.returncode == 0, result.stderr
    assert redirected.read_bytes() == want
    no_temporaries(tmp_path)
