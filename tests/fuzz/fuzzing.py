"""The fuzz harness that ``tests/fuzz/`` and ``benchmarks/fuzz.py`` share (issue 51): a valid home as octlm writes
it, made once; a fresh copy of it for every generated case, in a sandbox of its own; the mutations a case applies to
it (``Mutation``: bytes cut, flipped and spliced, JSON and YAML trees edited, SQL run, links, FIFOs and devices
planted); the command run in this process through Typer's runner, bounded in time and memory; and the properties
every case must keep (``check``):

- the command ends with exit 0 or a documented code (``core/errors.EXIT_CODES``), with at most two lines on stderr
  besides its progress lines, never a Python traceback (an exception that left the command is one);
- nothing is written outside the home: the sandbox around it (a folder of other files links point into, the current
  folder, HOME and the state folder with the token cache's signing key) is listed before and after, with each
  file's size, times and mode;
- no experiment, run or checkpoint that was there before is lost or changed: every file of ``experiments/``,
  ``runs/``, ``checkpoints/`` and ``.octlm/identities/`` as it stood after the mutation (its type and bytes), and the
  registry's experiments, runs and checkpoints rows (where the mutated registry could be read), are all still there
  after the command, unless the reader says that changing them is its command's job;
- nothing hangs (``LIMIT`` seconds a case, then a ``Hang`` is raised in the command) and nothing reads without bound
  (an address-space limit of ``HEADROOM`` above what the process holds; octlm saying "out of memory" on a home of a
  few megabytes is a failure too);
- whatever the reader adds (``Reader.extra``: the paired verdict of ``show A B``, a token file's bits).

A failure is a short string whose first words name its kind and where (``traceback: KeyError at
octlm/x.py:12``), so that the campaign counts distinct failures by it (``signature``).
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import os
import resource
import shutil
import signal
import sqlite3
import stat
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from octlm.core.errors import EXIT_CODES

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))  # conftest's helpers, also when benchmarks/fuzz.py imports this module

from conftest import write_corpus, write_experiment  # noqa: E402

DOCUMENTED = frozenset(int(code) for row in EXIT_CODES for code in row.codes.split(" / "))
LIMIT = 20.0  # seconds a case may take before it counts as a hang (a loaded box of two cores runs one in 0.05 s)
MUTATION_LIMIT = 5.0  # seconds a mutation may take (one that opens a FIFO an earlier one planted blocks)
HEADROOM = 3 << 30  # bytes of address space a case may add: a reader that reads a device whole stops there
IDS = ("EXP-001", "EXP-002")
PROTECTED = ("experiments", "runs", "checkpoints", ".octlm/identities")

# The suite's budget of each reader: a deterministic handful, a few seconds (derandomized: the same cases every
# run, so a failure is never a flake); the campaign's is benchmarks/fuzz.py's.
SUITE = settings(
    max_examples=int(os.environ.get("OCTLM_FUZZ_EXAMPLES", "20")),
    derandomize=True,
    deadline=None,
    database=None,
    print_blob=False,
    suppress_health_check=list(HealthCheck),
)


# ---------------------------------------------------------------- the valid home, made once


def build_valid(root: Path) -> dict[str, Any]:
    """A home as octlm writes it, in ``root/home``: a corpus, two tiny experiments trained 4 steps (evaluations at
    2 and 4 kept block by block, checkpoints at 2 and 4), their token file and cache, and ``root/state`` (the token
    cache's signing key). About two seconds. Returns what the readers need to know about it."""
    from conftest import cli

    home = write_corpus(root / "home")
    for n, experiment in enumerate(IDS, 1):
        training = {"steps": 4, "eval_interval": 2, "warmup_steps": 1, "learning_rate": 0.003 / n}
        write_experiment(home, experiment, training=training, checkpoint={"interval": 2, "keep": 2})
    with environment(XDG_STATE_HOME=str(root / "state"), NO_COLOR="1", OCTLM_NO_LOAD_CHECK="1"):
        for experiment in IDS:
            done = cli(home, "train", experiment, "-q")
            assert done.exit_code == 0, done.stderr
        inputs = root / "in"
        inputs.mkdir()
        for args in (
            ("pack", IDS[0], "-o", str(inputs / "pack.tar")),
            ("registry", "export", "-o", str(inputs / "records.jsonl")),
        ):
            done = cli(home, *args)
            assert done.exit_code == 0, done.stderr
        _sweep_pack(root, home, inputs / "sweep")
        paired = _paired_references(root, home)
    return {"home": str(home), "state": str(root / "state"), "in": str(inputs), "paired": paired}


def _sweep_pack(root: Path, home: Path, folder: Path) -> None:
    """A sweep of two untrained trials of EXP-001, packed by ``sweep pack`` into ``folder`` (made in a copy of the
    home, so that the home itself has no sweep to unpack over)."""
    from conftest import cli

    copy = root / "sweeping"
    shutil.copytree(home, copy, symlinks=True)
    for args in (
        ("sweep", "new", "lr", "--from", IDS[0], "--grid", "training.learning_rate=1e-3,3e-3"),
        ("sweep", "pack", "lr", "-o", str(folder)),
    ):
        done = cli(copy, *args)
        assert done.exit_code == 0, done.stderr
    shutil.rmtree(copy)


def _paired_references(root: Path, home: Path) -> dict[str, Any]:
    """What ``show A B --json`` pairs when A's and B's newest evaluations are at step 2 or 4 (their run files and
    blocks files cut back), keyed ``"2,4"``: the only paired verdicts a home made of these files may give."""
    from conftest import cli

    found = {}
    for cut in ((), (IDS[0],), (IDS[1],), IDS):
        copy = root / "cut"
        shutil.copytree(home, copy, symlinks=True)
        for experiment in cut:
            for name in (f"{experiment}.jsonl", f"{experiment}-blocks.jsonl"):
                lines = (copy / "runs" / name).read_bytes().splitlines(keepends=True)
                (copy / "runs" / name).write_bytes(b"".join(lines[:-1]))
        done = cli(copy, "show", *IDS, "--json")
        assert done.exit_code == 0, done.stderr
        paired = json.loads(done.stdout)["versus"][0]["paired"]
        found[",".join(map(str, paired["steps"]))] = paired
        shutil.rmtree(copy)
    return found


@contextlib.contextmanager
def environment(**values: str) -> Iterator[None]:
    """``os.environ`` with ``values`` set, as it was afterwards."""
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


# ---------------------------------------------------------------- a case's sandbox


@dataclass
class Sandbox:
    """One case's folder: ``home`` (a copy of the valid one), ``outside`` (files a planted link points at, which no
    command may change), ``cwd`` (the current folder while the command runs), ``user`` (HOME), ``state``
    (XDG_STATE_HOME, with the signing key) and ``out`` (where a command is told to write its output)."""

    root: Path

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def outside(self) -> Path:
        return self.root / "outside"

    @property
    def out(self) -> Path:
        return self.root / "out"

    def fill(self, valid: dict[str, Any]) -> None:
        for name in ("home", "state", "in"):
            _image(valid[name]).write(self.root / name)
        for folder in ("outside/folder", "cwd", "user", "out"):
            (self.root / folder).mkdir(parents=True)
        (self.outside / "secret.txt").write_text("not octlm's\n")
        (self.outside / "folder" / "kept.bin").write_bytes(bytes(range(256)))

    def listing(self) -> dict[str, tuple[Any, ...]]:
        """Everything around the home (``home`` and ``out`` left out): each path's type, size, mode and times, and
        for a regular file its sha256."""
        seen: dict[str, tuple[Any, ...]] = {}
        for top, folders, files in os.walk(self.root):
            relative = os.path.relpath(top, self.root)
            if relative == ".":
                folders[:] = [name for name in folders if name not in ("home", "out")]
            for name in folders + files:
                path = os.path.join(top, name)
                info = os.lstat(path)
                seen[os.path.join(relative, name)] = _stamp(path, info)
        return seen


def _stamp(path: str, info: os.stat_result) -> tuple[Any, ...]:
    kind = stat.S_IFMT(info.st_mode)
    data = _bytes(path) if stat.S_ISREG(info.st_mode) else None
    if stat.S_ISDIR(info.st_mode):  # a folder's own times change when octlm looks around it; its entries say more
        return (kind, stat.S_IMODE(info.st_mode))
    return (kind, info.st_size, stat.S_IMODE(info.st_mode), info.st_mtime_ns, data)


def _bytes(path: str | Path) -> bytes:
    """A file's bytes, kept whole to be compared (a home is a few megabytes, in memory: comparing them costs less
    than hashing them twice a case)."""
    with open(path, "rb") as handle:
        return handle.read()


@dataclass(frozen=True)
class Image:
    """A folder as it stands, read once: each entry's path, type, mode and times, and a file's bytes or a link's
    target. ``write`` makes a copy of it that shares no inode with it (a hard link would carry a case's writes back
    into the valid home), with the times kept (the token cache is keyed by the corpus's), in a few milliseconds where
    ``shutil.copytree`` took a case's tenth."""

    entries: tuple[tuple[str, int, int, int, bytes | str | None], ...]  # (path, mode, atime, mtime, data)

    @classmethod
    def read(cls, root: str | Path) -> Image:
        entries = []
        for top, folders, files in os.walk(root):
            for name in sorted(folders) + sorted(files):
                path = os.path.join(top, name)
                info = os.lstat(path)
                data: bytes | str | None = None
                if stat.S_ISLNK(info.st_mode):
                    data = os.readlink(path)
                elif stat.S_ISREG(info.st_mode):
                    data = _bytes(path)
                elif not stat.S_ISDIR(info.st_mode):
                    raise ValueError(f"{path}: neither a file, a folder nor a link")
                entries.append((os.path.relpath(path, root), info.st_mode, info.st_atime_ns, info.st_mtime_ns, data))
        info = os.lstat(root)
        entries.append((".", info.st_mode, info.st_atime_ns, info.st_mtime_ns, None))
        return cls(tuple(entries))

    def write(self, root: Path) -> None:
        root.mkdir(parents=True)
        for path, mode, atime, mtime, data in self.entries:
            target = root / path
            if isinstance(data, str):
                os.symlink(data, target)
                continue
            if data is None:
                target.mkdir(exist_ok=True)
            else:
                with open(target, "xb") as handle:
                    handle.write(data)
            os.chmod(target, stat.S_IMODE(mode))
            if data is not None:
                os.utime(target, ns=(atime, mtime))
        for path, _, atime, mtime, data in reversed(self.entries):  # a folder's times, once its entries are made
            if data is None:
                os.utime(root / path, ns=(atime, mtime))


_IMAGES: dict[str, Image] = {}


def _image(folder: str) -> Image:
    """The valid ``folder`` as an ``Image``, read once a process (it is never changed once made)."""
    if folder not in _IMAGES:
        _IMAGES[folder] = Image.read(folder)
    return _IMAGES[folder]


def protected_files(home: Path) -> dict[str, tuple[Any, ...]]:
    """The experiments', runs' and checkpoints' files as they stand: each path's type and (regular files) bytes."""
    seen: dict[str, tuple[Any, ...]] = {}
    for folder in PROTECTED:
        base = home / folder
        if not os.path.isdir(base) or os.path.islink(base):
            continue
        for top, folders, files in os.walk(base):
            for name in folders + files:
                path = os.path.join(top, name)
                info = os.lstat(path)
                kind = stat.S_IFMT(info.st_mode)
                readable = stat.S_ISREG(info.st_mode) and info.st_mode & 0o444
                seen[os.path.relpath(path, home)] = (kind, _bytes(path) if readable else info.st_size)
    return seen


ROWS = {
    "experiments": "select id from experiments",
    "runs": "select id, experiment_id from runs",
    "checkpoints": "select experiment_id, step, path from checkpoints",
}


def registry_image(home: Path) -> tuple[bytes, bytes] | None:
    """The registry's database and WAL as they stand (their bytes), or None where ``registry.db`` is not a file."""
    path = home / "registry.db"
    if not path.is_file() or path.is_symlink():
        return None
    wal = Path(f"{path}-wal")
    try:
        return _bytes(path), _bytes(wal) if wal.is_file() and not wal.is_symlink() else b""
    except OSError:
        return None


def registry_rows(image: tuple[bytes, bytes] | None, scratch: Path) -> dict[str, set[tuple[Any, ...]]] | None:
    """The registry's experiments, runs and checkpoints (their keys) as ``registry_image`` found them, or None where
    they cannot be read. Read from a copy of the database and its WAL in ``scratch``: SQLite writes the WAL index
    (``-shm``) of a database it reads in place, and a planted one may be a hard link to a file outside the home,
    which this must not change. The rows are a function of those two files' bytes: where both are as they were, the
    rows are too, and ``check`` reads them only where they differ."""
    if image is None:
        return None
    with tempfile.TemporaryDirectory(dir=scratch) as folder:
        for suffix, data in zip(("", "-wal"), image, strict=True):
            if suffix == "" or data:
                Path(folder, f"copy.db{suffix}").write_bytes(data)
        try:
            connection = sqlite3.connect(Path(folder) / "copy.db", timeout=0.1)
            try:
                return {table: set(connection.execute(query).fetchall()) for table, query in ROWS.items()}
            finally:
                connection.close()
        except (sqlite3.Error, ValueError, OverflowError, MemoryError):
            return None


# ---------------------------------------------------------------- running a command in this process


class Hang(BaseException):  # noqa: N818  # not an Exception: no ``except Exception`` of octlm's may swallow it
    """Raised in the command when a case passes ``LIMIT`` seconds."""


@dataclass
class Outcome:
    """What one command did: its exit code, what it wrote, and the exception that left it (None: it exited)."""

    code: int | None
    stdout: str
    stderr: str
    error: BaseException | None = None
    seconds: float = 0.0


def invoke(home: Path, args: Sequence[str], limit: float = LIMIT) -> Outcome:
    """``octlm --home HOME ARGS`` in this process, through Typer's runner (as ``tests/conftest.cli``), stopped by a
    ``Hang`` after ``limit`` seconds and by a MemoryError past ``HEADROOM`` more bytes of address space."""
    from typer.testing import CliRunner

    from octlm.cli.app import app

    def alarm(number: int, frame: Any) -> None:
        raise Hang(f"still running after {limit:g} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    started = time.perf_counter()
    try:
        resource.setrlimit(resource.RLIMIT_AS, (_address_space() + HEADROOM, hard))
        signal.setitimer(signal.ITIMER_REAL, limit)
        with _built_once(app), _no_gc_callbacks():
            result = CliRunner().invoke(app, ["--home", str(home), *args], catch_exceptions=True)
    except Hang as hang:  # raised outside the runner's own handling (between its steps)
        return Outcome(None, "", "", hang, time.perf_counter() - started)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    error = result.exception if not isinstance(result.exception, SystemExit) else None
    if error is not None and result.exc_info is not None:
        error.__traceback__ = result.exc_info[2]
    code = None if error is not None else result.exit_code
    return Outcome(code, result.stdout, result.stderr, error, time.perf_counter() - started)


@contextlib.contextmanager
def _no_gc_callbacks() -> Iterator[None]:
    """No Python code run by the garbage collector meanwhile (Hypothesis times its collections with a callback): a
    ``Hang`` raised while a callback runs is printed and swallowed by the collector ("Exception ignored in"), and
    the command would run on past its limit."""
    kept = gc.callbacks[:]
    gc.callbacks.clear()
    try:
        yield
    finally:
        gc.callbacks[:] = kept


_COMMANDS: dict[int, Any] = {}


@contextlib.contextmanager
def _built_once(app: Any) -> Iterator[None]:
    """Typer's runner builds the click command from the app at every call (90 ms of a 120 ms case, with every
    option's annotations read again); the process running octlm builds it once, and so do the cases here."""
    import typer.testing

    build = typer.testing._get_command
    if id(app) not in _COMMANDS:
        _COMMANDS[id(app)] = build(app)
    command = _COMMANDS[id(app)]
    typer.testing._get_command = lambda given: command if given is app else build(given)  # type: ignore[assignment]
    try:
        yield
    finally:
        typer.testing._get_command = build


def _address_space() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


# ---------------------------------------------------------------- mutations


@dataclass(frozen=True)
class Mutation:
    """One change to a fresh home; ``repr`` is the case as the campaign prints it."""

    def apply(self, sandbox: Sandbox) -> None:
        raise NotImplementedError


def _target(sandbox: Sandbox, path: str) -> Path:
    return sandbox.home / path


def _replace(target: Path, data: bytes) -> None:
    """``target`` holds ``data``, whatever it was (a planted link or folder is removed first)."""
    if target.is_symlink() or target.exists() and not target.is_dir():
        target.unlink()
    elif target.is_dir():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)


def _read(target: Path) -> bytes:
    try:
        return target.read_bytes() if target.is_file() and not target.is_symlink() else b""
    except OSError:
        return b""


@dataclass(frozen=True)
class Truncate(Mutation):
    path: str
    at: int  # where to cut, taken modulo the length + 1 (0: the file emptied)

    def apply(self, sandbox: Sandbox) -> None:
        target = _target(sandbox, self.path)
        data = _read(target)
        _replace(target, data[: self.at % (len(data) + 1)])


@dataclass(frozen=True)
class FlipBits(Mutation):
    path: str
    at: int
    mask: int

    def apply(self, sandbox: Sandbox) -> None:
        target = _target(sandbox, self.path)
        data = bytearray(_read(target))
        if data:
            data[self.at % len(data)] ^= self.mask or 1
        _replace(target, bytes(data))


@dataclass(frozen=True)
class Splice(Mutation):
    """``data`` put in at ``at`` (modulo the length), over ``cut`` bytes that were there."""

    path: str
    at: int
    cut: int
    data: bytes

    def apply(self, sandbox: Sandbox) -> None:
        target = _target(sandbox, self.path)
        old = _read(target)
        at = self.at % (len(old) + 1)
        _replace(target, old[:at] + self.data + old[at + self.cut :])


@dataclass(frozen=True)
class Write(Mutation):
    """The file holds ``data`` (random bytes, or a document made by a reader's strategy)."""

    path: str
    data: bytes

    def apply(self, sandbox: Sandbox) -> None:
        _replace(_target(sandbox, self.path), self.data)


PLANTS = ("fifo", "null-device", "zero-device", "folder", "link-outside", "link-dangling", "link-loop",
          "link-folder-outside", "hardlink-outside", "link-self-dir", "missing", "unreadable")  # fmt: skip


@dataclass(frozen=True)
class Plant(Mutation):
    """Something other than octlm's regular file where one was (or could be): a FIFO, a device, a folder, a link
    out of the home (to a file, a folder, nowhere, itself), a hard link to a file outside, nothing, a file nobody may
    read."""

    path: str
    kind: str

    def apply(self, sandbox: Sandbox) -> None:
        target = _target(sandbox, self.path)
        old = _read(target)
        if target.is_symlink() or target.exists() and not target.is_dir():
            target.unlink()
        elif target.is_dir():
            shutil.rmtree(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        outside = sandbox.outside / "secret.txt"
        make: dict[str, Callable[[], None]] = {
            "fifo": lambda: os.mkfifo(target),
            "null-device": lambda: os.mknod(target, 0o666 | stat.S_IFCHR, os.makedev(1, 3)),
            "zero-device": lambda: os.mknod(target, 0o666 | stat.S_IFCHR, os.makedev(1, 5)),
            "folder": lambda: target.mkdir(),
            "link-outside": lambda: target.symlink_to(outside),
            "link-dangling": lambda: target.symlink_to(sandbox.outside / "nothing-here"),
            "link-loop": lambda: target.symlink_to(target.name),
            "link-folder-outside": lambda: target.symlink_to(sandbox.outside / "folder", target_is_directory=True),
            "hardlink-outside": lambda: os.link(_copied_outside(sandbox, old, target.name), target),
            "link-self-dir": lambda: target.symlink_to("."),
            "missing": lambda: None,
            "unreadable": lambda: (target.write_bytes(old), target.chmod(0)),
        }
        make[self.kind]()


def _copied_outside(sandbox: Sandbox, data: bytes, name: str) -> Path:
    """A file outside the home holding ``data`` (what the home's file held), to be hard-linked into the home."""
    path = sandbox.outside / f"linked-{name}"
    path.write_bytes(data)
    return path


# ---------------------------------------------------------------- strategies: bytes, values, trees

EDGE_NUMBERS = (0, -1, 1, 2**31 - 1, 2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64, -(2**63) - 1, 10**400 // 10**300)
EDGE_FLOATS = (math.nan, math.inf, -math.inf, -0.0, 1e-320, 1.7976931348623157e308, 5e-324, 1e300)
EDGE_TEXT = ("", "\x00", "a\x00b", "\ud800", "é", "💥" * 3, "\u202e", "x" * 5000, "../../etc/passwd", "/", "\n", "%s")


def texts() -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(EDGE_TEXT), st.text(max_size=30))


def scalars() -> st.SearchStrategy[Any]:
    """Values of every JSON and YAML type, at and past their limits."""
    return st.one_of(
        st.none(),
        st.booleans(),
        st.sampled_from(EDGE_NUMBERS),
        st.integers(),
        st.sampled_from(EDGE_FLOATS),
        st.floats(allow_nan=True, allow_infinity=True),
        texts(),
    )


def values() -> st.SearchStrategy[Any]:
    """Scalars, and lists and mappings of them (a type swapped for another)."""
    return st.recursive(
        scalars(),
        lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(texts(), inner, max_size=4)),
        max_leaves=8,
    )


def random_bytes() -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.binary(max_size=200),
        st.sampled_from((b"", b"\x00" * 64, b"\xff\xfe", b"{", b"[]", b"null", b"\n\n", b"\xef\xbb\xbf{}")),
    )


def byte_mutations(path: str, size: int, boundaries: Sequence[int] = ()) -> st.SearchStrategy[Mutation]:
    """Changes to a file's bytes: cut at every kind of boundary (the given ones: line and record ends, pages), bits
    flipped, bytes spliced in (NUL, unicode, random), the whole replaced by random bytes."""
    positions = st.one_of(st.integers(0, max(size, 1)), st.sampled_from(tuple(boundaries) or (0,)))
    return st.one_of(
        st.builds(Truncate, st.just(path), positions),
        st.builds(FlipBits, st.just(path), positions, st.integers(1, 255)),
        st.builds(Splice, st.just(path), positions, st.integers(0, 16), random_bytes()),
        st.builds(Write, st.just(path), random_bytes()),
    )


def plants(path: str) -> st.SearchStrategy[Mutation]:
    return st.builds(Plant, st.just(path), st.sampled_from(PLANTS))


def line_boundaries(data: bytes) -> list[int]:
    """Offsets where a line, a JSON value or a structure begins or ends: where a cut is most telling."""
    marks = {0, len(data)}
    for index, byte in enumerate(data):
        if byte in b'\n,:{}[]"':
            marks.update((index, index + 1))
    return sorted(marks)


def edited(tree: Any, draw: st.DrawFn, depth: int = 0) -> Any:
    """``tree`` (parsed JSON or YAML) with one edit somewhere in it: a key dropped or added, a value of another
    type, a number at or past its limit, NaN or an infinity, unicode and NUL in a string, a list cut or grown."""
    if isinstance(tree, dict) and tree and depth < 6 and draw(st.integers(0, 3)) > 0:
        key = draw(st.sampled_from(sorted(tree, key=str)))
        action = draw(st.sampled_from(("descend", "descend", "drop", "add", "rename")))
        copy = dict(tree)
        if action == "descend":
            copy[key] = edited(tree[key], draw, depth + 1)
        elif action == "drop":
            del copy[key]
        elif action == "add":
            copy[draw(texts())] = draw(values())
        else:
            copy[draw(texts())] = copy.pop(key)
        return copy
    if isinstance(tree, list) and tree and depth < 6 and draw(st.integers(0, 3)) > 0:
        index = draw(st.integers(0, len(tree) - 1))
        action = draw(st.sampled_from(("descend", "descend", "drop", "duplicate", "add")))
        copy = list(tree)
        if action == "descend":
            copy[index] = edited(tree[index], draw, depth + 1)
        elif action == "drop":
            del copy[index]
        elif action == "duplicate":
            copy.insert(index, tree[index])
        else:
            copy.insert(index, draw(values()))
        return copy
    return draw(_near(tree))


def _near(value: Any) -> st.SearchStrategy[Any]:
    """A value in place of ``value``: of its own type at and past its limits, or of another type."""
    if isinstance(value, bool):
        same: st.SearchStrategy[Any] = st.booleans()
    elif isinstance(value, int):
        same = st.one_of(st.sampled_from(EDGE_NUMBERS), st.integers(value - 3, value + 3), st.just(-value))
    elif isinstance(value, float):
        same = st.one_of(st.sampled_from(EDGE_FLOATS), st.just(value * (1 + 1e-9)), st.just(-value))
    elif isinstance(value, str):
        same = st.one_of(texts(), st.just(value + "\x00"), st.just(value[: len(value) // 2]), st.just(value.upper()))
    else:
        same = values()
    return st.one_of(same, same, values())


def dumps(tree: Any) -> bytes:
    """JSON as any writer might leave it: NaN and Infinity written out, lone surrogates kept as escapes."""
    return json.dumps(tree, allow_nan=True).encode()


def yaml_dumps(tree: Any) -> bytes:
    try:
        return yaml.safe_dump(tree, sort_keys=False, allow_unicode=True).encode("utf-8", "surrogatepass")
    except yaml.YAMLError:
        return json.dumps(tree, allow_nan=True).encode()  # JSON is YAML


def jsonl_edits(path: str, data: bytes) -> st.SearchStrategy[Mutation]:
    """A JSON-lines file with one line's object edited (``edited``), a line dropped, duplicated or swapped."""
    lines = data.split(b"\n")
    parsed = [json.loads(line) for line in lines if line.strip()]

    @st.composite
    def build(draw: st.DrawFn) -> Mutation:
        trees = list(parsed)
        index = draw(st.integers(0, max(len(trees) - 1, 0)))
        action = draw(st.sampled_from(("edit", "edit", "edit", "drop", "duplicate", "swap", "many")))
        if not trees:
            trees = [draw(values())]
        elif action == "edit":
            trees[index] = edited(trees[index], draw)
        elif action == "drop":
            del trees[index]
        elif action == "duplicate":
            trees.insert(index, trees[index])
        elif action == "swap":
            trees[index], trees[-1] = trees[-1], trees[index]
        else:
            trees = [edited(tree, draw) for tree in trees]
        return Write(path, b"".join(dumps(tree) + b"\n" for tree in trees))

    return build()


def json_edits(path: str, data: bytes) -> st.SearchStrategy[Mutation]:
    """A JSON file with its tree edited (``edited``)."""
    tree = json.loads(data)

    @st.composite
    def build(draw: st.DrawFn) -> Mutation:
        return Write(path, dumps(edited(tree, draw)))

    return build()


def file_mutations(path: str, data: bytes, structured: st.SearchStrategy[Mutation] | None = None):
    """Every kind of change to one file of the home: its structure edited (when given), its bytes, or a plant."""
    bytewise = byte_mutations(path, len(data), line_boundaries(data)[:200])
    choices = [bytewise, plants(path)] + ([structured, structured] if structured is not None else [])
    return st.one_of(*choices)


# ---------------------------------------------------------------- the properties


@dataclass
class Reader:
    """A reader under test: ``cases`` draws (mutations, command) pairs given the valid home's facts; ``changes`` names
    the protected paths (prefixes) its command may change; ``rows_may_change``: its command may remove registry rows
    (none does: importing and unpacking add); ``extra`` checks what only this reader promises."""

    name: str
    cases: Callable[[dict[str, Any]], st.SearchStrategy[tuple[tuple[Mutation, ...], tuple[str, ...]]]]
    changes: tuple[str, ...] = ()
    rows_may_change: bool = False
    extra: Callable[[dict[str, Any], Sandbox, Outcome, tuple[str, ...]], list[str]] | None = None


def check(reader: Reader, valid: dict[str, Any], mutations: Sequence[Mutation], args: Sequence[str]) -> list[str]:
    """Run one case in a fresh sandbox and return the properties it broke (empty: none)."""
    base = Path(tempfile.mkdtemp(prefix=f"fuzz-{reader.name}-", dir=valid.get("scratch")))
    sandbox = Sandbox(base)
    cwd = os.getcwd()
    try:
        sandbox.fill(valid)
        for mutation in mutations:
            applied(mutation, sandbox)
        args = [arg.replace("{out}", str(sandbox.out)).replace("{home}", str(sandbox.home)) for arg in args]
        around, files, registry = sandbox.listing(), protected_files(sandbox.home), registry_image(sandbox.home)
        os.chdir(base / "cwd")
        with environment(HOME=str(base / "user"), XDG_STATE_HOME=str(base / "state"), NO_COLOR="1"):
            outcome = invoke(sandbox.home, args)
        os.chdir(cwd)
        failures = properties(outcome)
        failures += _outside(around, sandbox.listing())
        failures += _kept(reader, files, protected_files(sandbox.home), registry, registry_image(sandbox.home), base)
        if reader.extra is not None and not failures:
            failures += reader.extra(valid, sandbox, outcome, tuple(args))
        return failures
    finally:
        os.chdir(cwd)
        _remove(base)


def applied(mutation: Mutation, sandbox: Sandbox) -> None:
    """``mutation`` applied, or skipped where it cannot apply over what an earlier one left (a file gone, a FIFO
    planted where it would read: it is given ``MUTATION_LIMIT`` seconds, then stopped)."""

    def alarm(number: int, frame: Any) -> None:
        raise Hang("a mutation blocked")

    previous = signal.signal(signal.SIGALRM, alarm)
    try:
        signal.setitimer(signal.ITIMER_REAL, MUTATION_LIMIT)
        with _no_gc_callbacks():
            mutation.apply(sandbox)
    except (OSError, Hang):
        pass
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _remove(base: Path) -> None:
    shutil.rmtree(base, ignore_errors=True)
    if not os.path.lexists(base):
        return
    for top, folders, files in os.walk(base):  # a planted file nobody may read, or a folder nobody may enter
        for name in folders + files:
            path = os.path.join(top, name)
            if not os.path.islink(path):
                with contextlib.suppress(OSError):
                    os.chmod(path, 0o700)
    shutil.rmtree(base, ignore_errors=True)


def properties(outcome: Outcome) -> list[str]:
    """Exit code, stderr and traceback: what every command must keep whatever it read."""
    if isinstance(outcome.error, Hang):
        return [f"hang: {outcome.error}"]
    if outcome.error is not None:
        return [f"traceback: {type(outcome.error).__name__} at {_where(outcome.error)}: {str(outcome.error)[:200]}"]
    failures = []
    if outcome.code not in DOCUMENTED:
        failures.append(f"undocumented exit {outcome.code}")
    if "Traceback (most recent call last)" in outcome.stderr + outcome.stdout:
        failures.append("traceback printed")
    said = [line for line in outcome.stderr.splitlines() if line.strip() and not _progress(line)]
    if len(said) > 2:
        failures.append(f"{len(said)} lines on stderr: {said[:3]}")
    if "out of memory" in outcome.stderr:
        failures.append(f"unbounded read: {outcome.stderr.strip()[:200]}")
    return failures


def _progress(line: str) -> bool:
    """A progress line (``16:35:59 reading corpus: ...``), which a command writes as it works."""
    return len(line) > 9 and line[2] == ":" and line[5] == ":" and line[:2].isdigit() and line[8] == " "


def _where(error: BaseException) -> str:
    """The innermost frame of octlm's code the exception passed (else the innermost of all): ``octlm/x.py:12``."""
    frames = traceback.extract_tb(error.__traceback__) if error.__traceback__ else []
    ours = [frame for frame in frames if f"{os.sep}octlm{os.sep}" in frame.filename]
    frame = (ours or frames or [None])[-1]
    if frame is None:
        return "?"
    filename = frame.filename
    with contextlib.suppress(ValueError):
        filename = os.path.relpath(filename, REPO)
    return f"{filename}:{frame.lineno}"


def _outside(before: dict[str, tuple[Any, ...]], after: dict[str, tuple[Any, ...]]) -> list[str]:
    changed = sorted(path for path in before.keys() | after.keys() if before.get(path) != after.get(path))
    return [f"written outside the home: {changed[:4]}"] if changed else []


def _kept(
    reader: Reader,
    before: dict[str, tuple[Any, ...]],
    after: dict[str, tuple[Any, ...]],
    registry_before: tuple[bytes, bytes] | None,
    registry_after: tuple[bytes, bytes] | None,
    scratch: Path,
) -> list[str]:
    failures = []
    lost = sorted(p for p in before if before[p] != after.get(p) and not p.startswith(reader.changes or ("\0",)))
    if lost:
        failures.append(f"lost or changed: {lost[:4]}")
    if registry_before == registry_after or reader.rows_may_change:
        return failures  # the same bytes hold the same rows
    rows_before = registry_rows(registry_before, scratch)
    if rows_before is not None:
        rows_after = registry_rows(registry_after, scratch)
        if rows_after is None:
            failures.append("the registry could be read before the command and not after")
        else:
            gone = {table: rows_before[table] - rows_after[table] for table in ROWS}
            if any(gone.values()):
                failures.append(f"registry rows lost: { {t: sorted(map(str, g))[:3] for t, g in gone.items() if g} }")
    return failures


def signature(failure: str) -> str:
    """What makes two failures the same: the failure's kind and where (a traceback's type and frame, a hang's
    command), not its changing details."""
    head = failure.split(": ")
    if failure.startswith("traceback:"):
        return ": ".join(head[:2])
    if failure.startswith(("lost or changed", "written outside", "registry rows lost", "verdict")):
        return head[0]
    return head[0][:80]


def cases_of(mutation_lists: st.SearchStrategy[Sequence[Mutation]], commands: Sequence[Sequence[str]]):
    """(mutations, command) pairs: the mutations given, and one of ``commands``."""
    return st.tuples(mutation_lists.map(tuple), st.sampled_from([tuple(command) for command in commands]))


def run_suite_case(reader: Reader, valid: dict[str, Any], case: tuple[tuple[Mutation, ...], tuple[str, ...]]):
    """The suite's check of one case: every property kept, else an assertion naming those broken."""
    mutations, args = case
    failures = check(reader, valid, mutations, args)
    assert not failures, f"{reader.name}: {mutations} `octlm {' '.join(args)}`: {failures}"


WHERE = ("path", "remote_host", "remote_path")  # where a checkpoint's file lies: another home's once imported


def records_of(text: str) -> list[dict[str, Any]]:
    """The records of an export, in order, each checkpoint's without where its file lies (the home that imports it
    records the file as the exporting box's: ``host:path``)."""
    found = [json.loads(line) for line in text.splitlines()]
    return [{k: v for k, v in r.items() if r["type"] != "checkpoint" or k not in WHERE} for r in found]


def valid_of(factory: Any) -> Iterator[dict[str, Any]]:
    """The valid home for a test module, made once for every worker of the run (``conftest.made_once``), and a
    folder for its cases' sandboxes, in memory where the box has /dev/shm (a case is a few dozen small files)."""
    from conftest import made_once

    valid = made_once(factory, "fuzz-valid-home", build_valid)
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    scratch = tempfile.mkdtemp(prefix="octlm-fuzz-", dir=shm)
    try:
        yield {**valid, "scratch": scratch}
    finally:
        _remove(Path(scratch))
