"""``verify-resume``: prove that a run split across processes ends bit-identical to one done in one go.

Both runs happen in scratch homes (never the experiment's own checkpoints or run file):
(a) one process trains 0 -> M; (b) one process trains 0 -> N1, and each later segment
resumes from the previous checkpoint in a new Python process, up to M. Then every model
tensor, optimizer tensor, random state, the run file and the loss of the next batch after
M are compared bit for bit.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import yaml

from . import checkpoint, experiments, runfile
from .errors import BadInput, OctlmError
from .home import Home
from .locking import ExperimentLock
from .loop import train_step
from .registry import Registry
from .runner import data_root, prepare, restore
from .session import QuietReporter


RNG_KEYS = ("python_rng", "torch_rng", "sampler_rng", "cuda_rng", "mps_rng")


def parse_splits(text: str, until: int) -> list[int]:
    try:
        splits = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise BadInput(f"--split-at {text!r}: expected step numbers such as 100 or 50,100,150") from None
    if not splits:
        raise BadInput("--split-at: give at least one step")
    for step in splits:
        if not 0 < step < until:
            raise BadInput(f"--split-at {step}: must be above 0 and below the final step {until}")
    return splits


def _scratch_home(root: Path, config_text: str, experiment_id: str, tokenizer: Path, cache: Path) -> Home:
    root.mkdir(parents=True)
    (root / "experiments").mkdir()
    (root / "experiments" / f"{experiment_id}.yaml").write_text(config_text)
    folder = root / "checkpoints" / experiment_id
    folder.mkdir(parents=True)
    shutil.copy2(tokenizer, folder / "tokenizer.json")
    cache.mkdir(parents=True, exist_ok=True)
    (root / "cache").symlink_to(cache, target_is_directory=True)
    return Home(root)


def _segment(home: Home, args: list[str], data_root: Path) -> float:
    command = [sys.executable, "-m", "octlm_cli", "--home", str(home.root), *args]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "NO_COLOR": "1", "OCTLM_DATA_ROOT": str(data_root)})
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise OctlmError(f"segment `octlm {' '.join(args)}` failed with exit {done.returncode}: {tail}")
    return time.perf_counter() - started


def _tensors(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Flatten nested dicts/lists to {dotted.path: leaf}."""
    if isinstance(tree, dict):
        out: dict[str, Any] = {}
        for key, value in tree.items():
            out.update(_tensors(value, f"{prefix}{key}."))
        return out
    if isinstance(tree, (list, tuple)) and not (tree and isinstance(tree[0], (int, float))):
        out = {}
        for index, value in enumerate(tree):
            out.update(_tensors(value, f"{prefix}{index}."))
        return out
    return {prefix.rstrip("."): tree}


def _compare(a: Any, b: Any) -> tuple[bool, float | None]:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            return False, None
        if torch.equal(a, b):
            return True, 0.0
        if a.is_floating_point():
            return False, float((a.double() - b.double()).abs().max())
        return False, None
    return a == b, None


def _section(name: str, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    left, right = _tensors(a), _tensors(b)
    differing = []
    for key in sorted(set(left) | set(right)):
        same, gap = _compare(left.get(key), right.get(key))
        if not same:
            differing.append({"name": f"{name}.{key}", "max_abs_diff": gap})
    return {"check": name, "compared": len(set(left) | set(right)), "differing": differing}


def _next_loss(prepared: Any, loaded: checkpoint.Loaded) -> float:
    state = restore(prepared, loaded, QuietReporter())
    loss, _ = train_step(state, prepared.train_blocks, 0.0, prepared.tokenizer.pad_id)
    return float(loss)


def verify_resume(home: Home, experiment_id: str, split_text: str, until: int | None = None,
                  keep_scratch: bool = False, progress: Any = None) -> dict[str, Any]:
    progress = progress or (lambda message: None)
    config = experiments.load(home, experiment_id)
    final = config.training.steps if until is None else until
    if not 0 < final <= config.training.steps:
        raise BadInput(f"--until {final}: must be between 1 and training.steps ({config.training.steps})")
    splits = parse_splits(split_text, final)
    registry = Registry(home.registry)
    experiments.register(home, registry, config)
    try:
        with ExperimentLock(home.checkpoint_dir(experiment_id), experiment_id):
            prepared = prepare(home, config)  # trains the experiment's tokenizer once if it has none
        tokenizer = home.checkpoint_dir(experiment_id) / "tokenizer.json"
        raw = config.to_dict() | {"checkpoint": {"interval": final, "keep": len(splits) + 1}}
        text = yaml.safe_dump(raw, sort_keys=False)
        scratch = Path(tempfile.mkdtemp(prefix=f"octlm-verify-{experiment_id}-"))
        try:
            a = _scratch_home(scratch / "a", text, experiment_id, tokenizer, home.cache)
            b = _scratch_home(scratch / "b", text, experiment_id, tokenizer, home.cache)
            progress(f"(a) one process: steps 0 -> {final}")
            root = data_root(home)
            seconds = {"a": _segment(a, ["train", experiment_id, "--until", str(final)], root)}
            bounds = [*splits, final]
            progress(f"(b) {len(bounds)} processes: steps 0 -> {' -> '.join(map(str, bounds))}")
            seconds["b"] = _segment(b, ["train", experiment_id, "--until", str(bounds[0])], root)
            for stop in bounds[1:]:
                seconds["b"] += _segment(b, ["resume", experiment_id, "--until", str(stop)], root)
            loaded_a = checkpoint.newest_valid(a.checkpoint_dir(experiment_id), step=final)
            loaded_b = checkpoint.newest_valid(b.checkpoint_dir(experiment_id), step=final)
            result = _verdict(prepared, loaded_a, loaded_b, a, b, experiment_id)
        finally:
            if keep_scratch:
                progress(f"scratch kept at {scratch}")
            else:
                shutil.rmtree(scratch, ignore_errors=True)
        result.update({"id": experiment_id, "split_at": splits, "until": final,
                       "seconds": {k: round(v, 2) for k, v in seconds.items()}})
        registry.add_verification(experiment_id, "verify-resume", result["verdict"], result)
        return result
    finally:
        registry.close()


def _verdict(prepared: Any, loaded_a: checkpoint.Loaded, loaded_b: checkpoint.Loaded, a: Home, b: Home,
             experiment_id: str) -> dict[str, Any]:
    sa, sb = loaded_a.state, loaded_b.state
    checks = [
        _section("model", sa["model"], sb["model"]),
        _section("optimizer", sa["optimizer"], sb["optimizer"]),
        _section("rng", {k: sa.get(k) for k in RNG_KEYS}, {k: sb.get(k) for k in RNG_KEYS}),
    ]
    if sa.get("scaler") or sb.get("scaler"):  # fp16 only
        checks.append(_section("scaler", {"scaler": sa.get("scaler")}, {"scaler": sb.get("scaler")}))
    loss_a, loss_b = _next_loss(prepared, loaded_a), _next_loss(prepared, loaded_b)
    checks.append({"check": "next-batch loss", "compared": 1,
                   "differing": [] if loss_a == loss_b else [{"name": "loss", "max_abs_diff": abs(loss_a - loss_b)}],
                   "values": [loss_a, loss_b]})
    records_a = runfile.without_timings(runfile.read(a.run_file(experiment_id)))
    records_b = runfile.without_timings(runfile.read(b.run_file(experiment_id)))
    first_step = next((ra.get("step") for ra, rb in zip(records_a, records_b) if ra != rb), None)
    if first_step is None and len(records_a) != len(records_b):
        first_step = "length differs"
    checks.append({"check": "run file", "compared": max(len(records_a), len(records_b)),
                   "differing": [] if first_step is None else [{"name": f"first differing step: {first_step}", "max_abs_diff": None}]})
    identical = all(not check["differing"] for check in checks)
    summary = ("identical: " if identical else "DIFFERENT: ") + ", ".join(
        f"{c['check']} {c['compared'] - len(c['differing'])}/{c['compared']}" for c in checks)
    return {"verdict": "pass" if identical else "fail", "identical": identical, "checks": checks,
            "next_loss": loss_a, "first_differing_step": first_step, "summary": summary}
