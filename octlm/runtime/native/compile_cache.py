"""Where ``torch.compile`` keeps its graphs between processes. Torch-free.

Inductor's cache holds generated code (Python and shared libraries) that a later process loads and
runs. octlm points it at one folder per user, ``$XDG_CACHE_HOME/octlm/inductor`` (by default
``~/.cache/octlm/inductor``), or at ``OCTLM_COMPILE_CACHE``: compiled graphs survive between
processes and reboots and are shared by every experiment and home of the same shape.

It is deliberately not under a home's ``cache/``: a home may come from someone else (unpacked,
copied, on a shared disk), and its tokenizer and token files are data that octlm verifies, but a
cached graph is code. Torch's own default, ``/tmp/torchinductor_<user>``, is a name in a folder
every user can write. The folder is checked, and made 0700, as every folder octlm loads code from (``private``:
a real folder of this user's that nobody else can write, nor any folder above it).
``TORCHINDUCTOR_CACHE_DIR``, when set, wins.
"""

from __future__ import annotations

import os
from pathlib import Path

from octlm.runtime.native.private import checked

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
