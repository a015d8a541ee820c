"""A home on a network filesystem is refused before the registry is opened or a lock taken (issue 16, part 4).

The mount table is a fake one (``OCTLM_MOUNTINFO``), so these run on any box."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import cli, octlm

from octlm.core import mounts
from octlm.core.errors import Refused
from octlm.core.home import Home

ROOT_LINE = "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw"


def table(*entries: tuple[str, str]) -> str:
    """A mountinfo text: the root on ext4, then ``(mount point as written in the table, fstype)`` entries."""
    lines = [ROOT_LINE]
    for number, (point, fstype) in enumerate(entries, start=40):
        lines.append(f"{number} 22 0:{number} / {point} rw,relatime shared:{number} master:2 - {fstype} src:/x rw")
    return "\n".join(lines) + "\n"


@pytest.fixture
def fake_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Write a fake mount table and point ``OCTLM_MOUNTINFO`` at it; returns the writer."""
    path = tmp_path / "mountinfo"
    monkeypatch.setenv(mounts.MOUNTINFO_VARIABLE, str(path))
    monkeypatch.delenv(mounts.ALLOW_VARIABLE, raising=False)

    def write(*entries: tuple[str, str]) -> Path:
        path.write_text(table(*entries))
        return path

    return write


def test_parse_reads_the_type_after_the_separator_and_unescapes_mount_points() -> None:
    text = table(("/mnt/my\\040data", "nfs4"), ("/srv/tab\\011and\\134back", "cifs"))
    text += "garbage line\n41 22 0:1 / /no/separator rw\n"
    assert mounts.parse(text) == [("/", "ext4"), ("/mnt/my data", "nfs4"), ("/srv/tab\tand\\back", "cifs")]


def test_the_longest_mount_point_holding_the_path_wins() -> None:
    text = table(("/data", "nfs4"), ("/data/local", "ext4"), ("/dat", "cifs"))
    assert mounts.filesystem_of("/data/x/y", text) == "nfs4"
    assert mounts.filesystem_of("/data/local/home", text) == "ext4"
    assert mounts.filesystem_of("/data/localer", text) == "nfs4"  # by path components, not characters
    assert mounts.filesystem_of("/datx", text) == "ext4"
    assert mounts.filesystem_of("/data/not/yet/created", text) == "nfs4"
    assert mounts.filesystem_of("/x", table(("/", "nfs"))) == "nfs"  # mounted over the root: the later one
    assert mounts.filesystem_of("/x", "") is None


def test_every_listed_filesystem_is_refused_and_local_ones_are_not() -> None:
    for fstype in sorted(mounts.NETWORK_FILESYSTEMS):
        with pytest.raises(Refused, match=rf"\({fstype}\)"):
            mounts.refuse_network_home("/h", table(("/h", fstype)))
    for fstype in ("ext4", "xfs", "btrfs", "tmpfs", "zfs", "overlay", "fuse"):
        mounts.refuse_network_home("/h", table(("/h", fstype)))


def test_an_unreadable_table_refuses_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(mounts.MOUNTINFO_VARIABLE, str(tmp_path / "missing"))
    assert mounts.read_table() is None and mounts.filesystem_of(tmp_path) is None
    mounts.refuse_network_home(tmp_path)


def test_an_nfs4_home_is_refused_with_one_line_and_nothing_written(home: Path, fake_table) -> None:
    fake_table((str(home), "nfs4"))
    shell = octlm(home, "new", timeout=120)  # as a script sees it: a new process, one line, exit 3
    results = [(["new"], shell.returncode, shell.stderr)]
    for args in (["show"], ["show", "EXP-001"], ["train", "EXP-001", "--until", "1"], ["rm", "EXP-001", "--yes"]):
        result = cli(home, *args)
        results.append((args, result.exit_code, result.stderr))
    for args, code, stderr in results:
        lines = stderr.strip().splitlines()
        assert code == 3 and len(lines) == 1, (args, stderr)
        assert f"home {home} is on a network filesystem (nfs4)" in lines[0]
        assert "octlm pack" in lines[0] and "OCTLM_ALLOW_NETWORK_FS=1" in lines[0]
    assert not (home / "registry.db").exists() and not (home / "locks").exists()
    assert sorted(p.name for p in (home / "experiments").iterdir()) == ["EXP-001.yaml"]


def test_a_lock_is_refused_too(home: Path, fake_table) -> None:
    fake_table((str(home), "nfs"))
    with pytest.raises(Refused, match="network filesystem"):
        Home(home).lock_path("EXP-001")


def test_a_local_ext4_home_works(home: Path, fake_table) -> None:
    fake_table((str(home), "ext4"), (str(home.parent), "nfs4"))
    assert cli(home, "new").stdout.strip() == "EXP-002"
    assert cli(home, "show").exit_code == 0


def test_the_override_accepts_the_risk(home: Path, fake_table, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_table((str(home), "nfs4"))
    assert cli(home, "new").exit_code == 3
    monkeypatch.setenv(mounts.ALLOW_VARIABLE, "1")
    assert cli(home, "new").stdout.strip() == "EXP-002"
    assert cli(home, "show", "EXP-002").exit_code == 0


def test_a_home_with_a_space_under_an_escaped_mount_point(tmp_path: Path, fake_table) -> None:
    spaced = tmp_path / "my home"
    fake_table((str(spaced).replace(" ", "\\040"), "cifs"))
    result = cli(spaced, "new")
    assert result.exit_code == 3 and "(cifs)" in result.stderr
    assert not spaced.exists() or not any(spaced.iterdir())


def test_the_newer_network_and_shared_filesystems_are_refused(fake_table, home: Path) -> None:
    for fstype in ("fuse.mountpoint-s3", "fuse.blobfuse2", "wekafs", "fuse.gvfsd-fuse", "virtiofs", "vboxsf"):
        with pytest.raises(Refused, match=rf"\({fstype}\)"):
            mounts.refuse_network_home(home, table((str(home), fstype)))
    old_sshfs = ROOT_LINE + f"\n41 22 0:41 / {home} rw,relatime - fuse sshfs#me@box:/data rw\n"
    assert mounts.filesystem_of(home, old_sshfs) == "fuse.sshfs#"
    with pytest.raises(Refused, match=r"\(fuse.sshfs#\)"):
        mounts.refuse_network_home(home, old_sshfs)


def test_an_unknown_filesystem_is_used_with_one_warning(fake_table, home: Path) -> None:
    fake_table((str(home), "fuse.mysteryfs"))
    result = octlm(home, "show")
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "does not know" in line]
    assert len(warnings) == 1 and "(fuse.mysteryfs)" in warnings[0]
    fake_table((str(home), "xfs"))
    assert "does not know" not in octlm(home, "show").stderr
    for known in sorted(mounts.LOCAL_FILESYSTEMS):
        assert mounts.unfamiliar(home, table((str(home), known))) is None, known
