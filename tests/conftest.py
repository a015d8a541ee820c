"""Shared fixtures: every test gets its own home in tmp_path with a tiny experiment."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from octlm.cli.app import app
from octlm.core.home import Home
from octlm.core.records import METRIC_FIELDS, TIMING_FIELDS
from octlm.store.experiments import load, register
from octlm.store.registry import Registry
from octlm.store.runs import runfile

REPO = Path(__file__).resolve().parents[1]

CORPUS = "\n\n".join(
    f"Document {i}. The quick brown fox number {i} jumps over the lazy dog {i * 7 % 13} times. "
    "Small models learn small things; exact resume means the same bits. " * 3
    for i in range(40)
)


TESTS = Path(__file__).resolve().parent


# The costliest tests, costliest first (measured on two cores, `--durations`): they are run first, so that the
# workers of pytest-xdist end together on short tests instead of one of them finishing a two-minute test alone
# (worksteal gives each worker a contiguous share and an idle one takes half of another's queue from its end).
HEAVIEST = (
    "test_compiled_training_with_dropout_resumes_exactly",
    "test_a_trial_whose_node_is_lost_resumes_on_another_and_ends_as_a_straight_run",
    "test_verify_resume_catches_rank0_rng_and_plain_ddp",
    "test_a_compiled_step_gives_the_same_bits_every_time_and_with_pieces_at_any_thread_count",
    "test_golden_run_and_canary_under_emulation",
    "test_a_run_of_pieces_is_audited_on_another_world_size_and_a_resharded_one_is_refused",
    "test_a_sweep_on_a_local_ray_records_what_work_records",
    "test_four_pieces_train_the_same_bits_on_1_2_4_ranks_and_two_nodes",
    "test_every_command_of_the_tour_runs_in_a_fresh_home",
    "test_verify_resume_on_a_busy_box_keeps_its_warning_on_screen_and_repeats_it",
    "test_a_driver_killed_while_a_trial_trains_leaves_claims_that_doctor_and_work_take_back",
    "test_the_other_vendors_processor_continues_the_native_run_bit_for_bit",
    "test_what_cannot_be_replayed_here_is_one_line_exit_3_and_what_cannot_be_audited_exit_2",
    "test_a_new_experiment_follows_the_free_cores_and_resumes_at_1_and_2_threads_bit_identical",
    "test_a_new_experiment_stopped_on_two_ranks_continues_on_one_and_on_four_exactly",
    "test_stopped_on_four_ranks_continues_on_two_and_on_one_exactly",
    "test_resume_under_another_world_size_is_refused_then_reshards",
    "test_six_pieces_are_exact_on_3_ranks_and_a_ring_sum_is_not",
    "test_verify_resume_on_ranks_is_identical_on_every_check",
    "test_verify_resume_from_two_ranks_to_one_passes",
    "test_sixteen_parallel_new_calls_get_sixteen_distinct_ids",
    "test_a_run_killed_and_resumed_passes_its_own_audit_and_an_altered_checkpoint_fails_naming_the_tensor",
    "test_a_piece_of_day1_has_the_same_bits_on_one_thread_and_two_under_the_pinned_mode",
    "test_fp16_with_grad_scaler_resumes_exactly",
    "test_sigterm_mid_run_checkpoints_once_and_resumes_bit_identical",
)


def pytest_configure(config: pytest.Config) -> None:
    """Bytecode cached, whatever the runner's environment says: the suite starts some two thousand Python processes
    (octlm commands, ranks, workers), and with ``PYTHONDONTWRITEBYTECODE`` set (as on some boxes) each of them
    compiled every octlm module it imported again (collecting the fast half: 18.5 s instead of 4.5 s). The files go
    where Python puts them, the ``__pycache__`` folders git ignores (not a ``PYTHONPYCACHEPREFIX``: under one, torch's
    installed bytecode is not found and every process compiles torch). Done by the process that starts
    pytest-xdist's workers, so that they and every process the tests start inherit it."""
    if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
        sys.dont_write_bytecode = False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``tests/e2e/`` is slow by where it lives (faults, ranks, hostile input, signals, the browser); its ranks and
    browser files carry those markers too, so ``-m "not slow"`` runs the fast half and ``-m ranks`` the ranks.
    The ``HEAVIEST`` go first."""
    first = {name: index for index, name in enumerate(HEAVIEST)}
    items.sort(key=lambda item: first.get(getattr(item, "originalname", item.name), len(first)))
    for item in items:
        parts = Path(str(item.fspath)).resolve().relative_to(TESTS).parts
        if parts[0] == "e2e":
            item.add_marker(pytest.mark.slow)
        if parts[-1] in ("test_ranks.py", "test_world_sizes.py"):
            item.add_marker(pytest.mark.ranks)
        if parts[-1] == "test_report_browser.py":
            item.add_marker(pytest.mark.browser)


def tiny_config(**sections: dict) -> dict:
    config = {
        "description": "tiny test experiment",
        "data": {"sources": ["corpus/*.txt"], "validation_fraction": 0.2},
        "tokenizer": {"vocab_size": 300},
        "model": {"context_length": 16, "d_model": 32, "n_layers": 2, "n_heads": 2},
        "training": {
            "steps": 12,
            "warmup_steps": 2,
            "learning_rate": 3e-3,
            "min_learning_rate": 3e-4,
            "batch_size": 4,
            "eval_interval": 4,
            "eval_blocks": 4,
        },
        "checkpoint": {"interval": 4, "keep": 3},
    }
    for name, values in sections.items():
        config.setdefault(name, {}).update(values)
    return config


def write_experiment(home: Path, experiment_id: str = "EXP-001", **sections: dict) -> Path:
    (home / "experiments").mkdir(parents=True, exist_ok=True)
    path = home / "experiments" / f"{experiment_id}.yaml"
    path.write_text(yaml.safe_dump({"id": experiment_id, **tiny_config(**sections)}, sort_keys=False))
    return path


# One thread per test process, before anything imports torch: the suite runs on several workers (pytest-xdist, a
# worker a core), and a torch of every core in each would make the workers wait on each other's threads. A test of
# what the thread count changes sets its own.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session", autouse=True)
def no_load_warnings() -> None:
    """The suite keeps the box busy: a run's warning about a busy box (``runtime.oversubscribed``) would be noise in
    every test that checks stderr; the test of that warning turns it back on."""
    os.environ["OCTLM_NO_LOAD_CHECK"] = "1"


@pytest.fixture(scope="session", autouse=True)
def state_home(tmp_path_factory: pytest.TempPathFactory):
    """octlm's per-user state (the token cache's signing key, ``data.tokens``) for the whole session in one
    temporary folder, never in the runner's ~/.local/state."""
    previous = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("state"))
    yield
    if previous is None:
        del os.environ["XDG_STATE_HOME"]
    else:
        os.environ["XDG_STATE_HOME"] = previous


@pytest.fixture(scope="session", autouse=True)
def compile_cache(tmp_path_factory: pytest.TempPathFactory):
    """torch.compile's graphs for the whole session in one temporary folder, never in ~/.cache."""
    previous = os.environ.get("OCTLM_COMPILE_CACHE")
    os.environ["OCTLM_COMPILE_CACHE"] = str(tmp_path_factory.mktemp("compile-cache") / "inductor")
    yield
    if previous is None:
        del os.environ["OCTLM_COMPILE_CACHE"]
    else:
        os.environ["OCTLM_COMPILE_CACHE"] = previous


@pytest.fixture(scope="session", autouse=True)
def native_cache(tmp_path_factory: pytest.TempPathFactory):
    """``cross-vendor``'s library (``runtime/native/mkl``) built for the whole session in one temporary folder, never
    in ~/.cache (a test of where it goes sets its own)."""
    previous = os.environ.get("OCTLM_NATIVE_CACHE")
    os.environ["OCTLM_NATIVE_CACHE"] = str(tmp_path_factory.mktemp("native-cache") / "native")
    yield
    if previous is None:
        del os.environ["OCTLM_NATIVE_CACHE"]
    else:
        os.environ["OCTLM_NATIVE_CACHE"] = previous


def made_once(factory: pytest.TempPathFactory, name: str, build: Callable[[Path], Any]) -> Any:
    """What ``build(folder)`` returns (JSON), made once for the whole run: each worker of pytest-xdist asks, the first
    builds it in a folder all of them share while the others wait on a lock, and every later one reads it. For the
    costly fixtures (a trained home, processors under emulation) that one worker would otherwise make again."""
    shared = factory.getbasetemp().parent if os.environ.get("PYTEST_XDIST_WORKER") else factory.getbasetemp()
    folder, done = shared / f"once-{name}", shared / f"once-{name}.json"
    with open(shared / f"once-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            folder.mkdir(exist_ok=True)
            done.write_text(json.dumps(build(folder)))
    return json.loads(done.read_text())


def write_corpus(root: Path) -> Path:
    """The tests' small text corpus, ten overlapping documents in ``root/corpus``; returns ``root``."""
    (root / "corpus").mkdir(parents=True)
    for i in range(10):
        (root / "corpus" / f"doc{i}.txt").write_text(CORPUS[i * 1000 : (i + 1) * 1000 + 500])
    return root


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home with a small text corpus and a tiny EXP-001."""
    root = write_corpus(tmp_path / "home")
    write_experiment(root)
    monkeypatch.delenv("OCTLM_HOME", raising=False)
    monkeypatch.setenv("NO_COLOR", "1")
    return root


def cli(home: Path, *args: str):
    """Run octlm in-process (fast); returns the click Result with .exit_code, .stdout, .stderr."""
    return CliRunner().invoke(app, ["--home", str(home), *args], catch_exceptions=False)


def octlm(home: Path | None, *args: str, timeout: float = 300, **kwargs) -> subprocess.CompletedProcess:
    """Run octlm in a new Python process, as a shell script would."""
    command = [sys.executable, "-m", "octlm", *(["--home", str(home)] if home else []), *args]
    env = {**os.environ, "NO_COLOR": "1", **kwargs.pop("env", {})}
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, **kwargs)


def json_out(result) -> dict:
    return json.loads(result.stdout)


def holds(document: dict, title: str) -> None:
    """``document`` has the keys ``docs/reference/json.md`` gives under ``title`` (the TypedDict of
    ``octlm.cli.reference.shapes``): every required one, and no key it does not list."""
    from octlm.cli import reference

    required, optional = reference.keys(reference.shapes()[title])
    assert required <= set(document) <= required | optional, (title, set(document) ^ (required | optional))


def assert_same_training_state(a, b) -> None:
    """Two checkpoint records hold bit-identical weights, optimizer state and random states."""
    import torch

    assert a.model.keys() == b.model.keys()
    for key in a.model:
        assert torch.equal(a.model[key], b.model[key]), key
    for index, values in a.optimizer["state"].items():
        for name, tensor in values.items():
            assert torch.equal(tensor, b.optimizer["state"][index][name]), (index, name)
    assert torch.equal(a.sampler, b.sampler)
    assert len(a.rng) == len(b.rng)
    for ra, rb in zip(a.rng, b.rng, strict=True):
        assert torch.equal(ra["torch"], rb["torch"])
        assert ra["python"] == rb["python"]


def default_signals() -> None:
    """For a child a test will signal: SIGHUP, SIGINT and SIGTERM as a shell's job gets them, whatever the test
    runner inherited (under ``nohup`` SIGHUP is ignored, and a child would inherit that and rightly go on)."""
    for number in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
        signal.signal(number, signal.SIG_DFL)


def run_on_terminal(
    args: list[str],
    *,
    term: str = "xterm-256color",
    columns: int = 120,
    answer: tuple[bytes, bytes] | None = None,
    keep_no_color: bool = False,
) -> tuple[int, str]:
    """Run ``args`` with stdin, stdout and stderr on a pseudo-terminal; its exit code and all it wrote
    (``answer``: when the first bytes appear, type the second)."""
    master, slave = pty.openpty()
    env = {**os.environ, "COLUMNS": str(columns), "TERM": term}
    if not keep_no_color:
        env.pop("NO_COLOR", None)
    process = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, env=env, preexec_fn=default_signals)
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if not select.select([master], [], [], 0.2)[0]:
            if process.poll() is not None:
                break
            continue
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the other side closed
            break
        if not data:
            break
        chunks.append(data)
        if answer is not None and answer[0] in b"".join(chunks):
            os.write(master, answer[1])
            answer = None
    os.close(master)
    return process.wait(timeout=60), b"".join(chunks).decode("utf-8", "replace")


def screen(shown: str, columns: int = 120, lines: int = 400) -> list[str]:
    """What a terminal of ``columns`` shows at the end of ``shown`` (its cursor moves and redraws applied, by the
    pyte emulator), one string per line, trailing blanks cut; tall enough that nothing scrolls away."""
    import pyte

    terminal = pyte.Screen(columns, lines)
    pyte.Stream(terminal).feed(shown.replace("\n", "\r\n"))
    display = [line.rstrip() for line in terminal.display]
    while display and not display[-1]:
        display.pop()
    return display


@contextlib.contextmanager
def busy_box(processes: int | None = None, *, yielding: bool = False) -> Iterator[None]:
    """Other work on the box: ``processes`` (default: one per core) Python processes spinning, gone afterwards.
    ``yielding``: at the lowest priority (nice 19), so they fill the cores that are idle (a command measuring the box
    at its start sees them) but give way to what then runs, the suite's other workers among it."""
    count = processes or len(os.sched_getaffinity(0))
    lowest = (lambda: os.nice(19)) if yielding else None  # noqa: E731
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=lowest) for _ in range(count)]
    try:
        time.sleep(1.0)  # they run before what is measured starts
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


# ---------------------------------------------------------------- run files and the registry's metrics

METRIC_KEYS = set(METRIC_FIELDS) - set(TIMING_FIELDS)


def records(home: Path, experiment: str = "EXP-001") -> list[dict[str, Any]]:
    return runfile.without_timings(runfile.read(home / "runs" / f"{experiment}.jsonl"))


def metrics_rows(home: Path, experiment: str = "EXP-001", track: str = "train") -> list[dict[str, Any]]:
    with Registry(home / "registry.db") as registry:
        return registry.metrics(experiment, track)


def assert_metrics_match_run_file(home: Path, experiment: str = "EXP-001") -> None:
    """The registry's metrics table holds the run file's records: same steps, same values."""
    rows, kept = metrics_rows(home, experiment), records(home, experiment)
    assert [row["step"] for row in rows] == [record["step"] for record in kept]
    for row, record in zip(rows, kept, strict=True):
        values = {k: v for k, v in row.items() if k in METRIC_KEYS and v is not None}
        assert values == {k: v for k, v in record.items() if v is not None}


# ---------------------------------------------------------------- five experiments as octlm writes them

IDS = [f"EXP-00{n}" for n in range(1, 6)]


@pytest.fixture(scope="module")
def five(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Five experiments with runs, verdicts and run files as octlm writes them, without training."""
    home = tmp_path_factory.mktemp("daily")
    for n, experiment_id in enumerate(IDS, 1):
        write_experiment(home, experiment_id, training={"learning_rate": 0.001 * n}, data={"sources": ["builtin:docs"]})
        records = [
            {
                "step": s,
                "tokens": s * 64,
                "train_loss": 5.9629 + n / 10,
                "eval_loss": 5.96291234,
                "perplexity": 357.8,
                "bits_per_byte": 2.123456,
                "lr": 0.001,
                "gradient_norm": 1.5,
                "elapsed_seconds": 18.7,
                "tokens_per_second": 17537.3,
            }
            for s in (4, 8, 12)
        ]
        (home / "runs").mkdir(exist_ok=True)
        (home / "runs" / f"{experiment_id}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        with Registry(home / "registry.db") as registry:
            register(Home(home), registry, load(Home(home), experiment_id))
            argv = ["octlm", "train", experiment_id, "--until", "12", "--home", str(home / "a" / "long" / "path")]
            run = registry.start_run(experiment_id, "train", start_step=0, argv=argv, pid=17537, threads=2)
            status = {3: "interrupted", 4: "stopped"}.get(n, "completed")
            registry.finish_run(run, status, end_step=12, latest_metrics=records[-1], final_metrics=records[-1])
            registry.add_verification(experiment_id, "verify-resume", "pass", {"summary": "identical " * 12}, run)
    return home
