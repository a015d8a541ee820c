"""Canonical pieces (``training.micro_batches``): the same bits at every world size that divides them.

Real ranks on loopback (torch's elastic launcher, two "nodes" on one box), real checkpoints and run files. The
configs are tiny, with dropout 0.1 so that the pieces' random streams matter (the first test has none, so its ranks
run their pieces in one pass), and a few steps: most of a test's time is starting interpreters that import torch.
Every rank runs 1 thread (the box has 2 cores); the bits do not depend on it (MKL's strict mode, which the pieces
pin), only the time does.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import assert_same_training_state, octlm, write_corpus, write_experiment
from test_ranks import checkpoint_path, free_port, one_line, reap, registry, start

from octlm.store.runs import runfile
from octlm.train import checkpoint

pytestmark = [pytest.mark.slow, pytest.mark.ranks]

ID = "EXP-001"
STEPS = 8
THREADS = {"OMP_NUM_THREADS": "1"}


def make_home(
    root: Path, pieces: int, batch: int, steps: int = STEPS, dropout: float = 0.1, **training: object
) -> Path:
    write_corpus(root)
    write_experiment(
        root,
        ID,
        model={"dropout": dropout},
        training={"batch_size": batch, "micro_batches": pieces, "steps": steps, "eval_interval": 4, **training},
        checkpoint={"interval": 4, "keep": 4},
    )
    return root


def digest(path: Path) -> dict[str, str]:
    """sha256 of the final weights and of the optimizer state, each over its tensors in order."""
    record = checkpoint.read(path)
    found = {}
    for name, tree in (("model", record.model), ("optimizer", record.optimizer["state"])):
        sha = hashlib.sha256()
        for key, value in sorted(_flat(tree).items()):
            sha.update(key.encode())
            sha.update(value.numpy().tobytes() if hasattr(value, "numpy") else repr(value).encode())
        found[name] = sha.hexdigest()
    return found


def _flat(tree: object, prefix: str = "") -> dict[str, object]:
    if isinstance(tree, dict):
        return {k: v for key, value in tree.items() for k, v in _flat(value, f"{prefix}{key}.").items()}
    return {prefix: tree}


def run_records(home: Path) -> list[dict[str, object]]:
    return runfile.without_timings(runfile.read(home / "runs" / f"{ID}.jsonl"))


def layouts(
    root: Path,
    pieces: int,
    batch: int,
    layouts: dict[str, list[str]],
    env: dict[str, str] | None = None,
    dropout: float = 0.1,
):
    """Train the same experiment under each layout (its extra arguments), two at a time; {name: home}."""
    homes = {name: make_home(root / name, pieces, batch, dropout=dropout) for name in layouts}
    names_left = list(layouts)
    while names_left:
        batch_names, names_left = names_left[:2], names_left[2:]
        running = {}
        for name in batch_names:
            extra = layouts[name]
            if "--nnodes" in extra:  # two nodes on loopback: two launchers meeting at one endpoint
                endpoint = ["--rdzv-endpoint", f"127.0.0.1:{free_port()}"]
                common = ("train", ID, "-q", *extra, *endpoint)
                running[name] = [
                    start(homes[name], *common, "--node-rank", "1", env={**THREADS, **(env or {})}),
                    start(homes[name], *common, "--node-rank", "0", env={**THREADS, **(env or {})}),
                ]
            else:
                running[name] = [start(homes[name], "train", ID, "-q", *extra, env={**THREADS, **(env or {})})]
        try:
            for name, processes in running.items():
                for process in processes:
                    stdout, stderr = process.communicate(timeout=300)
                    assert process.returncode == 0, (name, stderr)
        finally:
            for name, processes in running.items():
                reap(homes[name], *processes)
    return homes


def same_state(a: checkpoint.Record, b: checkpoint.Record) -> None:
    """Bit-identical weights, optimizer state, sampler and random states, whatever the two world sizes: every rank
    of a run of pieces holds the one state a single process holds."""
    assert_same_training_state(_one_stream(a), _one_stream(b))


def _one_stream(record: checkpoint.Record) -> checkpoint.Record:
    first = record.rng[0]
    for state in record.rng:  # every rank's: the same
        assert torch.equal(state["torch"], first["torch"]) and state["python"] == first["python"]
    return dataclasses.replace(record, rng=record.rng[:1])


def assert_identical(homes: dict[str, Path], step: int = STEPS) -> dict[str, str]:
    """Every home's checkpoint at ``step`` holds the bits of the first's, and its run file the same records."""
    first, *others = homes
    reference = digest(checkpoint_path(homes[first], step))
    for name in others:
        assert digest(checkpoint_path(homes[name], step)) == reference, (first, name)
        same_state(
            checkpoint.read(checkpoint_path(homes[first], step)), checkpoint.read(checkpoint_path(homes[name], step))
        )
        assert run_records(homes[name]) == run_records(homes[first]), (first, name)
    return reference


# ---------------------------------------------------------------- one run, every world size


def test_four_pieces_train_the_same_bits_on_1_2_4_ranks_and_two_nodes(tmp_path: Path) -> None:
    """Without dropout, so each rank runs its pieces in one forward and backward (``train.model.piecewise``): four
    on one process, two on each of two ranks (whose halves of the tree one all-reduce sums), one on each of four.
    With dropout each piece runs its own pass: the tests below."""
    homes = layouts(
        tmp_path,
        pieces=4,
        batch=8,
        dropout=0.0,
        layouts={
            "one": [],
            "two": ["--nproc", "2"],
            "four": ["--nproc", "4"],
            "nodes": ["--nnodes", "2", "--nproc", "2"],
        },
    )
    shas = assert_identical(homes)
    print(f"K=4, 1 / 2 / 4 ranks / 2 nodes x 2: model sha256 {shas['model'][:16]}, optimizer {shas['optimizer'][:16]}")
    for name, size in (("one", 1), ("two", 2), ("four", 4), ("nodes", 4)):
        assert registry(homes[name], "select world_size from runs") == [(size,)], name
    # every rank holds the same random state, and it is the one process's
    saved = checkpoint.read(checkpoint_path(homes["four"], STEPS))
    assert len(saved.rng) == 4 and len(checkpoint.read(checkpoint_path(homes["one"], STEPS)).rng) == 1


def test_six_pieces_are_exact_on_3_ranks_and_a_ring_sum_is_not(tmp_path: Path) -> None:
    homes = layouts(
        tmp_path / "exact",
        pieces=6,
        batch=12,
        layouts={"one": [], "three": ["--nproc", "3"]},  # 2: the test above
    )
    assert_identical(homes)
    planted = layouts(
        tmp_path / "ring",
        pieces=6,
        batch=12,
        layouts={"three": ["--nproc", "3"]},
        env={"OCTLM_DISTRIBUTED_FAULT": "ring-sum"},
    )
    with pytest.raises(AssertionError):  # the planted all-reduce associates the ranks' sums differently
        assert_identical({"one": homes["one"], "ring": planted["three"]})
    ring, exact = (digest(checkpoint_path(h, STEPS))["model"] for h in (planted["three"], homes["one"]))
    assert ring != exact


# ---------------------------------------------------------------- stopped on one world size, resumed on another


def test_stopped_on_four_ranks_continues_on_two_and_on_one_exactly(tmp_path: Path) -> None:
    homes = layouts(tmp_path / "straight", pieces=4, batch=8, layouts={"straight": []})
    stopped = make_home(tmp_path / "stopped", 4, 8)
    result = octlm(stopped, "train", ID, "--nproc", "4", "--until", "4", "-q", env=THREADS)
    assert result.returncode == 0, result.stderr
    on_two, on_one = tmp_path / "on-two", tmp_path / "on-one"
    shutil.copytree(stopped, on_two)
    shutil.copytree(stopped, on_one)
    resumed = [
        start(on_two, "resume", ID, "--nproc", "2", "-q", env=THREADS),
        start(on_one, "resume", ID, "-q", env=THREADS),
    ]
    try:
        for process in resumed:
            _, stderr = process.communicate(timeout=300)
            assert process.returncode == 0, stderr
            assert "--reshard" not in stderr and "not be bit-identical" not in stderr, stderr
    finally:
        reap(on_two, resumed[0])
        reap(on_one, resumed[1])
    assert_identical({"straight": homes["straight"], "on two": on_two, "on one": on_one})
    rows = registry(on_two, "select kind, world_size, resharded_from from runs order by id")
    assert rows == [("train", 4, None), ("resume", 2, None)]


TINY = {  # tiny_config's, as `octlm new --set` gives them; dropout, so the pieces' random streams matter
    "data.sources": "corpus/*.txt",
    "data.validation_fraction": 0.2,
    "tokenizer.vocab_size": 300,
    "model.context_length": 16,
    "model.d_model": 32,
    "model.n_layers": 2,
    "model.n_heads": 2,
    "model.dropout": 0.1,
    "training.steps": STEPS,
    "training.warmup_steps": 2,
    "training.learning_rate": 3e-3,
    "training.min_learning_rate": 3e-4,
    "training.eval_interval": 4,
    "training.eval_tokens": 256,
    "checkpoint.interval": 4,
}


def test_a_new_experiment_stopped_on_two_ranks_continues_on_one_and_on_four_exactly(tmp_path: Path) -> None:
    """Issue 50: pieces by default. An experiment as `octlm new` makes it (day1's batch of 8: four pieces, nothing
    set about them) trained straight on one process, and stopped on 2 ranks then continued on 1 and on 4, without
    --reshard: the same weights, optimizer state, random states and run file at the end."""
    straight = write_corpus(tmp_path / "straight")
    made = octlm(straight, "new", ID, *(arg for key, value in TINY.items() for arg in ("--set", f"{key}={value}")))
    assert made.returncode == 0, made.stderr
    assert "micro_batches: 4" in (straight / "experiments" / f"{ID}.yaml").read_text()
    stopped = tmp_path / "stopped"
    shutil.copytree(straight, stopped)
    running = [
        start(straight, "train", ID, "-q", env=THREADS),
        start(stopped, "train", ID, "--nproc", "2", "--until", "4", "-q", env=THREADS),
    ]
    try:
        for process in running:
            _, stderr = process.communicate(timeout=300)
            assert process.returncode == 0, stderr
    finally:
        reap(straight, running[0])
        reap(stopped, running[1])
    on_one, on_four = tmp_path / "on-one", tmp_path / "on-four"
    shutil.copytree(stopped, on_one)
    shutil.copytree(stopped, on_four)
    resumed = [
        start(on_one, "resume", ID, "-q", env=THREADS),
        start(on_four, "resume", ID, "--nproc", "4", "-q", env=THREADS),
    ]
    try:
        for process in resumed:
            _, stderr = process.communicate(timeout=300)
            assert process.returncode == 0, stderr
            assert "--reshard" not in stderr and "not be bit-identical" not in stderr, stderr
    finally:
        reap(on_one, resumed[0])
        reap(on_four, resumed[1])
    assert_identical({"straight": straight, "on one": on_one, "on four": on_four})
    rows = registry(on_four, "select kind, world_size, resharded_from from runs order by id")
    assert rows == [("train", 2, None), ("resume", 4, None)]


def test_verify_resume_from_two_ranks_to_one_passes(tmp_path: Path) -> None:
    """Another world size for each segment (2, then 1, then 2): the smallest proof; 4 ranks stopped and continued on 2
    and on 1 is the test above."""
    home = make_home(tmp_path / "home", 4, 8)
    result = octlm(home, "verify-resume", ID, "--nproc", "2,1", "--split-at", "4", "--json", env=THREADS, timeout=400)
    assert result.returncode == 0, result.stderr
    verdict = json.loads(result.stdout)
    assert verdict["verdict"] == "pass" and verdict["nproc"] == [2, 1], verdict["summary"]
    for check in verdict["checks"]:
        assert check["compared"] > 0 and check["differing"] == [], check
    assert "(a) x2" in result.stderr and "(b1) x1" in result.stderr and "(b2) x2" in result.stderr


# ---------------------------------------------------------------- what is refused, in one line, before any rank


def test_world_sizes_that_do_not_divide_the_pieces_are_refused(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home", 8, 8)
    for args in (
        ["train", ID, "--nproc", "3"],
        ["verify-resume", ID, "--nproc", "4,3", "--split-at", "4"],
        ["train", ID, "--nnodes", "3", "--nproc", "1", "--node-rank", "0", "--rdzv-endpoint", "127.0.0.1:1"],
    ):
        result = octlm(home, *args)
        assert result.returncode == 2, (args, result.stderr)
        line = one_line(result.stderr)
        assert "training.micro_batches 8: --nproc x --nnodes must divide it: 1, 2, 4 or 8 (not 3)" in line, line
        assert result.stdout == ""
    assert not (home / "checkpoints").exists() or not any((home / "checkpoints").rglob("*.pt"))
    # a checkpoint of 2 ranks may not continue on 3 either: bad input, nothing written
    result = octlm(home, "train", ID, "--nproc", "2", "--until", "4", "-q", env=THREADS)
    assert result.returncode == 0, result.stderr
    result = octlm(home, "resume", ID, "--nproc", "3")
    assert result.returncode == 2 and "1, 2, 4 or 8 (not 3)" in one_line(result.stderr), result.stderr
    # several sizes need the pieces
    plain = make_home(tmp_path / "plain", 0, 8)
    result = octlm(plain, "verify-resume", ID, "--nproc", "4,2", "--split-at", "4")
    assert result.returncode == 2 and "training.micro_batches" in one_line(result.stderr), result.stderr


@pytest.mark.parametrize(
    ("training", "key", "says"),
    [
        ({"micro_batches": 3}, "training.micro_batches", "must divide training.batch_size (8), got 3"),
        ({"micro_batches": 4, "grad_accum_steps": 2}, "training.grad_accum_steps", "must be 1 with"),
    ],
)
def test_pieces_that_do_not_fit_the_batch_are_one_line(
    tmp_path: Path, training: dict[str, int], key: str, says: str
) -> None:
    home = make_home(tmp_path / "home", 0, 8, **training)
    result = octlm(home, "train", ID)
    assert result.returncode == 2, result.stderr
    line = one_line(result.stderr)
    assert key in line and says in line, line


def test_config_keys_documents_the_pieces_and_what_they_pin(tmp_path: Path) -> None:
    result = octlm(tmp_path, "config", "keys")
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert "training.micro_batches" in text and "MKL_CBWR" in text, text[:2000]


def test_a_fingerprint_without_the_world_size(tmp_path: Path) -> None:
    from octlm import config as cfg

    raw = {"training": {"batch_size": 8, "micro_batches": 4}}
    pieces = cfg.from_dict(raw, "x")
    assert pieces.fingerprint_at(4) == pieces.fingerprint_at(2) == pieces.fingerprint_at(1) == pieces.fingerprint
    plain = cfg.from_dict({"training": {"batch_size": 8}}, "x")
    assert plain.fingerprint_at(2) != plain.fingerprint and plain.fingerprint != pieces.fingerprint
    assert cfg.from_dict({"training": {"batch_size": 8, "micro_batches": 0}}, "x").fingerprint == plain.fingerprint


# ---------------------------------------------------------------- threads


PIECE = """
import hashlib, sys, torch
from octlm import config as cfg
from octlm.config.presets import preset
from octlm.train.model.decoder import Decoder, loss
torch.set_num_threads(int(sys.argv[1]))
raw = preset("day1"); raw["model"]["dropout"] = 0.1; raw["training"]["compile"] = False
config = cfg.from_dict(raw, "day1")
torch.manual_seed(1337); model = Decoder(config)
tokens = torch.randint(3, config.tokenizer.vocab_size, (2, config.model.context_length + 1),
                       generator=torch.Generator().manual_seed(0))
torch.manual_seed(42)
loss(model(tokens[:, :-1]), tokens[:, 1:], -1).backward()
digest = hashlib.sha256()
for parameter in model.parameters():
    digest.update(parameter.grad.numpy().tobytes())
print(digest.hexdigest())
"""


def test_a_piece_of_day1_has_the_same_bits_on_one_thread_and_two_under_the_pinned_mode() -> None:
    """One piece of day1 (2 blocks of 128 tokens): its gradient under MKL's strict mode, which the pieces pin, is
    the same on 1 and 2 threads; without it (printed, as it depends on the processor) it differs on this box."""

    def piece(threads: int, mkl: str | None) -> str:
        env = {k: v for k, v in os.environ.items() if k != "MKL_CBWR"} | ({"MKL_CBWR": mkl} if mkl else {})
        command = [sys.executable, "-c", PIECE, str(threads)]
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    for mode in ("AUTO,STRICT", "AVX2,STRICT"):  # local's pinned setting with pieces, and vendor's
        assert piece(1, mode) == piece(2, mode), mode
    unpinned = piece(1, None) == piece(2, None)
    print(f"day1 piece, MKL_CBWR unset: 1 and 2 threads {'agree' if unpinned else 'differ'} here")
