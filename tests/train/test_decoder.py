from __future__ import annotations

import math

import torch

from octlm import config as cfg
from octlm.train import generate
from octlm.train.model.decoder import Decoder, loss

CONFIG = cfg.from_dict(
    {"tokenizer": {"vocab_size": 300}, "model": {"context_length": 16, "d_model": 32, "n_layers": 2, "n_heads": 2}}
)


def model() -> Decoder:
    torch.manual_seed(0)
    return Decoder(CONFIG)


def test_output_shape_and_initial_loss_near_ln_vocab() -> None:
    decoder = model()
    tokens = torch.randint(300, (4, 16), generator=torch.Generator().manual_seed(1))
    logits = decoder(tokens)
    assert logits.shape == (4, 16, 300)
    initial = loss(logits, torch.randint(300, (4, 16), generator=torch.Generator().manual_seed(2)), pad_id=-100)
    assert abs(initial.item() - math.log(300)) < 0.1


def test_tied_embeddings_and_no_biases() -> None:
    decoder = model()
    names = [name for name, _ in decoder.named_parameters()]
    assert not any(name.endswith("bias") for name in names)
    assert sum(1 for name in names if "embedding" in name) == 1  # the head reuses it


def test_causality_later_tokens_never_change_earlier_logits() -> None:
    decoder = model().eval()
    tokens = torch.randint(300, (1, 16), generator=torch.Generator().manual_seed(3))
    changed = tokens.clone()
    changed[0, 10:] = (changed[0, 10:] + 1) % 300
    with torch.no_grad():
        a, b = decoder(tokens), decoder(changed)
    assert torch.equal(a[0, :10], b[0, :10])
    assert not torch.equal(a[0, 10:], b[0, 10:])


def test_sampling_is_seeded_and_leaves_training_streams_alone() -> None:
    decoder = model()
    before = torch.get_rng_state()
    first = generate.sample(decoder, [1, 5, 7], 12, torch.device("cpu"), temperature=1.0, top_k=50, seed=42)
    second = generate.sample(decoder, [1, 5, 7], 12, torch.device("cpu"), temperature=1.0, top_k=50, seed=42)
    other = generate.sample(decoder, [1, 5, 7], 12, torch.device("cpu"), temperature=1.0, top_k=50, seed=43)
    greedy = generate.greedy(decoder, [1, 5, 7], 12, torch.device("cpu"))
    assert first == second and first != other
    assert len(greedy) == 15
    assert torch.equal(torch.get_rng_state(), before)


def test_rotary_scores_depend_only_on_relative_position() -> None:
    from octlm.train.model.decoder import apply_rotary, rotary_table

    table = rotary_table(16, 8, 10000.0)
    generator = torch.Generator().manual_seed(4)
    q, k = torch.randn(8, generator=generator), torch.randn(8, generator=generator)

    def score(i: int, j: int) -> float:
        qs = apply_rotary(q.expand(1, 16, 1, 8).clone(), table)[0, i, 0]
        ks = apply_rotary(k.expand(1, 16, 1, 8).clone(), table)[0, j, 0]
        return float(qs @ ks)

    assert abs(score(5, 3) - score(12, 10)) < 1e-5
    assert abs(score(5, 3) - score(5, 4)) > 1e-4
    rotated = apply_rotary(q.expand(1, 16, 1, 8).clone(), table)
    assert torch.allclose(rotated.norm(dim=-1), q.norm().expand(1, 16, 1), atol=1e-5)
