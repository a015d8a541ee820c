"""Fault injection with real processes, signals, files and SQLite: nothing lost, nothing let in."""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import assert_same_training_state, cli, default_signals, json_out, octlm, write_experiment

from octlm.core import layout
from octlm.store.runs import runfile
from octlm.train import checkpoint

LONG = {
    "training": {"steps": 1200, "warmup_steps": 20, "eval_interval": 50},
    "checkpoint": {"interval": 100, "keep": 3},
}


def long_home(root: Path, corpus_from: Path) -> Path:
    (root / "corpus").mkdir(parents=True)
    for path in (corpus_from / "corpus").iterdir():
        (root / "corpus" / path.name).write_text(path.read_text())
    write_experiment(root, **LONG)
    return root


def start(home: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "octlm", "--home", str(home), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
        preexec_fn=default_signals,  # the test signals it: as a shell's job, even under nohup
    )


def wait_for_progress(home: Path, process: subprocess.Popen, timeout: float = 60) -> None:
    run_file = home / "runs" / "EXP-001.jsonl"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        if run_file.exists() and run_file.stat().st_size > 0:
            return
        time.sleep(0.05)
    raise AssertionError("the run made no progress")


def final(home: Path, step: int = 1200) -> checkpoint.Record:
    return checkpoint.read(layout.checkpoint_path(home / "checkpoints" / "EXP-001", step))


def assert_identical(a: Path, b: Path) -> None:
    assert_same_training_state(final(a), final(b))
    records = [runfile.without_timings(runfile.read(h / "runs" / "EXP-001.jsonl")) for h in (a, b)]
    assert records[0] == records[1] and len(records[0]) == 1200 // 5  # a record every log_interval (5) steps


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One uninterrupted run of the long tiny experiment."""
    root = tmp_path_factory.mktemp("reference")
    seed = root / "seed"
    (seed / "corpus").mkdir(parents=True)
    from conftest import CORPUS

    for i in range(10):
        (seed / "corpus" / f"doc{i}.txt").write_text(CORPUS[i * 1000 : (i + 1) * 1000 + 500])
    home = long_home(root / "home", seed)
    assert cli(home, "train", "EXP-001", "-q").exit_code == 0
    return home


@pytest.mark.slow
def test_sigterm_checkpoints_marks_interrupted_and_exits_143(tmp_path: Path, reference: Path) -> None:
    home = long_home(tmp_path / "home", reference)
    process = start(home, "train", "EXP-001")
    wait_for_progress(home, process)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 143, stderr
    assert "stopped by SIGTERM" in stderr and "Traceback" not in stderr
    steps = [step for step, _ in layout.checkpoints(home / "checkpoints" / "EXP-001")]
    assert steps and steps[-1] < 1200
    run = json_out(cli(home, "show", "EXP-001", "--json"))["runs"][-1]
    assert run["status"] == "interrupted" and run["end_step"] == steps[-1]
    assert cli(home, "resume", "EXP-001", "-q").exit_code == 0
    assert_identical(reference, home)


@pytest.mark.slow
def test_random_sigkills_then_resume_is_bit_identical(tmp_path: Path, reference: Path) -> None:
    home = long_home(tmp_path / "home", reference)
    for delay in (0.3, 1.1, 0.05, 0.7):  # after the first evaluation: mid-step, mid-write, mid-registry
        process = start(home, "resume", "EXP-001")
        wait_for_progress(home, process) if delay > 0.1 else time.sleep(3.0)
        time.sleep(delay)
        process.kill()
        process.wait(timeout=30)
    runs = json_out(cli(home, "show", "EXP-001", "--json"))["runs"]
    assert any(run["status"] == "crashed" for run in runs)
    result = octlm(home, "resume", "EXP-001", "-q")
    assert result.returncode == 0, result.stderr
    assert_identical(reference, home)
    leftovers = [p for p in (home / "checkpoints" / "EXP-001").iterdir() if p.name.endswith(".tmp")]
    assert not leftovers


def test_corrupted_newest_checkpoint_falls_back_to_the_previous(tmp_path: Path, home: Path) -> None:
    assert cli(home, "train", "EXP-001", "--until", "8", "-q").exit_code == 0
    newest = layout.checkpoint_path(home / "checkpoints" / "EXP-001", 8)
    raw = bytearray(newest.read_bytes())
    raw[len(raw) // 3] ^= 0x01
    newest.write_bytes(bytes(raw))
    result = cli(home, "resume", "EXP-001", "--json")
    assert result.exit_code == 0
    assert "skipped an invalid checkpoint: step-000008.pt: checksum mismatch" in result.stderr
    assert json_out(result)["start_step"] == 4
    truncated = layout.checkpoint_path(home / "checkpoints" / "EXP-001", 12)
    truncated.write_bytes(truncated.read_bytes()[:1000])
    for _, path in layout.checkpoints(home / "checkpoints" / "EXP-001"):
        if path != truncated:
            path.unlink()
    refused = cli(home, "resume", "EXP-001")
    assert refused.exit_code == 3 and "no valid checkpoint" in refused.stderr


class Exploit:
    def __reduce__(self):
        return (os.system, (f"touch {MARKER}",))


MARKER = Path("/tmp/octlm-pickle-marker")


def test_pickle_payload_is_refused_without_running_it(home: Path) -> None:
    MARKER.unlink(missing_ok=True)
    assert cli(home, "train", "EXP-001", "--until", "4", "-q").exit_code == 0
    evil = layout.checkpoint_path(home / "checkpoints" / "EXP-001", 999)
    torch.save({"format": checkpoint.FORMAT, "step": 999, "payload": Exploit()}, evil)
    import hashlib

    layout.sidecar(evil).write_text(hashlib.sha256(evil.read_bytes()).hexdigest() + "\n")
    result = cli(home, "resume", "EXP-001", "--until", "8", "--json")
    assert result.exit_code == 0
    assert "step-000999.pt: refused by the safe loader" in result.stderr
    assert not MARKER.exists()
    assert json_out(result)["start_step"] == 4


def test_one_writer_per_experiment_and_dead_locks_do_not_block(home: Path) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys, time\nfrom pathlib import Path\nfrom octlm.store.locking import ExperimentLock\n"
                f"with ExperimentLock(Path({str(home / 'locks' / 'EXP-001.lock')!r}), 'EXP-001'):\n"
                "    print('held', flush=True)\n    time.sleep(60)\n"
            ),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "held"
    try:
        for command in (["train", "EXP-001"], ["resume", "EXP-001"], ["overfit", "EXP-001"]):
            result = cli(home, *command, "-q")
            assert result.exit_code == 3, command
            assert f"pid {holder.pid} on {socket.gethostname()}" in result.stderr
    finally:
        holder.kill()
        holder.wait()
    assert cli(home, "train", "EXP-001", "--until", "4", "-q").exit_code == 0


def test_sixteen_processes_hammer_the_registry(tmp_path: Path) -> None:
    path = tmp_path / "registry.db"
    script = (
        "import sys\nfrom pathlib import Path\nfrom octlm.store.registry import Registry\n"
        "n = int(sys.argv[1]); r = Registry(Path(sys.argv[2]))\n"
        "r.add_experiment(f'EXP-{n:03d}', description='', preset='', yaml_path='', config_json='{}', config_hash='h')\n"
        "for k in range(5):\n"
        "    run = r.start_run(f'EXP-{n:03d}', 'train', start_step=0)\n"
        "    for s in range(4):\n"
        "        r.add_checkpoint(experiment_id=f'EXP-{n:03d}', run_id=run, step=s, path=f'c/{n}/{k}/{s}',\n"
        "                         sha256='x', size=1, tokens=s, config_hash='h', data_hash='d',\n"
        "                         tokenizer_hash='t', metrics={})\n"
        "        r.update_run(run, latest_metrics={'step': s})\n"
        "    r.finish_run(run, 'completed', end_step=4)\n"
    )
    processes = [
        subprocess.Popen([sys.executable, "-c", script, str(n), str(path)], stderr=subprocess.PIPE, text=True)
        for n in range(16)
    ]
    errors = [p.communicate(timeout=120)[1] for p in processes]
    assert all(p.returncode == 0 for p in processes), [e for e in errors if e]
    with sqlite3.connect(path) as conn:
        assert conn.execute("select count(distinct id) from experiments").fetchone()[0] == 16
        assert conn.execute("select count(*) from runs where status = 'completed'").fetchone()[0] == 16 * 5
        assert conn.execute("select count(*) from checkpoints").fetchone()[0] == 16 * 5 * 4


@pytest.mark.parametrize(
    "setup, args, code, fragment",
    [
        ("training: {steps: [1", ["train", "EXP-001"], 2, "EXP-001.yaml: line"),
        ("model: {colour: red}", ["train", "EXP-001"], 2, "EXP-001.yaml: model.colour: unknown key"),
        ("training: {steps: ten}", ["resume", "EXP-001"], 2, "EXP-001.yaml: training.steps: expected an integer"),
        ("training: {steps: 5, warmup_steps: 9}", ["train", "EXP-001"], 2, "training.warmup_steps: must be below"),
        ("data: {sources: [nowhere/*.txt]}", ["train", "EXP-001"], 2, "matches no text or data file"),
        ("data: {sources: [missing.txt]}", ["train", "EXP-001"], 2, "missing.txt does not exist"),
        ("data: {sources: [empty.txt]}", ["train", "EXP-001"], 2, "the corpus is empty"),
        (None, ["train", "EXP-404"], 2, "unknown experiment EXP-404"),
        (None, ["train", "../x"], 2, "malformed experiment ID"),
        (None, ["resume", "/etc"], 2, "malformed experiment ID"),
        (None, ["overfit", "EXP-1/.."], 2, "malformed experiment ID"),
        (None, ["sample", "EXP-\x00"], 2, "malformed experiment ID"),
        (None, ["verify-resume", "EXP-001", "--split-at", "0"], 2, "--split-at 0: must be above 0"),
        (None, ["verify-resume", "EXP-001", "--split-at", "x"], 2, "expected step numbers"),
        (None, ["verify-resume", "EXP-001", "--split-at", "3", "--until", "0"], 2, "--until 0"),
        (None, ["train", "EXP-001", "--until", "99"], 2, "--until 99"),
        (None, ["sample", "EXP-001", "--temperature", "-1"], 2, "--temperature -1"),
    ],
)
def test_bad_input_gets_one_clear_line(
    home: Path, setup: str | None, args: list[str], code: int, fragment: str
) -> None:
    (home / "empty.txt").write_text("")
    if setup is not None:
        import yaml

        path = home / "experiments" / "EXP-001.yaml"
        raw = yaml.safe_load(path.read_text())
        try:
            extra = yaml.safe_load(setup)
        except yaml.YAMLError:
            path.write_text(setup)
        else:
            for section, values in extra.items():
                raw[section].update(values)
            path.write_text(yaml.safe_dump(raw))
    result = cli(home, *args)
    assert result.exit_code == code, result.stderr
    assert fragment in result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert not list((home / "checkpoints").glob("*/*.pt")) if (home / "checkpoints").exists() else True


def test_unwritable_home_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    result = cli(blocker / "home", "new")
    assert result.exit_code == 2 and "cannot be created" in result.stderr
    odd = cli(Path("~no-such-user-octlm/x"), "show")
    assert odd.exit_code == 2 and odd.stderr.count("\n") == 1


def test_doctor_rebuilds_a_deleted_registry(home: Path) -> None:
    assert cli(home, "train", "EXP-001", "-q").exit_code == 0
    before = json_out(cli(home, "show", "--json"))["experiments"][0]
    for path in home.glob("registry.db*"):
        path.unlink()
    checked = cli(home, "doctor")
    assert checked.exit_code == 1 and "problems found" in checked.stdout
    assert not (home / "registry.db").exists()  # checking alone writes nothing
    repaired = json_out(cli(home, "doctor", "--repair", "--json"))
    kinds = {p["kind"] for p in repaired["problems"]}
    assert {"experiment without row", "orphaned checkpoint", "checkpoints without a run"} <= kinds
    assert repaired["healthy"]
    after = json_out(cli(home, "show", "--json"))["experiments"][0]
    for key in ("id", "step", "steps", "train_loss", "eval_loss", "perplexity", "bits_per_byte", "tokens", "status"):
        assert after[key] == before[key], key
    assert [c["step"] for c in json_out(cli(home, "show", "EXP-001", "--json"))["checkpoints"]] == [4, 8, 12]
    assert cli(home, "doctor").exit_code == 0
    assert cli(home, "resume", "EXP-001", "--json").exit_code == 0


def test_disk_full_during_a_checkpoint_keeps_the_previous_one(home: Path) -> None:
    import resource

    assert cli(home, "train", "EXP-001", "--until", "4", "-q").exit_code == 0
    folder = home / "checkpoints" / "EXP-001"
    previous = layout.checkpoint_path(folder, 4)
    size = previous.stat().st_size
    digest = layout.read_sidecar(previous)

    def limit_file_size() -> None:  # writes past this size fail with EFBIG, as on a full disk
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (size // 2, size // 2))

    result = octlm(home, "resume", "EXP-001", "-q", preexec_fn=limit_file_size)
    assert result.returncode == 3, result.stderr
    assert (
        "cannot write checkpoint step-000008.pt" in result.stderr and "previous checkpoint is intact" in result.stderr
    )
    assert "Traceback" not in result.stderr
    assert [step for step, _ in layout.checkpoints(folder)] == [4]
    assert checkpoint.read(previous).step == 4 and layout.read_sidecar(previous) == digest
    assert not [p for p in folder.iterdir() if p.name.endswith(".tmp")]
    shown = json_out(cli(home, "show", "EXP-001", "--json"))
    assert [c["step"] for c in shown["checkpoints"]] == [4]
    assert shown["runs"][-1]["status"] == "failed"
    assert cli(home, "resume", "EXP-001", "-q").exit_code == 0


def test_restart_with_bad_until_keeps_everything(home: Path) -> None:
    assert cli(home, "train", "EXP-001", "--until", "4", "-q").exit_code == 0
    before = sorted(p.name for p in (home / "checkpoints" / "EXP-001").iterdir())
    result = cli(home, "train", "EXP-001", "--restart", "--until", "999", "-q")
    assert result.exit_code == 2 and "--until 999" in result.stderr
    assert sorted(p.name for p in (home / "checkpoints" / "EXP-001").iterdir()) == before


def test_a_stale_registry_digest_does_not_hide_a_good_checkpoint(home: Path) -> None:
    # Killed between the checkpoint's rename and the registry commit: the checksum file is
    # right, the registry row is stale. The checkpoint is still good and must be used.
    assert cli(home, "train", "EXP-001", "--until", "8", "-q").exit_code == 0
    with sqlite3.connect(home / "registry.db") as conn:
        conn.execute("update checkpoints set sha256 = 'stale' where step = 8")
    result = cli(home, "resume", "EXP-001", "--json", "-q")
    assert result.exit_code == 0 and json_out(result)["start_step"] == 8


def test_a_damaged_token_cache_is_rebuilt(home: Path) -> None:
    assert cli(home, "train", "EXP-001", "--until", "4", "-q").exit_code == 0
    (cache,) = (home / "cache").glob("tokens-*.bin")
    cache.write_bytes(b"\x01\x02 truncated")
    result = cli(home, "resume", "EXP-001", "-q")
    assert result.exit_code == 0, result.stderr
    assert cache.stat().st_size > 100


def test_doctor_is_healthy_after_overfit_and_train(home: Path) -> None:
    assert cli(home, "train", "EXP-001", "-q").exit_code == 0
    assert cli(home, "overfit", "EXP-001", "--steps", "5", "--max-loss", "100", "-q").exit_code == 0
    report = cli(home, "doctor", "--json")
    assert report.exit_code == 0, report.stdout
    assert json_out(report)["problems"] == []
