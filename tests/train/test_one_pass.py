"""Issue 37 item 1: a rank runs its canonical pieces in one forward and backward (``train.model.piecewise``), and
each piece's leaf has the bits the piece gets alone: its parameters' gradients and its loss. So one pass, the
per-piece passes and every world size train the same weights."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from octlm import config as cfg
from octlm.tasks.bench.measure import synthetic_blocks
from octlm.train import loop
from octlm.train.model import piecewise
from octlm.train.model.decoder import Decoder, loss
from octlm.train.model.piecewise import PiecePlan
from octlm.train.state import TrainState

PAD = -100
# (context, width, layers, heads, vocab, batch): the tests' tiny model, and one whose SiLU each piece cuts into parts
SHAPES = {"tiny": (16, 32, 2, 2, 300, 8), "silu-in-parts": (64, 128, 2, 4, 1024, 8)}


@pytest.fixture
def threads() -> Iterator[None]:
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def decoder(shape: str, pieces: int) -> tuple[Decoder, torch.Tensor, torch.Tensor]:
    """A model with pieces (thread-invariant SiLU), and a batch whose first piece has padded targets and whose last
    piece (of several) is all padding (its loss and share are 0)."""
    context, width, layers, heads, vocab, batch = SHAPES[shape]
    model = {"context_length": context, "d_model": width, "n_layers": layers, "n_heads": heads}
    raw = {"tokenizer": {"vocab_size": vocab}, "model": model, "training": {"micro_batches": pieces}}
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(1)
    tokens, targets = (torch.randint(vocab, (batch, context), generator=generator) for _ in range(2))
    targets[0, :5] = PAD
    if pieces > 1:
        targets[-(batch // pieces) :] = PAD
    return Decoder(cfg.from_dict(raw | {"training": {"micro_batches": pieces, "batch_size": batch}})), tokens, targets


def per_piece(model: Decoder, tokens: torch.Tensor, targets: torch.Tensor, pieces: int) -> list[torch.Tensor]:
    """Each piece alone, as ``loop._backward`` computes it: its gradients flattened, then its weighted loss."""
    counted, leaves = int((targets != PAD).sum()), []
    for piece_tokens, piece_targets in zip(tokens.chunk(pieces), targets.chunk(pieces), strict=True):
        weighted = loss(model(piece_tokens), piece_targets, PAD) * (int((piece_targets != PAD).sum()) / counted)
        weighted.backward()
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]
        leaves.append(torch.cat([*(g.reshape(-1) for g in grads), weighted.detach().reshape(1)]))
        model.zero_grad(set_to_none=True)
    return leaves


def one_pass(model: Decoder, tokens: torch.Tensor, targets: torch.Tensor, pieces: int) -> list[torch.Tensor]:
    counted = int((targets != PAD).sum())
    plan = PiecePlan(list(model.parameters()), pieces).begin()
    losses = piecewise.piece_losses(model(tokens, plan=plan), targets, PAD, counted, pieces)
    losses.backward(torch.ones_like(losses))
    assert all(p.grad is None for p in model.parameters())  # every gradient went to the leaves
    return [leaf.clone() for leaf in plan.finish(losses)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("pieces", [1, 2, 4])
def test_one_pass_gives_every_piece_the_bits_it_gets_alone(shape: str, pieces: int, threads: None) -> None:
    for count in (1, 2):
        torch.set_num_threads(count)
        model, tokens, targets = decoder(shape, pieces)
        alone, together = per_piece(model, tokens, targets, pieces), one_pass(model, tokens, targets, pieces)
        names = [name for name, _ in model.named_parameters()]
        sizes = [p.numel() for p in model.parameters()]
        for piece, (a, b) in enumerate(zip(alone, together, strict=True)):
            differing = [
                n
                for n, x, y in zip(names, a.split([*sizes, 1]), b.split([*sizes, 1]), strict=False)
                if not torch.equal(x, y)
            ]
            assert not differing and torch.equal(a[-1], b[-1]), (shape, pieces, count, piece, differing)
        if pieces > 1:
            assert together[-1].abs().sum() == 0  # the piece of padding only: no gradient, loss 0


def state_for(raw: dict) -> tuple[TrainState, object]:
    config = cfg.from_dict(raw)
    blocks = synthetic_blocks(config)
    torch.manual_seed(0)
    return TrainState.fresh(config, torch.device("cpu"), len(blocks)), blocks


def tiny_raw(**model: object) -> dict:
    return {
        "tokenizer": {"vocab_size": 300},
        "model": {"context_length": 16, "d_model": 32, "n_layers": 2, "n_heads": 2, **model},
        "training": {"batch_size": 8, "micro_batches": 4, "compile": False, "steps": 20, "warmup_steps": 2},
    }


def train_four_steps(passes: str, monkeypatch: pytest.MonkeyPatch) -> tuple[list[float], dict, dict]:
    state, blocks = state_for(tiny_raw())
    assert loop.one_pass(state)
    if passes == "a pass per piece":
        monkeypatch.setattr(loop, "one_pass", lambda state: False)
    elif passes == "passes of two pieces":  # as when the pieces exceed what one pass takes
        monkeypatch.setattr(piecewise, "PASS_TOKENS", 2 * 2 * 16)
    losses = [float(loop.train_step(state, blocks, 1e-3)[0]) for _ in range(4)]
    if passes == "passes of two pieces":
        assert set(state.plans) == {2}
    monkeypatch.undo()
    return losses, state.model.state_dict(), state.optimizer.state_dict()["state"]


@pytest.mark.parametrize("passes", ["a pass per piece", "passes of two pieces"])
def test_steps_in_one_pass_train_the_same_weights_as(passes: str, monkeypatch: pytest.MonkeyPatch) -> None:
    (losses, weights, moments), (other_losses, other_weights, other_moments) = (
        train_four_steps("one pass", monkeypatch),
        train_four_steps(passes, monkeypatch),
    )
    assert losses == other_losses and len(set(losses)) == 4
    assert all(torch.equal(weights[k], other_weights[k]) for k in weights)
    for key, values in moments.items():
        assert all(torch.equal(values[name], other_moments[key][name]) for name in values), key


def test_a_pass_takes_what_fits_in_its_tokens_and_its_leaves() -> None:
    mib = 2**20
    assert piecewise.pass_size(4, 256, 4 * mib) == 4  # day1: the whole share
    assert piecewise.pass_size(16, 1024, 4 * mib) == 8  # 8,192 tokens
    assert piecewise.pass_size(32, 1024, 364 * mib) == 1  # day4's leaves: one piece a pass
    assert piecewise.pass_size(8, 16_384, 4 * mib) == 1  # a piece beyond the tokens still passes alone


@pytest.mark.parametrize(
    "model, training",
    [({"dropout": 0.1}, {}), ({}, {"compile": True}), ({}, {"precision": "bf16"})],
    ids=["dropout", "compiled", "bf16"],
)
def test_what_keeps_a_pass_per_piece(model: dict, training: dict) -> None:
    """Dropout draws per piece from the piece's own generator, and compiled graphs and autocast are not shown
    row-invariant: those keep a pass per piece (so runs already under way keep their bits)."""
    raw = tiny_raw(**model)
    raw["training"].update(training)
    config = cfg.from_dict(raw)
    state = TrainState.fresh(config, torch.device("cpu"), len(synthetic_blocks(config)))
    assert config.training.micro_batches == 4 and not loop.one_pass(state)
