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
else ``cc`` or ``gcc``) into ``$XDG_CACHE_HOME/octlm/native`` (or ``OCTLM_NATIVE_CACHE``), a folder checked as the
compile cache is, since code is loaded from it. The file is named by the hash of its source, loaded with ``ctypes``
into the global scope, and named in ``LD_PRELOAD`` for the processes this one starts. Whether MKL then computes the
tier's bits is not assumed: every run under the tier checks its canary against the tier's golden digest at start
(``train.canary.require_golden``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from octlm.runtime.native.compile_cache import checked

SOURCE = "int mkl_serv_intel_cpu_true(void) { return 1; }\n"
NAME = f"octlm-mkl-intel-{hashlib.sha256(SOURCE.encode()).hexdigest()[:12]}.so"
VARIABLE = "OCTLM_NATIVE_CACHE"
Environ = os._Environ[str] | dict[str, str]


class Unavailable(Exception):
    """The library cannot be built or loaded here; the message says why (no compiler, the compiler failed)."""


def folder(environ: Environ = os.environ) -> Path:
    """Where the library is kept (created 0700 and checked)."""
    explicit = environ.get(VARIABLE)
    base = Path(environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "octlm" / "native"
    return checked(Path(explicit) if explicit else base, "the native cache", VARIABLE)


def compiler(environ: Environ = os.environ) -> str | None:
    """The C compiler to build with: ``CC``, else ``cc`` or ``gcc`` on the PATH."""
    return (
        environ.get("CC")
        or shutil.which("cc", path=environ.get("PATH"))
        or shutil.which("gcc", path=environ.get("PATH"))
    )


def build(environ: Environ = os.environ) -> Path:
    """The library, built unless it is already in the cache (written under another name, then moved in place)."""
    import subprocess  # here, not at the top: every command imports this module (``determinism.pin``)
    import tempfile

    target = folder(environ) / NAME
    if target.is_file():
        return target
    cc = compiler(environ)
    if not cc:
        raise Unavailable("it builds a one-line C library and no C compiler was found (install cc or gcc, or set CC)")
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        source, built = Path(scratch) / "shim.c", Path(scratch) / NAME
        source.write_text(SOURCE, encoding="utf-8")
        try:
            done = subprocess.run(
                [cc, "-O2", "-shared", "-fPIC", "-o", str(built), str(source)],
                capture_output=True,
                text=True,
                timeout=120,
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            raise Unavailable(f"its one-line C library did not build ({cc}: {error})") from None
        if done.returncode != 0 or not built.is_file():
            said = (done.stderr.strip().splitlines() or ["no message"])[-1]
            raise Unavailable(f"its one-line C library did not build ({cc} exited {done.returncode}: {said})")
        os.replace(built, target)
    return target


def loaded() -> Path | None:
    """The library, when this process has it mapped (loaded by ``load``, or preloaded by the process that
    started this one); else None."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                if line.rstrip().endswith(NAME):
                    return Path(line.split(None, 5)[-1].strip())
    except OSError:
        pass
    return None


def load(environ: Environ = os.environ) -> tuple[Path, bool]:
    """Build (once) and load the library before torch; name it in ``LD_PRELOAD`` for the processes this one starts.
    The library, and whether ``LD_PRELOAD`` was set here (it was unset before)."""
    import ctypes

    path = loaded() or build(environ)
    try:
        ctypes.CDLL(str(path), mode=os.RTLD_GLOBAL)
    except OSError as error:
        raise Unavailable(f"its C library {path} did not load ({error})") from None
    preload = environ.get("LD_PRELOAD", "").split()
    if str(path) not in preload:
        environ["LD_PRELOAD"] = " ".join([str(path), *preload])
    return path, not preload
