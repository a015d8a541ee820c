from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from octlm import config as cfg
from octlm.config.schedules import cosine
from octlm.core import layout
from octlm.train import checkpoint
from octlm.train.model.decoder import Decoder
from octlm.train.optim import parameter_groups


def lr(step: int) -> float:
    return cosine(step, learning_rate=3e-4, min_learning_rate=3e-5, warmup_steps=20, steps=200)


def test_schedule_edges_midpoint_end_and_beyond() -> None:
    assert lr(0) == pytest.approx(3e-4 / 20)
    assert lr(19) == pytest.approx(3e-4)
    assert lr(20) == pytest.approx(3e-4)  # cosine starts at the peak
    assert lr(110) == pytest.approx(3e-5 + 0.5 * (3e-4 - 3e-5))  # the cosine's midpoint
    assert lr(200) == pytest.approx(3e-5)
    assert lr(10_000) == pytest.approx(3e-5)  # clamped past the end
    rates = [lr(s) for s in range(20, 201)]
    assert all(a >= b for a, b in zip(rates, rates[1:], strict=False))


def test_decay_groups_matrices_only_in_fixed_order() -> None:
    config = cfg.from_dict(
        {"tokenizer": {"vocab_size": 300}, "model": {"context_length": 8, "d_model": 16, "n_layers": 2, "n_heads": 2}}
    )
    model = Decoder(config)
    decay, no_decay = parameter_groups(model, 0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.ndim == 2 for p in decay["params"]) and all(p.ndim == 1 for p in no_decay["params"])
    named = dict(model.named_parameters())
    assert [id(p) for p in decay["params"]] == [id(p) for n, p in named.items() if p.ndim == 2]
    assert len(no_decay["params"]) == 2 * 2 + 1  # two norms per block and the final norm


def test_clipping_caps_the_global_norm_and_reports_it_before() -> None:
    from octlm.data.blocks import TokenBlocks
    from octlm.train.loop import TrainState, train_step

    config = cfg.from_dict(
        {
            "tokenizer": {"vocab_size": 300},
            "model": {"context_length": 8, "d_model": 16, "n_layers": 1, "n_heads": 2},
            "training": {"grad_clip": 1e-3, "batch_size": 2, "steps": 5, "warmup_steps": 1},
        }
    )
    state = TrainState.fresh(config, torch.device("cpu"), num_blocks=4)
    tokens = torch.randint(300, (4, 9), generator=torch.Generator().manual_seed(0))
    blocks = TokenBlocks(tokens.reshape(-1).numpy(), 9, np.ones(300, dtype=np.int64), pad_id=-1)
    before = {n: p.detach().clone() for n, p in state.model.named_parameters()}
    loss, norm = train_step(state, blocks, 1e-3)
    assert norm.item() > 1e-3  # the norm before clipping is what is reported
    assert state.step == 1
    assert any(not torch.equal(before[n], p) for n, p in state.model.named_parameters())


def small_record(step: int = 7) -> checkpoint.Record:
    return checkpoint.Record(
        experiment="EXP-001",
        kind="train",
        step=step,
        tokens=step * 32,
        elapsed_seconds=1.5,
        model={"w": torch.arange(4.0)},
        optimizer={"state": {}, "param_groups": []},
        sampler=torch.Generator().get_state(),
        scaler={},
        rng=[{"python": (3, (1, 2), None), "torch": torch.ones(3)}],
        fingerprints=checkpoint.Fingerprints("c" * 64, "d" * 64, "t" * 64),
        config={"training": {"steps": 10}},
    )


def test_checkpoint_round_trip_and_checksum(tmp_path: Path) -> None:
    path = layout.checkpoint_path(tmp_path, 7)
    digest, size = checkpoint.save(path, small_record())
    assert size == path.stat().st_size and len(digest) == 64
    loaded = checkpoint.read(path)
    assert loaded.step == 7 and torch.equal(loaded.model["w"], torch.arange(4.0))
    assert loaded.fingerprints == checkpoint.Fingerprints("c" * 64, "d" * 64, "t" * 64)
    raw_payload = torch.load(path, weights_only=True)
    assert raw_payload["format"] == checkpoint.FORMAT and raw_payload["step"] == 7
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(checkpoint.InvalidCheckpoint, match="checksum mismatch"):
        checkpoint.read(path)
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize("missing", ["fingerprints", "step", "model", "rng", "sampler", "config"])
def test_a_payload_missing_a_key_is_invalid_and_named(tmp_path: Path, missing: str) -> None:
    """The checksum proves the bytes, not the shape: a whole file missing a key is still refused."""
    import hashlib
    import io

    from octlm.core.fsutil import atomic_write

    payload = small_record().to_payload()
    del payload[missing]
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    path = layout.checkpoint_path(tmp_path, 7)
    atomic_write(path, buffer.getvalue())
    atomic_write(layout.sidecar(path), f"{hashlib.sha256(buffer.getvalue()).hexdigest()}  {path.name}\n".encode())
    with pytest.raises(checkpoint.InvalidCheckpoint, match=f"missing the key '{missing}'"):
        checkpoint.read(path)
