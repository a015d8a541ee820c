"""The registry's connection (torch-free): refusing a ``registry.db`` or a side file of it that is not SQLite's
own before anything opens it, opening (WAL, busy handling), migrating, and write transactions. ``registry.py``
builds the named reads and writes on it.

``RegistryBase(path, create=False)`` reads only: ``mode=ro`` (``immutable=1`` on a read-only medium), never
creating, migrating (a pending migration runs on a copy in memory) or switching the journal mode. Reads return plain
dicts (``migrations.ExperimentRow`` ... ``MetricRow`` type them) with the JSON cells decoded (``cells.decoded``).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Self, TypeVar

from octlm.core.errors import BadInput, Refused
from octlm.core.fsutil import kind_of
from octlm.store.base.cells import decoded
from octlm.store.migrations import NAMES

BUSY_TIMEOUT_S = 60.0
KNOWN_MIGRATIONS = tuple(NAMES)  # every migration this octlm knows, in order

T = TypeVar("T")


def _refuse_unsafe(path: Path, writing: bool) -> None:
    """Refused before SQLite opens it: a ``registry.db`` that is not a regular file (a FIFO would hang the opening),
    and, to write, one that is a link (rows would go into another home's registry; a dangling one would make a
    database outside the home) or a file with other hard links (written in place, the other names' file would change
    too). Reading through a link never writes, so it is let be."""
    try:
        info = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return  # nothing there: opening says what is wrong with the folder, if anything
    if stat.S_ISLNK(info.st_mode):
        if writing:
            raise Refused(
                f"{path} is a symbolic link to {os.readlink(path)}: octlm writes only the registry of the home itself; "
                "make it a plain file of the home (move the database here), nothing was changed"
            )
        try:
            info = os.stat(path)
        except FileNotFoundError:
            return  # a link to nothing: read as no registry
    if not stat.S_ISREG(info.st_mode):
        raise Refused(f"{path} is {kind_of(info.st_mode)}, not a registry: move it aside; nothing was changed")
    if writing and info.st_nlink > 1:  # a hard link: every row written would change the other name's file too
        raise Refused(
            f"{path} has {info.st_nlink} hard links (another name elsewhere shares its bytes, and writing it would "
            f"change that file too): make it a file of its own (cp {path.name} {path.name}.own && mv "
            f"{path.name}.own {path.name}); nothing was changed"
        )


SIDE_FILES = ("-journal", "-wal", "-shm")  # SQLite's files beside a database: rollback journal, WAL, WAL index


def _side_owners(real: str) -> set[int]:
    try:
        return {os.stat(real).st_uid, os.geteuid()}
    except OSError:
        return {os.geteuid()}


def _refuse_unsafe_sides(path: Path) -> None:
    """Refused before SQLite opens anything: a side file of the registry (``registry.db-journal``, ``-wal``,
    ``-shm``, beside the file SQLite opens: the link's target when ``registry.db`` is a link) that SQLite would open
    as its own but that is not: a link (written through), a FIFO or device (the opening hangs, every command with
    it), a folder, a file of a user other than the registry's owner and this one (planted), or a hard link to a file
    elsewhere (written through as a link is). The line names the
    side file and its fix; the registry itself is healthy and is left where it is. A regular side file of the
    owner's is SQLite's own (a WAL left by a crash holds committed rows) and is let be."""
    real = os.path.realpath(path)
    owners = _side_owners(real)
    for suffix in SIDE_FILES:
        side = Path(real + suffix)
        try:
            info = os.lstat(side)
        except OSError:
            continue  # nothing there (or nothing to see): SQLite makes its own, or says what is wrong
        aside = f"move it aside (mv {side} {side}.aside)"
        if stat.S_ISLNK(info.st_mode):
            what, fix = f"a symbolic link to {os.readlink(side)}", f"remove the link (rm {side})"
        elif stat.S_ISDIR(info.st_mode):
            what, fix = "a folder", aside
        elif not stat.S_ISREG(info.st_mode):
            what, fix = kind_of(info.st_mode), f"remove it (rm {side})"
        elif info.st_uid not in owners:
            what, fix = f"a file of another user (uid {info.st_uid})", aside
        elif info.st_nlink > 1:  # SQLite writes its side files in place: the other name's file would change too
            what, fix = f"a file with {info.st_nlink} hard links", aside
        else:
            continue
        raise Refused(
            f"{side} is {what}, not SQLite's own {suffix} file of the registry: {fix}; the registry {path.name} is "
            "left as it is (do not move it); nothing was changed"
        )


def _primary_code(error: sqlite3.Error) -> int | None:
    """SQLite's primary result code of ``error`` (the low byte of its extended code: ``SQLITE_BUSY`` for each kind
    of busy), or None for an error Python raised itself: what went wrong by number, never by the message's words."""
    extended = getattr(error, "sqlite_errorcode", None)
    return None if extended is None else extended & 0xFF


def _unopenable(path: Path, error: sqlite3.DatabaseError) -> Refused:
    """One line for a registry SQLite cannot open or write: a read-only home said so, a damaged file with its fix."""
    text = str(error)
    if _primary_code(error) == sqlite3.SQLITE_READONLY or not os.access(path.parent, os.W_OK):
        return Refused(
            f"{path}: the home is read-only here ({text}): this command writes the registry; run it where "
            "the home can be written (reading commands, such as show, work as they are)"
        )
    return Refused(
        f"{path}: cannot be opened as an octlm registry ({text}): move it aside (mv {path.name} {path.name}.broken), "
        "then `octlm doctor --repair` rebuilds it from the experiments' files"
    )


class RegistryBase:
    """The connection: opening (read-only or for writing), migrating, transactions, decoded reads."""

    def __init__(self, path: Path, *, create: bool = True, busy_timeout: float = BUSY_TIMEOUT_S):
        self.busy_timeout, self.path, self.read_only = busy_timeout, path, not create
        self.conn: sqlite3.Connection | None = None
        _refuse_unsafe(path, writing=create)
        _refuse_unsafe_sides(path)
        if not create and not path.exists():
            return  # every read answers empty; nothing is created
        try:
            self.conn = self._open_for_reading() if self.read_only else self._open_for_writing()
            self._migrate()
        except sqlite3.DatabaseError as error:
            raise _unopenable(path, error) from None
        except OSError as error:
            raise BadInput(f"{path}: cannot be created: {error.strerror}") from None

    # ------------------------------------------------------------------ plumbing

    def _open_for_writing(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(self.path), timeout=self.busy_timeout, isolation_level=None)
        conn.row_factory = sqlite3.Row
        self._retry(lambda: conn.execute("PRAGMA journal_mode=WAL"))
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    def _open_for_reading(self) -> sqlite3.Connection:
        """``mode=ro``; ``immutable=1`` where a reader cannot create the WAL index (a read-only folder or medium)."""
        uri = "file:" + urllib.parse.quote(os.path.abspath(self.path))
        conn = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=self.busy_timeout, isolation_level=None)
        try:
            conn.execute("select count(*) from sqlite_master").fetchone()
        except sqlite3.OperationalError as error:
            conn.close()
            if _primary_code(error) not in (sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY):
                raise
            conn = sqlite3.connect(f"{uri}?immutable=1", uri=True, isolation_level=None)
        conn.row_factory = sqlite3.Row
        return conn

    def _retry(self, fn: Callable[[], T]) -> T:
        # journal_mode changes ignore the busy handler on a fresh file; retry briefly.
        deadline = time.monotonic() + self.busy_timeout
        while True:
            try:
                return fn()
            except sqlite3.OperationalError as error:
                if (
                    _primary_code(error) not in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
                    or time.monotonic() > deadline
                ):
                    raise
                time.sleep(0.02)

    def _connection(self) -> sqlite3.Connection:
        if self.conn is None:
            raise Refused(f"{self.path}: there is no registry here to write to")
        return self.conn

    def _rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        if self.conn is None:
            return []
        return [decoded(dict(row)) for row in self.conn.execute(sql, params).fetchall()]

    def _applied(self) -> list[str]:
        sql = "select 1 from sqlite_master where type='table' and name='_sqlite_migrations'"
        if not self._rows(sql):
            return []
        rows = self._rows("select name from _sqlite_migrations where migration_set='octlm' order by id")
        return [row["name"] for row in rows]

    def _migrate(self) -> None:
        applied = self._applied()
        unknown = [name for name in applied if name not in KNOWN_MIGRATIONS]
        if unknown:
            raise Refused(
                f"{self.path}: written by a newer octlm (unknown schema migration {unknown[0]}); "
                "upgrade octlm to use this registry"
            )
        if len(applied) == len(KNOWN_MIGRATIONS):
            return
        # Imported only here: sqlite_utils stays out of `octlm show` and `octlm new` once migrated.
        from sqlite_utils import Database

        from octlm.store.migrations import migration_set

        if self.read_only:  # never write the file: read an up-to-date copy in memory
            memory = sqlite3.connect(":memory:", isolation_level=None)
            self._connection().backup(memory)
            self._connection().close()
            self.conn, memory.row_factory = memory, sqlite3.Row
        with self._transaction() as conn:
            migration_set().apply(Database(conn))

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction that takes the write lock up front (waits, never fails busy)."""
        conn = self._connection()
        try:
            self._retry(lambda: conn.execute("BEGIN IMMEDIATE"))
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            else:
                conn.execute("COMMIT")
        except sqlite3.IntegrityError:
            raise
        except sqlite3.OperationalError as error:
            raise Refused(f"{self.path}: the registry cannot be written ({error}); nothing was recorded") from None

    def set_busy_timeout(self, seconds: float) -> None:
        """How long a write waits for another connection's lock before it fails (or is deferred)."""
        self.busy_timeout = seconds
        if self.conn is not None:
            self.conn.execute(f"PRAGMA busy_timeout = {int(seconds * 1000)}")

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
