"""Where ``torch.compile`` keeps its graphs between processes. Torch-free.

Inductor's cache holds generated code (Python and shared libraries) that a later process loads and
runs. octlm points it at one folder per user, ``$XDG_CACHE_HOME/octlm/inductor`` (by default
``~/.cache/octlm/inductor``), or at ``OCTLM_COMPILE_CACHE``: compiled graphs survive between
processes and reboots and are shared by every experiment and home of the same shape.

It is deliberately not under a home's ``cache/``: a home may come from someone else (unpacked,
copied, on a shared disk), and its tokenizer and token files are data that octlm verifies, but a
cached graph is code. Torch's own default, ``/tmp/torchinductor_<user>``, is a name in a folder
every user can write. The folder must be a real folder (not a link) owned by this user and not
writable by others, and so must every folder above it (owned by this user or root, writable by nobody else unless
sticky, as ssh checks the folders above ``~/.ssh``); octlm creates it with mode 0700.
``TORCHINDUCTOR_CACHE_DIR``, when set, wins.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from octlm.core.errors import BadInput

VARIABLE = "OCTLM_COMPILE_CACHE"


def directory(environ: os._Environ[str] | dict[str, str] = os.environ) -> Path:
    """The compile cache folder for this user (created 0700), checked; ``BadInput`` if unsafe."""
    explicit = environ.get(VARIABLE)
    if explicit:
        folder, source = Path(explicit), VARIABLE
    else:
        base = environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        folder, source = Path(base) / "octlm" / "inductor", "the compile cache"
    return checked(folder, source, VARIABLE)


def checked(folder: Path, source: str, variable: str) -> Path:
    """``folder`` created 0700 and checked as a place code is loaded from; ``BadInput`` naming ``source`` and
    the ``variable`` that moves it, if it cannot be created or is unsafe."""
    folder = folder.absolute()
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = folder.lstat()
    except OSError as error:
        raise BadInput(f"{source} {folder}: cannot be created ({error.strerror}); set {variable}") from None
    problem = _unsafe(info) or _unsafe_ancestor(folder)
    if problem:
        raise BadInput(f"{source} {folder}: {problem}; fix it or set {variable} to a folder of your own")
    return folder


def _unsafe_ancestor(folder: Path) -> str | None:
    """As ssh checks the folders above ``~/.ssh``: every folder above the cache (links resolved) must belong to
    this user or to root, and nobody else may write to it unless it is sticky (``/tmp``: others cannot rename or
    remove what is ours there), or whoever can write there could swap the cache for their own code."""
    me = os.getuid() if hasattr(os, "getuid") else None
    for ancestor in Path(os.path.realpath(folder)).parents:
        info = ancestor.stat()
        if me is not None and info.st_uid not in (0, me):
            return f"{ancestor}, a folder above it, belongs to another user, and compiled code is loaded from it"
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not info.st_mode & stat.S_ISVTX:
            return f"{ancestor}, a folder above it, is writable by other users, and compiled code is loaded from it"
    return None


def _unsafe(info: os.stat_result) -> str | None:
    if stat.S_ISLNK(info.st_mode):
        return "is a symbolic link, and compiled code is loaded from it"
    if not stat.S_ISDIR(info.st_mode):
        return "is not a folder"
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        return "belongs to another user, and compiled code is loaded from it"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "is writable by other users, and compiled code is loaded from it"
    return None


def use(environ: os._Environ[str] | dict[str, str] = os.environ) -> str:
    """Point Inductor at the cache (unless the user set ``TORCHINDUCTOR_CACHE_DIR``); the folder in use.

    Torch writes its own default into ``TORCHINDUCTOR_CACHE_DIR`` the first time anything asks where its
    cache is, so that value counts as unset."""
    chosen = environ.get("TORCHINDUCTOR_CACHE_DIR")
    if not chosen or chosen == _torch_default():
        environ["TORCHINDUCTOR_CACHE_DIR"] = str(directory(environ))
    return environ["TORCHINDUCTOR_CACHE_DIR"]


def _torch_default() -> str | None:
    try:  # a torch-free module of torch's; only imported when a compile is about to happen
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    except ImportError:
        return None
    return os.path.abspath(default_cache_dir())
