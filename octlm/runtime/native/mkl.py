"""MKL's Intel code path on any vendor's processor: the one native piece of ``training.determinism: cross-vendor``.
Torch-free.

MKL chooses its kernels by processor. On an AMD processor it runs its Zen kernels whatever ``MKL_CBWR`` asks for,
so an AMD and an Intel machine get different bits from the same sgemm: ``vendor`` covers one vendor, and
``portable`` takes MKL's COMPATIBLE branch, which both honour, at 2-3x the step. MKL asks one exported function,
``mkl_serv_intel_cpu_true``, whether the processor is Intel, and torch's CPU library calls it through its procedure
linkage table. A library that defines it to answer 1, in the process's global scope before torch loads, therefore
makes MKL honour ``MKL_CBWR=AVX2,STRICT`` on AMD too: it runs the Intel AVX2 kernels an Intel processor runs under
the same setting (measured under qemu-user, docs/performance.md).

The library is the one line of C in ``SOURCE``. It is built once per user with the system's C compiler (``CC``,
else ``cc`` or ``gcc``, found on the ``PATH`` without its empty and relative entries, which name the current
folder: a home's own ``cc`` never runs) into ``$XDG_CACHE_HOME/octlm/native`` (or ``OCTLM_NATIVE_CACHE``), a
folder checked as every folder code is loaded from (``private``). The file is named by the hash of its source and
kept only once it answers: built in a scratch folder, loaded there on its own, asked ``mkl_serv_intel_cpu_true``
(it must answer 1), then linked into place. A file already there is never replaced (other processes may have it
mapped, and a mapped file replaced is no longer the one they hold): the first one linked in is used, checked as a
file code is loaded from (a regular file of this user's, not a link, writable by nobody else), and asked again when
it is loaded. It is loaded with ``ctypes`` into the global scope before torch loads, by every process that needs it:
the processes a run starts pin their tier themselves and load it then. It is never handed to them in
``LD_PRELOAD``, whose loader splits its paths at spaces and colons (under ``/home/John Smith`` it would load
``Smith/.cache/...`` from the folder the child starts in); and a library answering MKL's question that is not this
file in this folder is refused (``loaded``). Whether MKL then computes the tier's bits is not assumed: every run
under the tier checks its canary against the tier's golden digest at start (``train.canary.require_golden``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import Any

from octlm.core.errors import BadInput, Refused
from octlm.runtime.native.private import checked, checked_file

SYMBOL = "mkl_serv_intel_cpu_true"
SOURCE = f"int {SYMBOL}(void) {{ return 1; }}\n"
NAME = f"octlm-mkl-intel-{hashlib.sha256(SOURCE.encode()).hexdigest()[:12]}.so"
VARIABLE = "OCTLM_NATIVE_CACHE"
MODE = 0o500  # readable and executable by its owner alone: nothing writes it once it is in place
Environ = os._Environ[str] | dict[str, str]


class Unavailable(Exception):
    """The library cannot be built or loaded here; the message says why (no compiler, the compiler failed)."""


def folder(environ: Environ = os.environ) -> Path:
    """Where the library is kept (created 0700 and checked)."""
    explicit = environ.get(VARIABLE)
    base = Path(environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "octlm" / "native"
    return checked(Path(explicit) if explicit else base, "the native cache", VARIABLE)


def search_path(environ: Environ = os.environ) -> str:
    """``PATH`` (unset: the system's default) without its empty and relative entries: each names a folder relative
    to wherever the process stands (an empty one, the current folder), which may be a home someone else wrote."""
    given = environ.get("PATH", os.defpath)
    return os.pathsep.join(entry for entry in given.split(os.pathsep) if os.path.isabs(entry))


def compiler(environ: Environ = os.environ) -> str | None:
    """The C compiler to build with, as an absolute path: ``CC`` (a name is looked up on ``search_path``; a relative
    path, or a name not found, is refused), else ``cc`` or ``gcc`` on ``search_path``; None when there is none."""
    path, named = search_path(environ), environ.get("CC")
    if named and os.sep in named:
        if not os.path.isabs(named):
            raise Unavailable(f"CC={named} is a relative path (it would run from wherever octlm stands): give it whole")
        return named
    found = shutil.which(named, path=path) if named else None
    if named and not found:
        raise Unavailable(f"CC={named} is not on the PATH (its absolute folders): give its path, or unset CC")
    return found or shutil.which("cc", path=path) or shutil.which("gcc", path=path)


def build(environ: Environ = os.environ) -> Path:
    """The library in its folder: built and linked in unless a file is there already (never replaced), then checked as
    a file code is loaded from (``BadInput`` naming it, to be removed, when it is not safe)."""
    import tempfile  # here, not at the top: every command imports this module (``determinism.pin``)

    target = folder(environ) / NAME
    if not os.path.lexists(target):
        with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
            built = _compiled(environ, Path(scratch))
            try:
                os.link(built, target)  # never over a file that is there: another process may have it mapped
            except FileExistsError:
                pass  # another process linked its own in meanwhile: that one is used
            except OSError as error:
                raise Unavailable(f"its C library could not be put in {target.parent} ({error.strerror})") from None
    try:
        problem = checked_file(target)
    except OSError as error:
        problem = f"cannot be looked at ({error.strerror})"
    if problem:
        raise BadInput(
            f"the native cache's library {target}: {problem}; remove it (octlm builds it again) or set {VARIABLE}"
        )
    return target


def _compiled(environ: Environ, scratch: Path) -> Path:
    """The library built in ``scratch`` with the compiler (run with ``search_path`` as its ``PATH``), made
    ``MODE``, and asked on its own: it must answer 1, or nothing is kept (``Unavailable``)."""
    import subprocess

    cc = compiler(environ)
    if not cc:
        raise Unavailable("it builds a one-line C library and no C compiler was found (install cc or gcc, or set CC)")
    source, built = scratch / "shim.c", scratch / NAME
    source.write_text(SOURCE, encoding="utf-8")
    try:
        done = subprocess.run(
            [cc, "-O2", "-shared", "-fPIC", "-o", str(built), str(source)],
            capture_output=True,
            text=True,
            timeout=120,
            env={**environ, "PATH": search_path(environ)},
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise Unavailable(f"its one-line C library did not build ({cc}: {error})") from None
    if done.returncode != 0 or not built.is_file():
        said = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise Unavailable(f"its one-line C library did not build ({cc} exited {done.returncode}: {said})")
    os.chmod(built, MODE)
    if _answer_alone(built) != 1:
        raise Unavailable(f"the library {cc} built does not answer 1 to {SYMBOL} (nothing was kept): check CC")
    return built


def _answer_alone(path: Path) -> int | None:
    """What the library at ``path`` answers to ``SYMBOL``, loaded on its own (not into the global scope, where it
    would answer MKL) and closed again; None when it does not load or does not define it."""
    import _ctypes
    import ctypes

    try:
        library = ctypes.CDLL(str(path))
    except OSError:
        return None
    try:
        return _ask(library)
    finally:
        _ctypes.dlclose(library._handle)


def _ask(library: Any) -> int | None:
    """``SYMBOL``'s answer in ``library`` (a ``ctypes.CDLL``), or None when it does not define it."""
    import ctypes

    try:
        ask = getattr(library, SYMBOL)
    except AttributeError:
        return None
    ask.restype, ask.argtypes = ctypes.c_int, []
    return int(ask())


def interposer() -> str | None:
    """The file that answers MKL's question in this process's global scope (``load``'s library, or any library
    preloaded that defines ``SYMBOL``), torch's and MKL's own aside; None when MKL asks its own."""
    import ctypes

    class Found(ctypes.Structure):
        _fields_ = [
            ("file", ctypes.c_char_p),
            ("base", ctypes.c_void_p),
            ("name", ctypes.c_char_p),
            ("at", ctypes.c_void_p),
        ]

    try:
        scope = ctypes.CDLL(None)  # dlsym on it searches the program, what it was started with, and RTLD_GLOBAL
        address, found = ctypes.cast(getattr(scope, SYMBOL), ctypes.c_void_p), Found()
        known = scope.dladdr(address, ctypes.byref(found)) and found.file
    except (OSError, AttributeError):
        return None
    name = os.fsdecode(found.file) if known else "a library without a name"
    return None if os.path.basename(name).startswith(("libtorch", "libmkl")) else name


def loaded(environ: Environ = os.environ) -> Path | None:
    """The library, when it answers MKL's question in this process already (``load`` ran); None when nothing does.
    Any other file answering it is refused (``Refused``): its code runs here already, from a place octlm did not
    check (an ``LD_PRELOAD``)."""
    found = interposer()
    if found is None:
        return None
    target = folder(environ) / NAME
    if not os.path.isabs(found) or os.path.realpath(found) != os.path.realpath(target):
        raise Refused(
            f"MKL is told that the processor is Intel by {found}, not by {target}, the library octlm builds and checks "
            "(LD_PRELOAD names it?): start octlm without it"
        )
    return target


def load(environ: Environ = os.environ) -> Path:
    """Build (once) and load the library into the global scope before torch; the library. It must answer 1 there
    (``BadInput`` naming it, to be removed, when it does not)."""
    import ctypes

    path = loaded(environ) or build(environ)
    try:
        library = ctypes.CDLL(str(path), mode=os.RTLD_GLOBAL)
    except OSError as error:
        raise Unavailable(f"its C library {path} did not load ({error})") from None
    if _ask(library) != 1:
        raise BadInput(
            f"the native cache's library {path} does not answer 1 to {SYMBOL}: remove it (octlm builds it again)"
        )
    return path
