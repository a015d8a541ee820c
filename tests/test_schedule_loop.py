from __future__ import annotations

from pathlib import Path

import pytest
import torch

from octlm_cli import checkpoint, config as cfg
from octlm_cli.loop import parameter_groups
from octlm_cli.model import Decoder
from octlm_cli.schedule import learning_rate


def lr(step: int) -> float:
    return learning_rate(step, peak=3e-4, floor=3e-5, warmup_steps=20, total_steps=200)


def test_schedule_edges_midpoint_end_and_beyond() -> None:
    assert lr(0) == pytest.approx(3e-4 / 20)
    assert lr(19) == pytest.approx(3e-4)
    assert lr(20) == pytest.approx(3e-4)  # cosine starts at the peak
    assert lr(110) == pytest.approx(3e-5 + 0.5 * (3e-4 - 3e-5))  # the cosine's midpoint
    assert lr(200) == pytest.approx(3e-5)
    assert lr(10_000) == pytest.approx(3e-5)  # clamped past the end
    rates = [lr(s) for s in range(20, 201)]
    assert all(a >= b for a, b in zip(rates, rates[1:]))


def test_decay_groups_matrices_only_in_fixed_order() -> None:
    config = cfg.from_dict({"tokenizer": {"vocab_size": 300}, "model": {"context_length": 8, "d_model": 16,
                                                                        "n_layers": 2, "n_heads": 2}})
    model = Decoder(config)
    decay, no_decay = parameter_groups(model, 0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.ndim == 2 for p in decay["params"]) and all(p.ndim == 1 for p in no_decay["params"])
    named = dict(model.named_parameters())
    assert [id(p) for p in decay["params"]] == [id(p) for n, p in named.items() if p.ndim == 2]
    assert len(no_decay["params"]) == 2 * 2 + 1  # two norms per block and the final norm


def test_clipping_caps_the_global_norm_and_reports_it_before() -> None:
    from octlm_cli.loop import TrainState, train_step
    from octlm_cli.data import TokenBlocks

    config = cfg.from_dict({"tokenizer": {"vocab_size": 300}, "model": {"context_length": 8, "d_model": 16, "n_layers": 1,
                            "n_heads": 2}, "training": {"grad_clip": 1e-3, "batch_size": 2, "steps": 5, "warmup_steps": 1}})
    state = TrainState.fresh(config, torch.device("cpu"), num_blocks=4)
    tokens = torch.randint(300, (4, 9), generator=torch.Generator().manual_seed(0))
    blocks = TokenBlocks(tokens[:, :-1], tokens[:, 1:], torch.ones(4, 8, dtype=torch.int64))
    before = {n: p.detach().clone() for n, p in state.model.named_parameters()}
    loss, norm = train_step(state, blocks, 1e-3, pad_id=-1)
    assert norm.item() > 1e-3  # the norm before clipping is what is reported
    assert state.step == 1
    assert any(not torch.equal(before[n], p) for n, p in state.model.named_parameters())


def test_checkpoint_round_trip_and_checksum(tmp_path: Path) -> None:
    path = checkpoint.path_for(tmp_path, 7)
    state = {"format": checkpoint.FORMAT, "step": 7, "model": {"w": torch.arange(4.0)}, "python_rng": (3, (1, 2), None)}
    digest, size = checkpoint.save(path, state)
    assert size == path.stat().st_size and len(digest) == 64
    loaded = checkpoint.read(path)
    assert loaded["step"] == 7 and torch.equal(loaded["model"]["w"], torch.arange(4.0))
    assert torch.load(path, weights_only=True)["step"] == 7
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(checkpoint.InvalidCheckpoint, match="checksum mismatch"):
        checkpoint.read(path)
    assert not list(tmp_path.glob("*.tmp"))
