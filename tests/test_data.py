from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import CORPUS

from octlm.core.errors import BadInput
from octlm.data import blocks as data
from octlm.data import corpus
from octlm.data.sampler import ReplacementSampler
from octlm.data.tokenizer import Tokenizer
from octlm.train.decoder import loss_sums

TEXTS = [CORPUS[i * 900 : (i + 1) * 900] for i in range(8)]


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.train(TEXTS, 300)


def test_tokenizer_round_trip_specials_and_determinism(tokenizer: Tokenizer, tmp_path: Path) -> None:
    text = "The quick brown fox — ünïcödé and emoji 🦊 survive.\n\tTabs too."
    ids = tokenizer.encode(text)
    assert ids[0] == tokenizer.bos_id and ids[-1] == tokenizer.eos_id
    assert tokenizer.decode(ids) == text
    assert len({tokenizer.bos_id, tokenizer.eos_id, tokenizer.pad_id}) == 3
    again = Tokenizer.train(TEXTS, 300)
    assert again.fingerprint == tokenizer.fingerprint
    tokenizer.save(tmp_path / "tokenizer.json")
    from tokenizers import Tokenizer as Plain

    plain = Plain.from_file(str(tmp_path / "tokenizer.json"))
    assert plain.encode(text, add_special_tokens=False).ids == ids[1:-1]
    assert Tokenizer.load(tmp_path / "tokenizer.json").fingerprint == tokenizer.fingerprint


def test_byte_lengths_agree_with_decoding(tokenizer: Tokenizer) -> None:
    text = "naïve café: 3 × 4 = 12 — ✓ 🦊"
    ids = tokenizer.encode(text)
    assert sum(tokenizer.token_bytes(i) for i in ids) == len(text.encode("utf-8"))
    assert tokenizer.token_bytes(tokenizer.bos_id) == 0 and tokenizer.token_bytes(tokenizer.pad_id) == 0


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


def test_sampler_state_round_trip() -> None:
    a = ReplacementSampler(100, 4, seed=1)
    a.next()
    saved = a.state_dict()
    expected = a.next()
    b = ReplacementSampler(100, 4, seed=1)
    b.load_state_dict(saved)
    assert torch.equal(b.next(), expected)
    assert not torch.equal(ReplacementSampler(100, 4, seed=2).next(), ReplacementSampler(100, 4, seed=1).next())


def test_ranks_and_micro_batches_slice_the_same_global_batch() -> None:
    """N ranks with 1 micro-batch and 1 rank with N micro-batches cut the global batch into the same parts."""
    from octlm.runtime.distributed import Ranks

    index = ReplacementSampler(1000, 12, seed=3).next()
    by_ranks = [part for rank in range(4) for part in Ranks(4, rank).slices(index, 1)]
    by_micro = Ranks().slices(index, 4)
    assert [p.tolist() for p in by_ranks] == [p.tolist() for p in by_micro]
    assert torch.equal(torch.cat(by_micro), index)
    two_by_two = [part for rank in range(2) for part in Ranks(2, rank).slices(index, 2)]
    assert [p.tolist() for p in two_by_two] == [p.tolist() for p in by_micro]


def test_split_is_deterministic_by_name(tmp_path: Path) -> None:
    docs = [corpus.Document(f"doc{i}", "text") for i in range(50)]
    first = corpus.split(docs, 0.2)
    second = corpus.split(list(reversed(docs)), 0.2)
    assert {d.name for d in first.validation} == {d.name for d in second.validation}
    assert first.validation and first.train


def test_corpus_sources_and_their_errors(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("hello")
    (tmp_path / "b.jsonl").write_text('{"text": "one"}\n{"text": "two"}\n')
    found = corpus.documents(("a.txt", "b.jsonl"), tmp_path)
    assert [d.text for d in found] == ["hello", "one", "two"]
    assert any(d.name.startswith("builtin:docs/") for d in corpus.documents(("builtin:docs",), tmp_path))
    (tmp_path / "bad.jsonl").write_text('{"text": "ok"}\n{"title": "no text"}\n')
    (tmp_path / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    (tmp_path / "empty.txt").write_text("")
    cases = [
        (("missing.txt",), "missing.txt does not exist"),
        (("bad.jsonl",), 'bad.jsonl:2: no "text" field'),
        (("latin1.txt",), "latin1.txt: not UTF-8"),
        (("empty.txt",), "the corpus is empty"),
        (("nothing-*.txt",), "matches no .txt"),
        (("builtin:web",), "unknown builtin"),
    ]
    for sources, fragment in cases:
        with pytest.raises(BadInput, match=None) as caught:
            corpus.documents(sources, tmp_path)
        assert fragment in str(caught.value), (sources, str(caught.value))


def test_builtin_docs_is_a_frozen_snapshot(tmp_path: Path) -> None:
    """builtin:docs never follows octlm's code: its bytes, names and content hash are pinned."""
    import hashlib

    payload = corpus.BUILTIN_DOCS_FILE.read_bytes()
    assert hashlib.sha256(payload).hexdigest() == corpus.BUILTIN_DOCS_SHA256
    assert corpus.BUILTIN_DOCS_SHA256 == "0df360b04e3854c1a3125905fd5dc60022639f55bc2e250287883772ba65cc04"
    found = corpus.load(("builtin:docs",), tmp_path, 0.1)
    assert found.content_hash == "9c716d3bc64b7355379899ecc74ede04c0ad85e0749864779d44578f14d935cd"
    # The seed's property: the first training block opens with the notebook's title.
    assert found.train[0].text.startswith("# Miniature modern LLM stack from first principles\n")


def test_a_damaged_builtin_snapshot_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from octlm.core.errors import Refused

    damaged = tmp_path / "docs-v1.jsonl"
    damaged.write_bytes(corpus.BUILTIN_DOCS_FILE.read_bytes().replace(b"Miniature", b"Miniscule", 1))
    monkeypatch.setattr(corpus, "BUILTIN_DOCS_FILE", damaged)
    with pytest.raises(Refused, match="does not match its checksum"):
        corpus.documents(("builtin:docs",), tmp_path)
