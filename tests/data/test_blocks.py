"""Blocks of T+1 tokens: shifted targets, padded short streams, PAD left out of the loss, bits per byte by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import CORPUS

from octlm.data import blocks as data
from octlm.data.tokenizer import Tokenizer
from octlm.train.model.decoder import loss_sums

TEXTS = [CORPUS[i * 900 : (i + 1) * 900] for i in range(8)]


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.train(TEXTS, 300)


def test_blocks_are_shifted_and_short_streams_padded(tokenizer: Tokenizer) -> None:
    stream = np.arange(3, 3 + 2 * 9 + 4)  # two whole blocks of T+1 = 9 and a remainder
    blocks = data.make_blocks(stream, tokenizer, context_length=8)
    assert blocks.inputs.shape == (2, 8) == blocks.targets.shape == blocks.byte_lengths.shape
    assert torch.equal(blocks.inputs[0], torch.arange(3, 11))
    assert torch.equal(blocks.targets[0], torch.arange(4, 12))
    assert torch.equal(blocks.inputs[1], torch.arange(12, 20))
    expected = torch.tensor([[tokenizer.token_bytes(int(t)) for t in row] for row in blocks.targets])
    assert torch.equal(blocks.byte_lengths, expected)  # the seed's per-token loop, as the reference
    short = data.make_blocks(np.array([tokenizer.bos_id, 100, tokenizer.eos_id]), tokenizer, context_length=8)
    assert short.inputs.shape == (1, 8)
    assert short.targets[0, 2:].tolist() == [tokenizer.pad_id] * 6


def test_pad_targets_are_excluded_from_the_loss() -> None:
    pad = 0
    logits = torch.randn(1, 4, 5, generator=torch.Generator().manual_seed(0))
    targets = torch.tensor([[1, 2, pad, pad]])
    total, count = loss_sums(logits, targets, pad)
    expected = torch.nn.functional.cross_entropy(logits[0, :2], targets[0, :2], reduction="sum")
    assert count.item() == 2
    assert torch.allclose(total, expected)


def test_bits_per_byte_hand_computed() -> None:
    # 4 tokens each with loss ln 2 nats over 2 bytes: 4 ln2 nats / (ln2 * 2 bytes) = 2 bits per byte.
    assert data.bits_per_byte(4 * math.log(2), 2) == pytest.approx(2.0)
    # Uniform over 256 symbols costs 8 bits for each 1-byte token.
    assert data.bits_per_byte(10 * math.log(256), 10) == pytest.approx(8.0)
