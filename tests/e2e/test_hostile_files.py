"""Issue 12, the files side: symlinks, the lock, the token cache, FIFOs and devices, size bombs, umask,
home discovery. Each test plays the attack with real files, processes and signals."""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import os
import resource
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import cli, octlm, write_experiment

from octlm.core import layout
from octlm.core.errors import BadInput
from octlm.core.home import find_home
from octlm.data import corpus, tokens
from octlm.data.fingerprints import dataset_hash
from octlm.data.tokenizer import Tokenizer
from octlm.train import checkpoint

VICTIM_TEXT = "precious, outside the home\n"


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    path = tmp_path / "victim.txt"
    path.write_text(VICTIM_TEXT)
    return path


@contextmanager
def within(seconds: float) -> Iterator[None]:
    """Fail instead of hanging: an in-process command that blocks (on a FIFO) is interrupted."""

    def expire(signum: int, frame: object) -> None:
        raise TimeoutError(f"still blocked after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def cache_key(home: Path) -> str:
    """The dataset hash the home's EXP-001 will cache its tokens under (its tokenizer trains deterministically)."""
    found = corpus.load(("corpus/*.txt",), home, 0.2)
    return dataset_hash(found, Tokenizer.train([d.text for d in found.train], 300))


# ---------------------------------------------------------------- item 2 and 7: symlinks and the lock


def test_a_symlinked_or_hard_linked_lock_never_touches_the_victim(home: Path, victim: Path) -> None:
    (home / "checkpoints" / "EXP-001").mkdir(parents=True)
    (home / "checkpoints" / "EXP-001" / "lock").symlink_to(victim)  # where the lock used to be
    (home / "locks").mkdir()
    lock = home / "locks" / "EXP-001.lock"
    lock.symlink_to(victim)
    for command in (["train", "EXP-001", "-q"], ["resume", "EXP-001", "-q"]):
        result = cli(home, *command)
        assert result.exit_code == 3, result.stderr
        assert "lock file" in one_line(result.stderr) and "symbolic link" in result.stderr
    lock.unlink()
    os.link(victim, lock)
    result = cli(home, "resume", "EXP-001", "-q")
    assert result.exit_code == 3 and "not octlm's lock file" in one_line(result.stderr)
    lock.unlink()
    assert cli(home, "train", "EXP-001", "--until", "4", "-q").exit_code == 0
    assert victim.read_text() == VICTIM_TEXT
    assert stat.S_ISREG(lock.lstat().st_mode)


def test_planted_temporaries_never_redirect_a_write(home: Path, victim: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder, runs, cache, experiments = (home / n for n in ("checkpoints/EXP-001", "runs", "cache", "experiments"))
    for each in (folder, runs, cache):
        each.mkdir(parents=True, exist_ok=True)
    names = {folder: [f"step-{s:06d}.{x}" for s in (4, 8) for x in ("pt", "sha256")] + ["tokenizer.json"]}
    names |= {
        runs: ["EXP-001.jsonl"],
        cache: [f"tokens-{cache_key(home)}.bin", f"tokens-{cache_key(home)}.json"],
        experiments: ["EXP-002.yaml"],
    }
    pid = os.getpid()  # the commands below run in this process: its pid is the one the old names used
    for where, files in names.items():
        for name in files:
            for planted in (f".{name}.{pid}.tmp", f".{name}.{pid}.tmp.npz", f".{name}.{'a' * 16}.tmp"):
                (where / planted).symlink_to(victim)
    # mkstemp-style names are random; let the first draw of every write hit a planted one
    draws = itertools.cycle(["a" * 16, "b" * 16])
    monkeypatch.setattr(secrets, "token_hex", lambda n: next(draws))
    assert cli(home, "train", "EXP-001", "--until", "4", "-q").exit_code == 0
    assert cli(home, "resume", "EXP-001", "--until", "8", "-q").exit_code == 0
    assert cli(home, "new", "EXP-002").exit_code == 0
    assert victim.read_text() == VICTIM_TEXT
    written = [
        folder / "step-000008.pt",
        folder / "tokenizer.json",
        runs / "EXP-001.jsonl",
        experiments / "EXP-002.yaml",
    ]
    assert all(
        stat.S_ISREG(path.lstat().st_mode)
        for path in [*written, *cache.glob("tokens-*.bin"), *cache.glob("tokens-*.json")]
    )


def test_deleting_the_checkpoint_folder_mid_run_does_not_let_a_second_writer_in(home: Path) -> None:
    long_run = {"steps": 100_000, "warmup_steps": 20, "eval_interval": 4}
    write_experiment(home, training=long_run, checkpoint={"interval": 50_000})  # no write while the folder goes
    process = subprocess.Popen(
        [sys.executable, "-m", "octlm", "--home", str(home), "train", "EXP-001", "-q"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        run_file, deadline = home / "runs" / "EXP-001.jsonl", time.monotonic() + 60
        while not (run_file.exists() and run_file.stat().st_size) and time.monotonic() < deadline:
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            time.sleep(0.05)
        shutil.rmtree(home / "checkpoints" / "EXP-001")
        result = cli(home, "resume", "EXP-001", "--until", "4", "-q")
        assert result.exit_code == 3, result.stderr
        assert f"already being trained by pid {process.pid}" in one_line(result.stderr)
        assert process.poll() is None  # the first writer trains on
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)


# ---------------------------------------------------------------- item 10: the token cache


def test_a_poisoned_token_cache_is_detected_and_rebuilt(home: Path) -> None:
    assert cli(home, "train", "EXP-001", "--until", "4", "-q").exit_code == 0
    (path,) = (home / "cache").glob("tokens-*.bin")
    record_path = path.with_suffix(".json")
    honest, record = np.fromfile(path, dtype="<u2"), json.loads(record_path.read_text())

    def save(tokens: np.ndarray, checksum: bool = True, **changes: object) -> None:
        """The token file and its record, the checksum recomputed as an attacker would (unless not)."""
        path.write_bytes(tokens.astype("<u2").tobytes())
        digest = hashlib.sha256(tokens.astype("<u2").tobytes()).hexdigest() if checksum else record["sha256"]
        record_path.write_text(json.dumps({**record, "sha256": digest, **changes}))

    out_of_range = honest.copy()
    out_of_range[5] = 60_000
    save(out_of_range)  # crashed every later run until cache/ was deleted, before the checks
    result = cli(home, "resume", "EXP-001", "--until", "8")
    assert result.exit_code == 0, result.stderr
    assert f"cache/{path.name} did not verify (token ids outside" in result.stderr
    found = corpus.load(("corpus/*.txt",), home, 0.2)
    tokenizer = Tokenizer.load(home / "checkpoints" / "EXP-001" / "tokenizer.json")
    key = path.name.removeprefix("tokens-").removesuffix(".bin")
    shuffled = np.random.default_rng(0).permutation(honest)
    attacks = {
        "its tokens changed": lambda: save(shuffled, checksum=False),
        "are not what the tokenizer makes": lambda: save(shuffled),
        "token ids outside": lambda: save(out_of_range),
        "another tokenizer or corpus, or by another octlm": lambda: save(honest, key="0" * 64),
        "where its record says": lambda: save(honest[:-1]),
    }
    for reason, attack in attacks.items():
        attack()
        streams = tokens.token_streams(found, tokenizer, home / "cache", key)
        assert streams.note and reason in streams.note and "rebuilt" in streams.note, (reason, streams.note)
        assert np.array_equal(np.concatenate([streams.train, streams.validation]), honest)
        assert np.array_equal(np.fromfile(path, dtype="<u2"), honest)
    assert tokens.token_streams(found, tokenizer, home / "cache", key).note is None


# ---------------------------------------------------------------- item 9 and 10: the tokenizer is saved last


def test_a_lone_surrogate_is_one_line_and_leaves_no_tokenizer(home: Path) -> None:
    write_experiment(home, data={"sources": ["corpus/*.txt", "extra.jsonl"], "validation_fraction": 0.5})
    extra = home / "extra.jsonl"
    extra.write_text('{"text": "fine"}\n{"text": "broken \\ud800 half"}\n')
    tokenizer = home / "checkpoints" / "EXP-001" / "tokenizer.json"
    result = cli(home, "train", "EXP-001", "-q")
    assert result.exit_code == 2
    assert f"{extra}:2: the text is not valid Unicode" in one_line(result.stderr)
    assert not tokenizer.exists()
    extra.write_text('{"text": "fine"}\n{"text": "mended half"}\n')
    assert cli(home, "train", "EXP-001", "--until", "4", "-q").exit_code == 0
    assert tokenizer.exists()


def test_the_tokenizer_is_saved_only_after_the_corpus_encodes(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: Tokenizer, texts: list[str]) -> list[np.ndarray]:
        raise BadInput("data.sources: a document cannot be tokenized (simulated)")

    monkeypatch.setattr(Tokenizer, "encode_each", refuse)
    result = cli(home, "train", "EXP-001", "-q")
    assert result.exit_code == 2 and "simulated" in one_line(result.stderr)
    assert not (home / "checkpoints" / "EXP-001" / "tokenizer.json").exists()


# ---------------------------------------------------------------- item 11: devices, FIFOs, caps and bombs


def test_dev_zero_and_a_fifo_as_data_sources_are_refused_without_hanging(home: Path) -> None:
    (home / "corpus" / "zero.txt").symlink_to("/dev/zero")
    os.mkfifo(home / "corpus" / "pipe.txt")
    for source, kind in (("corpus/zero.txt", "a character device"), ("corpus/pipe.txt", "a FIFO")):
        write_experiment(home, data={"sources": [source]})
        started = time.monotonic()
        result = octlm(home, "train", "EXP-001", "-q", timeout=60, preexec_fn=_limit_memory)
        assert result.returncode == 2, result.stderr
        assert f"not a regular file ({kind})" in one_line(result.stderr)
        assert time.monotonic() - started < 30
    write_experiment(home, data={"sources": ["corpus/*.txt"]})  # a glob finds the FIFO too, and refuses it
    with within(20):
        result = cli(home, "train", "EXP-001", "-q")
    assert result.exit_code == 2 and "pipe.txt: not a regular file (a FIFO)" in one_line(result.stderr)


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))  # should the old code read /dev/zero


def test_the_corpus_read_cap_names_data_max_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a.txt").write_text("x" * 600)
    (tmp_path / "b.txt").write_text("y" * 600)
    monkeypatch.setattr(corpus, "DEFAULT_MAX_BYTES", 1000)
    with pytest.raises(BadInput, match="larger than the cap of 1000 bytes; set data.max_bytes"):
        corpus.documents(("a.txt", "b.txt"), tmp_path)
    assert [d.name for d in corpus.documents(("a.txt", "b.txt"), tmp_path, max_bytes=700)] == ["a.txt"]


def test_fifos_as_checkpoint_config_tokenizer_and_run_file_are_refused_at_once(home: Path) -> None:
    assert cli(home, "train", "EXP-001", "--until", "4", "-q").exit_code == 0
    folder = home / "checkpoints" / "EXP-001"
    (home / "runs" / "EXP-001.jsonl").unlink()
    os.mkfifo(home / "runs" / "EXP-001.jsonl")
    os.mkfifo(home / "experiments" / "EXP-002.yaml")
    os.mkfifo(home / "experiments" / "EXP-003.yaml")
    with within(30):
        result = cli(home, "resume", "EXP-001", "-q")
        assert result.exit_code == 3 and "EXP-001.jsonl cannot be read: not a regular file" in one_line(result.stderr)
        (home / "runs" / "EXP-001.jsonl").unlink()
        result = cli(home, "resume", "EXP-002", "-q")
        assert result.exit_code == 2 and "not a regular file (a FIFO)" in one_line(result.stderr)
        (folder / "tokenizer.json").unlink()
        os.mkfifo(folder / "tokenizer.json")
        for command in ("resume", "sample"):
            result = cli(home, command, "EXP-001")
            assert result.exit_code == 3 and "tokenizer.json: not a readable tokenizer" in one_line(result.stderr)
        sidecar = (folder / "step-000004.sha256").read_text()
        for path in folder.glob("step-*"):
            path.unlink()
        os.mkfifo(folder / "step-000004.pt")
        (folder / "step-000004.sha256").write_text(sidecar)
        for command in ("resume", "sample"):
            result = cli(home, command, "EXP-001")
            assert result.exit_code == 3 and "step-000004.pt: unreadable (not a regular file (a FIFO))" in result.stderr
        report = cli(home, "doctor", "--json")
    assert report.exit_code in (0, 1), report.stderr


def _bomb(depth: int) -> list:
    nested: list = [0.5]
    for _ in range(depth):
        nested = [nested, nested]  # pickled once per level, 2**depth leaves once walked or printed
    return nested


def test_a_metrics_bomb_is_refused_fast_and_small(home: Path) -> None:
    assert cli(home, "train", "EXP-001", "-q").exit_code == 0
    folder = home / "checkpoints" / "EXP-001"
    record = checkpoint.read(folder / "step-000012.pt")
    record.metrics = {**record.metrics, "eval_loss": _bomb(28)}
    for path in folder.glob("step-*"):
        path.unlink()
    buffer = io.BytesIO()
    torch.save(record.to_payload(), buffer)
    bomb = layout.checkpoint_path(folder, 12)
    bomb.write_bytes(buffer.getvalue())  # with a valid checksum file: it passes weights_only and the checksum
    layout.sidecar(bomb).write_text(f"{hashlib.sha256(buffer.getvalue()).hexdigest()}  {bomb.name}\n")
    tracemalloc.start()
    started = time.perf_counter()
    with pytest.raises(checkpoint.InvalidCheckpoint, match="'metrics.eval_loss' holds list"):
        checkpoint.read(bomb)
    seconds, (_, peak) = time.perf_counter() - started, tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert seconds < 2 and peak < 200 << 20, (seconds, peak)
    started = time.monotonic()
    command = [sys.executable, "-m", "octlm", "--home", str(home), "resume", "EXP-001", "--json"]
    measured = subprocess.run(
        [sys.executable, "-c", MEASURE, *command], capture_output=True, text=True, timeout=60, env=os.environ | NO_COLOR
    )
    report = json.loads(measured.stdout)
    assert report["rc"] == 3 and "holds list" in one_line(report["stderr"])
    # the same command refused with an empty home peaks at about 240 MB (torch alone): the bomb adds nothing
    assert time.monotonic() - started < 20 and report["maxrss_kb"] < 450 << 10, report["maxrss_kb"]


MEASURE = """import json, resource, subprocess, sys
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
maxrss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"rc": done.returncode, "stderr": done.stderr, "maxrss_kb": maxrss}))
"""
NO_COLOR = {"NO_COLOR": "1"}


def test_plain_values_of_a_checkpoint_are_checked_for_shape_and_size(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert cli(home, "train", "EXP-001", "--until", "4", "-q").exit_code == 0
    payload = checkpoint.read(home / "checkpoints" / "EXP-001" / "step-000004.pt").to_payload()
    bad = {
        "metrics": {"eval_loss": {"nested": 1.0}},
        "config": {"model": {"deep": {"er": 1}}},
        "environment": {"torch": "x" * 100_000},
        "experiment": ["EXP-001"],
        "elapsed_seconds": [1.0],
        "step": 2**80,
    }
    for key, value in bad.items():
        with pytest.raises(checkpoint.InvalidCheckpoint, match=repr(key)[:-1]):
            checkpoint.Record.from_payload({**payload, key: value}, "forged.pt")
    wide = {
        "data": {"sources": [f"corpus/{i}.txt" for i in range(4000)]},
        "extra": {str(i): "y" * 9000 for i in range(500)},
    }
    with pytest.raises(checkpoint.InvalidCheckpoint, match="larger than"):
        checkpoint.Record.from_payload({**payload, "config": wide}, "forged.pt")
    path = home / "checkpoints" / "EXP-001" / "step-000004.pt"
    monkeypatch.setattr(checkpoint, "MAX_BYTES", 1000)
    with pytest.raises(checkpoint.InvalidCheckpoint, match="larger than the cap of 1000 bytes"):
        checkpoint.read(path)  # no registry size known: the default cap applies
    assert checkpoint.size_cap(10_000) < 2 << 20  # with one, a file far beyond it is not even read


# ---------------------------------------------------------------- item 12: umask and home discovery


def test_files_follow_the_umask(home: Path) -> None:
    previous = os.umask(0o022)
    try:
        assert cli(home, "new", "EXP-002").exit_code == 0
        assert cli(home, "train", "EXP-001", "--until", "4", "-q").exit_code == 0
    finally:
        os.umask(previous)
    folder = home / "checkpoints" / "EXP-001"
    made = [home / "experiments" / "EXP-002.yaml", folder / "step-000004.pt", folder / "step-000004.sha256"]
    made += [folder / "tokenizer.json", home / "runs" / "EXP-001.jsonl", *(home / "cache").glob("tokens-*")]
    made += [home / "locks" / "EXP-001.lock"]
    assert {path.name: stat.S_IMODE(path.stat().st_mode) for path in made} == {path.name: 0o644 for path in made}


def test_home_discovery_ignores_world_writable_and_foreign_ancestors(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    (shared / "experiments").mkdir(parents=True)
    mine = shared / "me" / "work"
    mine.mkdir(parents=True)
    for mode in (0o777, 0o1777):  # sticky or not, anyone could have planted that home
        shared.chmod(mode)
        assert find_home(start=mine) == mine
    shared.chmod(0o755)
    assert find_home(start=mine) == shared
    assert find_home(explicit=str(shared)) == shared  # named explicitly, it is a home
    if os.geteuid() == 0:
        os.chown(shared, 12345, -1)  # owned by someone else: the search stops below it
        assert find_home(start=mine) == mine
        os.chown(shared, 0, -1)
    shared.chmod(0o777)
    env = {key: value for key, value in os.environ.items() if key != "OCTLM_HOME"}
    done = subprocess.run(
        [sys.executable, "-m", "octlm", "new", "EXP-001"], cwd=mine, env=env, capture_output=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert (mine / "experiments" / "EXP-001.yaml").exists()
    assert not (shared / "experiments" / "EXP-001.yaml").exists()
    shared.chmod(0o755)


# ---------------------------------------------------------------- issue 45 item 17: SQLite's side files


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _device(path: Path) -> None:
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))


def _foreign(path: Path) -> None:
    path.write_bytes(b"\0" * 4096)
    os.chown(path, 4242, 4242)


SIDES: dict[str, tuple[object, str]] = {  # what is planted at a side file -> (how, what the line says and advises)
    "a FIFO": (_fifo, "is a FIFO"),
    "a character device": (_device, "is a character device"),
    "a link to a file elsewhere": (lambda path: path.symlink_to(path.parent.parent / "victim.txt"), "symbolic link"),
    "a dangling link": (lambda path: path.symlink_to(path.parent.parent / "nowhere"), "symbolic link"),
    "a folder": (lambda path: path.mkdir(), "is a folder"),
    "another user's file": (_foreign, "another user (uid 4242)"),
}


def _command(home: Path, planted: str, *args: str) -> tuple[int, str, str]:
    """``octlm ARGS`` as (exit code, stderr, stdout): in a process of its own where the side file could hang it (a
    FIFO, whose open blocks: a hang fails after 30 s instead of blocking the suite), else in this one."""
    if planted == "a FIFO":
        done = octlm(home, *args, timeout=30)
        return done.returncode, done.stderr, done.stdout
    result = cli(home, *args)
    return result.exit_code, result.stderr, result.stdout


@pytest.mark.parametrize("suffix", ["-journal", "-wal", "-shm"])
@pytest.mark.parametrize("planted", sorted(SIDES))
def test_a_registry_side_file_that_is_not_sqlite_s_is_named_and_never_hangs(
    home: Path, victim: Path, suffix: str, planted: str
) -> None:
    """Issue 45 item 17: a FIFO at ``registry.db-journal`` hung every command, and a link at ``-wal`` or ``-shm``
    was refused with the advice to move the healthy registry aside. Each side file is checked as the registry is,
    before SQLite opens anything: one line naming it, with its own fix, for reading and writing commands alike; the
    registry and what a link points to are untouched, and once the side file is dealt with every command works.
    The commands run in processes of their own where a hang is possible (a FIFO), else in the test's."""
    assert _command(home, planted, "tag", "EXP-001", "+kept")[0] == 0
    registry, side = home / "registry.db", home / f"registry.db{suffix}"
    before = registry.read_bytes()
    make, said = SIDES[planted]
    make(side)  # type: ignore[operator]
    for command in (["show"], ["show", "EXP-001"], ["tag", "EXP-001", "+more"], ["doctor", "--repair"]):
        code, stderr, _ = _command(home, planted, *command)
        line = one_line(stderr)
        assert code == 3, (command, stderr)
        assert str(side) in line and said in line and "registry.db is left as it is" in line, line
        assert f"mv {registry.name} " not in line and "doctor --repair" not in line
    assert registry.read_bytes() == before and victim.read_text() == VICTIM_TEXT
    assert not (home.parent / "nowhere").exists()
    shutil.rmtree(side) if planted == "a folder" else side.unlink()  # what the line says: that file, not the registry
    assert _command(home, planted, "tag", "EXP-001", "+more")[0] == 0
    assert "kept" in _command(home, planted, "show", "EXP-001")[2]


def test_a_side_file_beside_a_linked_registry_s_target_is_checked_too(home: Path, tmp_path: Path) -> None:
    """Reading follows a linked ``registry.db``, and SQLite opens the side files beside its target: those are the
    ones checked (a FIFO beside the target would hang ``show`` as well)."""
    elsewhere = tmp_path / "other-home"
    elsewhere.mkdir()
    assert octlm(elsewhere, "new", timeout=60).returncode == 0
    (home / "registry.db").symlink_to(elsewhere / "registry.db")
    os.mkfifo(elsewhere / "registry.db-journal")
    result = octlm(home, "show", timeout=30)
    assert result.returncode == 3 and str(elsewhere / "registry.db-journal") in one_line(result.stderr)


def test_sqlite_s_own_side_files_are_read_as_they_are(home: Path) -> None:
    """What SQLite itself leaves (a writer holding the registry open: its ``-wal`` and ``-shm``, with rows not yet
    checkpointed into ``registry.db``) is never refused: the rows in the WAL are read."""
    from octlm.store.registry import Registry

    assert octlm(home, "tag", "EXP-001", "+first", timeout=60).returncode == 0
    with Registry(home / "registry.db") as registry:
        registry.conn.execute("PRAGMA wal_autocheckpoint=0")  # type: ignore[union-attr]
        assert cli(home, "tag", "EXP-001", "+in-the-wal").exit_code == 0
        assert (home / "registry.db-wal").stat().st_size > 0 and (home / "registry.db-shm").exists()
        shown = octlm(home, "show", "EXP-001", timeout=60)
        assert shown.returncode == 0 and "in-the-wal" in shown.stdout, shown.stderr
