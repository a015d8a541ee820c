"""Private folders and files that code is loaded from: the compile cache (``compile_cache``) and the native
library's folder (``mkl``). Torch-free.

A folder octlm loads code from must be a real folder (not a link), owned by this user, writable by nobody else, and
so must every folder above it (owned by this user or root, writable by nobody else unless sticky, as ssh checks
the folders above ``~/.ssh``): whoever can write any of them could put their own code in place of octlm's.
Writable by the group counts as writable by nobody else when that group has one member, its owner, as OpenSSH
judges it (``secure_permissions``): Debian and Ubuntu give every user such a group and a umask of 002, so a user's
folders are often group-writable and are still private.

The folders above are checked *before* anything is created (root running with another user's ``HOME`` creates
nothing in it, rather than leave a folder of root's there that locks its owner out), and every folder octlm
creates on the way is made 0700 by octlm itself, one level at a time, whatever the umask (``mkdir -p`` would make
the levels above the last one ``0777 & ~umask``: group-writable under umask 002, then refused by the check above).
A file code is loaded from (``checked_file``) must be a regular file, not a link, owned by this user and writable
by nobody else.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from octlm.core.errors import BadInput

WHY = "and code is loaded from it"


def checked(folder: Path, source: str, variable: str) -> Path:
    """``folder``, created 0700 (with every missing folder above it) after the folders above it were checked, and
    checked; ``BadInput`` naming ``source`` and the ``variable`` that moves it if it is unsafe or cannot be made."""
    folder = folder.absolute()
    problem = _unsafe_ancestor(folder)
    if problem is None:
        try:
            _make_private(folder)
            problem = _unsafe(folder.lstat(), "folder")
        except OSError as error:
            raise BadInput(f"{source} {folder}: cannot be created ({error.strerror}); set {variable}") from None
    if problem:
        raise BadInput(f"{source} {folder}: {problem}; fix it or set {variable} to a folder of your own")
    return folder


def checked_file(path: Path) -> str | None:
    """Why the file at ``path`` must not be loaded (a link, not a regular file, another user's, writable by others),
    or None; ``OSError`` when it cannot be looked at (``FileNotFoundError``: not there)."""
    return _unsafe(path.lstat(), "file")


def _make_private(folder: Path) -> None:
    """Create ``folder`` and the missing folders above it, each 0700 whatever the umask (a folder that is there
    already is left as it is: the checks judge it)."""
    missing = [level for level in (folder, *folder.parents) if not os.path.lexists(level)]
    for level in reversed(missing):
        try:
            level.mkdir(mode=0o700)
        except FileExistsError:
            continue  # made meanwhile (by another octlm, say): judged as any folder that was there
        os.chmod(level, 0o700, follow_symlinks=False)


def _unsafe_ancestor(folder: Path) -> str | None:
    """The first folder above ``folder`` (links resolved; those not made yet are octlm's to make) that another user
    could use to swap the folder for their own: one that belongs to someone but this user or root, or that others
    can write to without being sticky (``/tmp``: others cannot rename or remove what is ours there)."""
    for ancestor in Path(os.path.realpath(folder)).parents:
        try:
            info = ancestor.stat()
        except FileNotFoundError:
            continue
        if _me() is not None and info.st_uid not in (0, _me()):
            return f"{ancestor}, a folder above it, belongs to another user, {WHY}"
        if _writable_by_others(info) and not info.st_mode & stat.S_ISVTX:
            return f"{ancestor}, a folder above it, is writable by other users, {WHY}"
    return None


def _unsafe(info: os.stat_result, kind: str) -> str | None:
    if stat.S_ISLNK(info.st_mode):
        return f"is a symbolic link, {WHY}"
    if not (stat.S_ISDIR if kind == "folder" else stat.S_ISREG)(info.st_mode):
        return f"is not a {'folder' if kind == 'folder' else 'regular file'}"
    if _me() is not None and info.st_uid != _me():
        return f"belongs to another user, {WHY}"
    if _writable_by_others(info):
        return f"is writable by other users, {WHY}"
    return None


def _me() -> int | None:
    return os.getuid() if hasattr(os, "getuid") else None


def _writable_by_others(info: os.stat_result) -> bool:
    """Writable by others, or by a group with another member than the owner."""
    if info.st_mode & stat.S_IWOTH:
        return True
    return bool(info.st_mode & stat.S_IWGRP) and not group_of_one(info.st_gid, info.st_uid)


def group_of_one(gid: int, uid: int) -> bool:
    """Whether group ``gid``'s one member is user ``uid``, as OpenSSH's ``secure_permissions`` judges it: every
    account whose primary group it is is ``uid``'s, its list of members is empty or ``uid``'s name alone, and it
    has a member (an empty group is typically a setgid program's)."""
    try:
        import grp
        import pwd

        group, owner = grp.getgrgid(gid), pwd.getpwuid(uid)
        primary = [account.pw_uid for account in pwd.getpwall() if account.pw_gid == gid]
    except (ImportError, KeyError):
        return False
    if any(member != uid for member in primary) or group.gr_mem not in ([], [owner.pw_name]):
        return False
    return bool(primary or group.gr_mem)
