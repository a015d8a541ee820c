"""Which filesystem a folder lies on, read from the mount table, and the refusal of a home on a network one.

SQLite's WAL needs shared memory that every process sees alike, and ``flock`` over NFS or SMB is unreliable,
so a registry or an experiment lock on a network filesystem is how a registry gets corrupted. Torch-free;
reads ``/proc/self/mountinfo`` (Linux) and nothing else. Where the table cannot be read (macOS, some
containers) nothing is refused.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from octlm.core.errors import Refused

MOUNTINFO = Path("/proc/self/mountinfo")
MOUNTINFO_VARIABLE = "OCTLM_MOUNTINFO"  # for tests: a fake mount table in place of /proc/self/mountinfo
ALLOW_VARIABLE = "OCTLM_ALLOW_NETWORK_FS"  # "1": accept the risk of a home on a network filesystem
MAX_MOUNTINFO_BYTES = 16 << 20  # a mount table with tens of thousands of mounts is still far below

# Filesystems reached over a network or shared between hosts (where WAL's shared memory and flock fail);
# a FUSE filesystem is ``fuse.<name>`` in the mount table.
NETWORK_FILESYSTEMS = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb3",
        "smbfs",
        "ncpfs",
        "9p",
        "afs",  # NFS, SMB, NetWare, Plan 9 / WSL drives, AFS
        "lustre",
        "gpfs",
        "beegfs",
        "ceph",
        "glusterfs",
        "ocfs2",
        "gfs2",
        "orangefs",  # cluster filesystems
        "fuse.sshfs",
        "fuse.ceph-fuse",
        "fuse.glusterfs",
        "fuse.s3fs",
        "fuse.gcsfuse",
        "fuse.rclone",
        "fuse.juicefs",
        "fuse.davfs",
        "davfs",
        "fuse.mountpoint-s3",  # object stores and shared cloud filesystems
        "fuse.blobfuse2",
        "wekafs",
        "fuse.gvfsd-fuse",  # a desktop's remote folders
        "fuse.sshfs#",  # old sshfs: type "fuse", source "sshfs#user@host:" (see filesystem_of)
        "virtiofs",  # a virtual machine's folder shared from its host
        "vboxsf",
        "fuse.vmhgfs-fuse",
    }
)
# Filesystems of one machine's own disks and memory, where WAL and flock work: a home on any type in neither set
# is used, with a warning (``unfamiliar``), since a type octlm does not know may be shared over a network.
LOCAL_FILESYSTEMS = frozenset(
    {
        "ext2",
        "ext3",
        "ext4",
        "xfs",
        "btrfs",
        "zfs",
        "bcachefs",
        "f2fs",
        "jfs",
        "reiserfs",
        "nilfs2",
        "tmpfs",
        "ramfs",
        "overlay",  # containers' roots
        "aufs",
        "shiftfs",
        "squashfs",
        "erofs",
        "iso9660",
        "udf",
        "vfat",
        "msdos",
        "exfat",
        "ntfs",
        "ntfs3",
        "fuseblk",  # ntfs-3g and other FUSE filesystems on a local block device
        "hfs",
        "hfsplus",
        "apfs",
        "ufs",
        "ecryptfs",
        "devtmpfs",
    }
)

_ESCAPE = re.compile(r"\\([0-7]{3})")


def unescape(field: str) -> str:
    """A mount table field as the path it names: the kernel writes space, tab, newline and backslash as
    ``\\040``, ``\\011``, ``\\012`` and ``\\134``."""
    return _ESCAPE.sub(lambda match: chr(int(match.group(1), 8)), field)


def parse(text: str) -> list[tuple[str, str]]:
    """``(mount point, filesystem type)`` per line of a mountinfo table, in its order; malformed lines are
    skipped. The type is the first field after the lone ``-`` that ends the optional fields; a plain ``fuse``
    mount whose source says which program serves it (``sshfs#user@host:``) reads as ``fuse.sshfs#``."""
    table = []
    for line in text.splitlines():
        fields = line.split(" ")
        try:
            separator = fields.index("-", 6)
            fstype, source = (
                fields[separator + 1],
                unescape(fields[separator + 2]) if len(fields) > separator + 2 else "",
            )
            if fstype == "fuse" and "#" in source:
                fstype = f"fuse.{source.split('#', 1)[0]}#"
            table.append((unescape(fields[4]), fstype))
        except (ValueError, IndexError):
            continue
    return table


def read_table(source: str | os.PathLike[str] | None = None) -> str | None:
    """The mount table's text: from ``source``, else ``$OCTLM_MOUNTINFO``, else ``/proc/self/mountinfo``;
    None when it cannot be read."""
    path = Path(source if source is not None else os.environ.get(MOUNTINFO_VARIABLE) or MOUNTINFO)
    try:
        with open(path, "rb") as handle:
            return handle.read(MAX_MOUNTINFO_BYTES).decode("utf-8", "surrogateescape")
    except OSError:
        return None


def filesystem_of(path: str | os.PathLike[str], table: str | None = None) -> str | None:
    """The filesystem type of the mount that holds ``path`` (resolved; it need not exist yet): the entry with
    the longest mount point that contains it, the later one of equals (mounted on top). ``table`` is the
    mountinfo text (default: ``read_table()``); None when there is no table or no entry holds the path."""
    text = read_table() if table is None else table
    if text is None:
        return None
    resolved = os.path.realpath(path)
    best: tuple[int, str] | None = None
    for point, fstype in parse(text):
        if not point.startswith("/"):
            continue
        inside = resolved == point or resolved.startswith(point if point.endswith("/") else point + "/")
        if inside and (best is None or len(point.rstrip("/")) >= best[0]):
            best = (len(point.rstrip("/")), fstype)
    return best[1] if best is not None else None


def is_network(fstype: str | None) -> bool:
    return fstype is not None and fstype.lower() in NETWORK_FILESYSTEMS


def unfamiliar(root: str | os.PathLike[str], table: str | None = None) -> str | None:
    """A one-line warning when the home at ``root`` lies on a filesystem octlm knows neither as local nor as a
    network one (None otherwise, and always with ``OCTLM_ALLOW_NETWORK_FS=1`` or no readable mount table)."""
    if os.environ.get(ALLOW_VARIABLE, "").strip() == "1":
        return None
    fstype = filesystem_of(root, table)
    if fstype is None or is_network(fstype) or fstype.lower() in LOCAL_FILESYSTEMS:
        return None
    return (
        f"home {root} is on a filesystem octlm does not know ({fstype}): if it is shared over a network, the "
        f"registry can be corrupted there; keep the home on local disk (set {ALLOW_VARIABLE}=1 to silence this)"
    )


def refuse_network_home(root: str | os.PathLike[str], table: str | None = None) -> None:
    """Refused (exit 3, one line) when the home at ``root`` lies on a network filesystem, unless
    ``OCTLM_ALLOW_NETWORK_FS=1``. Called before the registry is opened or a lock is taken."""
    if os.environ.get(ALLOW_VARIABLE, "").strip() == "1":
        return
    fstype = filesystem_of(root, table)
    if is_network(fstype):
        raise Refused(
            f"home {root} is on a network filesystem ({fstype}), where SQLite's WAL and flock locks are unsafe: "
            "keep the home on local disk and move experiments with `octlm pack` or `octlm registry export`, "
            f"or set {ALLOW_VARIABLE}=1 to accept the risk"
        )
