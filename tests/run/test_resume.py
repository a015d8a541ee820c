from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from conftest import assert_same_training_state, cli, holds, json_out, octlm, tiny_config, write_experiment

from octlm.core import layout
from octlm.data import tokens
from octlm.store.runs import runfile
from octlm.train import checkpoint


def metric_rows(home: Path, experiment: str = "EXP-001") -> list[dict]:
    """The registry's metrics table as run-file records (no ids, timings or absent fields)."""
    from octlm.store.registry import Registry

    drop = {"id", "experiment_id", "run_id", "track", *runfile.TIMING_FIELDS}
    with Registry(home / "registry.db") as registry:
        rows = registry.metrics(experiment)
    return [{k: v for k, v in row.items() if k not in drop and v is not None} for row in rows]


def final_state(home: Path, step: int = 12, experiment: str = "EXP-001") -> checkpoint.Record:
    return checkpoint.read(layout.checkpoint_path(home / "checkpoints" / experiment, step))


@pytest.mark.slow
def test_train_then_resume_equals_one_go_in_process(tmp_path: Path, home: Path) -> None:
    assert cli(home, "train", "EXP-001", "-q").exit_code == 0
    whole = final_state(home)
    records_whole = runfile.without_timings(runfile.read(home / "runs" / "EXP-001.jsonl"))
    split_home = tmp_path / "split"
    import shutil

    shutil.copytree(home, split_home, ignore=shutil.ignore_patterns("checkpoints", "runs", "registry.db*", "cache"))
    assert cli(split_home, "train", "EXP-001", "--until", "6", "-q").exit_code == 0
    result = cli(split_home, "resume", "EXP-001", "--json", "-q")
    assert result.exit_code == 0, result.stderr
    assert json_out(result)["start_step"] == 6
    assert_same_training_state(whole, final_state(split_home))
    assert runfile.without_timings(runfile.read(split_home / "runs" / "EXP-001.jsonl")) == records_whole
    assert [r["step"] for r in records_whole] == [4, 5, 8, 10, 12]  # evaluations every 4, logs every 5
    assert metric_rows(home) == metric_rows(split_home) == records_whole


@pytest.mark.slow
def test_resume_in_new_processes_chain_of_three(home: Path) -> None:
    result = octlm(home, "verify-resume", "EXP-001", "--split-at", "3,6", "--json")
    assert result.returncode == 0, result.stderr
    verdict = json.loads(result.stdout)
    assert verdict["identical"] and verdict["split_at"] == [3, 6]
    assert {c["check"] for c in verdict["checks"]} >= {"model", "optimizer", "rng", "next-batch loss", "run file"}
    assert all(c["compared"] > 0 for c in verdict["checks"])
    assert not (home / "checkpoints" / "EXP-001" / "step-000012.pt").exists()  # scratch only
    shown = json_out(cli(home, "show", "EXP-001", "--json"))
    assert shown["verifications"][-1]["verdict"] == "pass"


@pytest.mark.slow
def test_changed_cadence_leaves_weights_identical(tmp_path: Path, home: Path) -> None:
    assert cli(home, "train", "EXP-001", "-q").exit_code == 0
    other = tmp_path / "other"
    (other / "corpus").mkdir(parents=True)
    for path in (home / "corpus").iterdir():
        (other / "corpus" / path.name).write_text(path.read_text())
    write_experiment(other, training={"eval_interval": 3, "eval_blocks": 2}, checkpoint={"interval": 5, "keep": 1})
    assert cli(other, "train", "EXP-001", "-q").exit_code == 0
    assert_same_training_state(final_state(home), final_state(other))
    kept = [p.name for p in (other / "checkpoints" / "EXP-001").glob("*.pt")]
    assert kept == ["step-000012.pt"]  # keep=1, and the final one always


@pytest.mark.slow
def test_changed_config_is_refused_with_a_readable_diff(home: Path) -> None:
    assert cli(home, "train", "EXP-001", "--until", "4", "-q").exit_code == 0
    path = home / "experiments" / "EXP-001.yaml"
    raw = yaml.safe_load(path.read_text())
    raw["training"]["learning_rate"] = 0.001
    path.write_text(yaml.safe_dump(raw))
    result = cli(home, "resume", "EXP-001", "-q")
    assert result.exit_code == 3
    assert "training.learning_rate: 0.003 -> 0.001" in result.stderr
    (home / "corpus" / "doc0.txt").write_text("completely different text now")
    raw["training"]["learning_rate"] = 0.003
    path.write_text(yaml.safe_dump(raw))
    result = cli(home, "resume", "EXP-001", "-q")
    assert result.exit_code == 3 and "dataset changed" in result.stderr


@pytest.mark.slow
def test_train_refuses_existing_progress_unless_restart(home: Path) -> None:
    assert cli(home, "train", "EXP-001", "--until", "4", "-q").exit_code == 0
    refused = cli(home, "train", "EXP-001", "-q")
    assert refused.exit_code == 3 and "octlm resume EXP-001" in refused.stderr
    assert cli(home, "train", "EXP-001", "--restart", "-q").exit_code == 0
    done = cli(home, "resume", "EXP-001", "--json", "-q")
    assert done.exit_code == 0 and json_out(done)["status"] == "complete"


@pytest.mark.slow
def test_resume_without_checkpoint_starts_at_zero_and_registers(home: Path) -> None:
    result = cli(home, "resume", "EXP-001", "--json")
    assert result.exit_code == 0
    assert "no checkpoint: starting from step 0" in result.stderr
    shown = json_out(cli(home, "show", "EXP-001", "--json"))
    assert shown["runs"][-1]["status"] == "completed" and shown["runs"][-1]["end_step"] == 12
    steps = [c["step"] for c in shown["checkpoints"]]
    assert steps == [4, 8, 12]
    for row in shown["checkpoints"]:
        assert len(row["sha256"]) == 64 and row["size"] == (home / row["path"]).stat().st_size


@pytest.mark.slow
def test_overfit_reaches_its_threshold(home: Path) -> None:
    result = cli(home, "overfit", "EXP-001", "--steps", "150", "--max-loss", "1.0", "--json", "-q")
    assert result.exit_code == 0, result.stdout
    report = json_out(result)
    holds(report, "octlm overfit ID --json")
    assert report["final_loss"] <= 1.0 and report["verdict"] == "pass"
    assert report["matched_tokens"] >= 1
    assert (home / "runs" / "EXP-001-overfit.jsonl").exists()
    failed = cli(home, "overfit", "EXP-001", "--steps", "2", "--max-loss", "0.01", "-q")
    assert failed.exit_code == 1
    # --steps trains a variant; the experiment's registered config stays the file's.
    from octlm.store.registry import Registry

    with Registry(home / "registry.db", create=False) as registry:
        row = registry.experiment("EXP-001")
    assert row is not None and row["config_json"]["training"]["steps"] == 12  # decoded by the registry


@pytest.mark.slow
def test_sample_needs_a_checkpoint_then_is_seeded(home: Path) -> None:
    missing = cli(home, "sample", "EXP-001")
    assert missing.exit_code == 3 and "no checkpoint" in missing.stderr
    assert cli(home, "train", "EXP-001", "-q").exit_code == 0
    first = cli(home, "sample", "EXP-001", "--prompt", "The", "--seed", "3", "--max-new-tokens", "20")
    second = cli(home, "sample", "EXP-001", "--prompt", "The", "--seed", "3", "--max-new-tokens", "20")
    assert first.exit_code == 0 and first.stdout == second.stdout and first.stdout.startswith("The")


@pytest.mark.slow
def test_bf16_autocast_resumes_exactly(home: Path) -> None:
    write_experiment(home, "EXP-002", training={"precision": "bf16"})
    result = octlm(home, "verify-resume", "EXP-002", "--split-at", "5", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["identical"]


@pytest.mark.slow
def test_second_run_reads_tokens_from_the_cache(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert cli(home, "train", "EXP-001", "--until", "4", "-q").exit_code == 0
    assert len(list((home / "cache").glob("tokens-*.bin"))) == 1
    from octlm.data.tokenizer import Tokenizer

    def no_encoding(self, texts):  # a spy: the real run above made the cache
        raise AssertionError("tokenized again")

    monkeypatch.setattr(Tokenizer, "encode_documents", no_encoding)

    def no_rewrite(*args: object) -> None:
        raise AssertionError("the token file was written again")

    monkeypatch.setattr(tokens, "_write_cache", no_rewrite)
    assert cli(home, "resume", "EXP-001", "-q").exit_code == 0


@pytest.mark.slow
def test_fp16_with_grad_scaler_resumes_exactly(home: Path) -> None:
    write_experiment(home, "EXP-003", training={"precision": "fp16"})
    result = octlm(home, "verify-resume", "EXP-003", "--split-at", "5", "--json")
    assert result.returncode == 0, result.stderr
    verdict = json.loads(result.stdout)
    assert verdict["identical"]
    scaler = next(c for c in verdict["checks"] if c["check"] == "scaler")
    assert scaler["compared"] > 0 and not scaler["differing"]


@pytest.mark.slow
def test_compiled_training_with_dropout_resumes_exactly(home: Path, tmp_path: Path, monkeypatch) -> None:
    # torch.compile generates the same code in every process, and dropout inside the compiled
    # graph draws its seeds from the checkpointed generator: the split run must be bit-identical.
    # The graphs go to the per-user compile cache (here a fresh one), shared by the three runs.
    write_experiment(home, "EXP-004", training={"compile": True, "steps": 8}, model={"dropout": 0.1, "n_layers": 1})
    graphs = tmp_path / "graphs"
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)  # set by an earlier in-process compile; it wins
    env = {"OCTLM_COMPILE_CACHE": str(graphs)}
    result = octlm(home, "verify-resume", "EXP-004", "--split-at", "5", "--json", timeout=900, env=env)
    assert result.returncode == 0, result.stderr
    verdict = json.loads(result.stdout)
    assert verdict["identical"] and verdict["checks"][0]["compared"] > 0
    assert graphs.stat().st_mode & 0o777 == 0o700 and any((graphs / "fxgraph").rglob("*"))
    assert not (home / "cache" / "inductor").exists()


def test_compiled_and_eager_runs_are_different_experiments(home: Path) -> None:
    from octlm import config as cfg

    eager = cfg.from_dict(tiny_config())
    compiled = cfg.from_dict(tiny_config(training={"compile": True}))
    assert eager.fingerprint != compiled.fingerprint
    # A key added later leaves the fingerprint of configs that do not use it unchanged.
    assert "training.compile" not in eager.trajectory_dict()
    assert compiled.trajectory_dict()["training.compile"] is True


@pytest.mark.slow
def test_compile_without_a_compiler_is_one_line_and_keeps_checkpoints(home: Path, tmp_path: Path) -> None:
    write_experiment(home, "EXP-005", training={"compile": False})
    assert octlm(home, "train", "EXP-005", "--until", "4", "-q").returncode == 0
    write_experiment(home, "EXP-005", training={"compile": True})
    empty = tmp_path / "no-compilers"
    empty.mkdir()
    result = octlm(home, "train", "EXP-005", "--restart", "-q", env={"PATH": str(empty)})
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "training.compile" in result.stderr and "C++ compiler" in result.stderr
    assert (home / "checkpoints" / "EXP-005" / "step-000004.pt").exists()  # --restart did not discard them


FIXTURE_V1 = Path(__file__).resolve().parents[1] / "fixtures" / "checkpoint-v1"


def _home_from_v1_fixture(root: Path, with_checkpoint: bool) -> Path:
    """A home laid out from the fixture: a tiny EXP-001 (8 steps) whose step-4 checkpoint was written
    by octlm before the typed record (format v1, RNG states at the top level)."""
    import shutil

    (root / "experiments").mkdir(parents=True)
    shutil.copy2(FIXTURE_V1 / "EXP-001.yaml", root / "experiments" / "EXP-001.yaml")
    shutil.copytree(FIXTURE_V1 / "corpus", root / "corpus")
    folder = root / "checkpoints" / "EXP-001"
    folder.mkdir(parents=True)
    shutil.copy2(FIXTURE_V1 / "tokenizer.json", folder / "tokenizer.json")
    if with_checkpoint:
        for name in ("step-000004.pt", "step-000004.sha256"):
            shutil.copy2(FIXTURE_V1 / name, folder / name)
        (root / "runs").mkdir()
        shutil.copy2(FIXTURE_V1 / "EXP-001.jsonl", root / "runs" / "EXP-001.jsonl")
    return root


@pytest.mark.slow
def test_a_v1_checkpoint_still_resumes_exactly(tmp_path: Path) -> None:
    """A v1 checkpoint continues exactly as the same progress written by this octlm (v2) does. The fixture was
    written on another machine, so the reference is its own record saved as v2, not a run trained here."""
    old = _home_from_v1_fixture(tmp_path / "old", with_checkpoint=True)
    new = _home_from_v1_fixture(tmp_path / "new", with_checkpoint=False)
    v1 = old / "checkpoints" / "EXP-001" / "step-000004.pt"
    raw = torch.load(v1, weights_only=True)
    assert raw["format"] == "octlm-checkpoint-v1" and "python_rng" in raw and "rng" not in raw
    record = checkpoint.read(v1)
    assert record.step == 4 and record.tokens == 4 * 4 * 16 and record.kind == "train"
    checkpoint.save(layout.checkpoint_path(new / "checkpoints" / "EXP-001", 4), record)
    (new / "runs").mkdir()
    shutil.copy2(FIXTURE_V1 / "EXP-001.jsonl", new / "runs" / "EXP-001.jsonl")
    for home in (old, new):
        result = cli(home, "resume", "EXP-001", "--json", "-q")
        assert result.exit_code == 0, result.stderr
        assert json_out(result)["start_step"] == 4
    assert_same_training_state(final_state(old, 8), final_state(new, 8))
    assert torch.load(old / "checkpoints" / "EXP-001" / "step-000008.pt", weights_only=True)["format"] == (
        checkpoint.FORMAT
    )
    records = [runfile.without_timings(runfile.read(h / "runs" / "EXP-001.jsonl")) for h in (old, new)]
    assert records[0] == records[1] and [r["step"] for r in records[0] if r["step"] > 4] == [5, 8]
    assert metric_rows(old) == metric_rows(new) == [r for r in records[0] if r["step"] > 4]


@pytest.mark.slow
def test_a_checkpoint_missing_its_config_hash_falls_back_or_refuses(home: Path) -> None:
    """A whole, checksummed v1 file without ``config_hash``: never a KeyError, never a traceback."""
    import hashlib
    import io

    assert cli(home, "train", "EXP-001", "--until", "8", "-q").exit_code == 0
    folder = home / "checkpoints" / "EXP-001"
    for step in (4, 8):
        path = layout.checkpoint_path(folder, step)
        payload = checkpoint.read(path).to_payload()
        legacy = {k: v for k, v in payload.items() if k not in ("rng", "fingerprints", "sampler", "tokens")}
        legacy.update(
            format="octlm-checkpoint-v1",
            sampler_rng=payload["sampler"],
            tokens_processed=payload["tokens"],
            python_rng=payload["rng"][0]["python"],
            torch_rng=payload["rng"][0]["torch"],
            data_hash=payload["fingerprints"]["data"],
            tokenizer_hash=payload["fingerprints"]["tokenizer"],
        )
        if step == 4:  # step 4 stays whole: resume falls back to it
            legacy["config_hash"] = payload["fingerprints"]["config"]
        buffer = io.BytesIO()
        torch.save(legacy, buffer)
        path.write_bytes(buffer.getvalue())
        layout.sidecar(path).write_text(f"{hashlib.sha256(buffer.getvalue()).hexdigest()}  {path.name}\n")
    (home / "registry.db").unlink()  # its digests would refuse the rewritten bytes first
    broken = {p.name: p.read_bytes() for p in folder.glob("step-000008.*")}
    fell_back = octlm(home, "resume", "EXP-001", "--until", "10", "-q")
    assert fell_back.returncode == 0, fell_back.stderr
    assert "step-000008.pt: missing the key 'config_hash'" in fell_back.stderr
    assert "falling back to step-000004.pt" in fell_back.stderr and "Traceback" not in fell_back.stderr
    for path in folder.glob("step-*"):  # only the broken file left: nothing valid to resume from
        path.unlink()
    for name, payload in broken.items():
        (folder / name).write_bytes(payload)
    (home / "registry.db").unlink()
    refused = octlm(home, "resume", "EXP-001", "-q")
    assert refused.returncode == 3, refused.stderr
    assert refused.stderr.count("\n") == 1 and "missing the key 'config_hash'" in refused.stderr
