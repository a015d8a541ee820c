"""The token file: encoded in batches straight to disk, memory-mapped for training, and the same tokens and
blocks as encoding the whole corpus at once (the path before the token file), for a small corpus and EXP-008."""

from __future__ import annotations

import hashlib
import shutil
import sysconfig
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import REPO, cli, json_out, octlm, write_experiment

from octlm.core.errors import BadInput
from octlm.core.home import Home
from octlm.data import blocks as data
from octlm.data import corpus, tokens
from octlm.data.pipeline import prepare
from octlm.data.tokenizer import Tokenizer
from octlm.store import experiments

# EXP-008's streams as octlm encoded them before the token file existed (one encode_batch of every document,
# int64 arrays), measured with the code of commit 2d13add: sha256 of train "<i8" bytes, "|", validation bytes.
EXP_008_DATA_HASH = "7fd45ce44511d4cf33045cf4531c6fb5f1acc8b0d7fef20dfa6cc5bf4657ff95"
EXP_008_STREAMS = "504878408628790a2e663d069226da4cee0ae1bd44e777aa81392216ea277037"
EXP_008_TOKENS = (66087, 6026)


def digest(train: np.ndarray, validation: np.ndarray) -> str:
    return hashlib.sha256(train.astype("<i8").tobytes() + b"|" + validation.astype("<i8").tobytes()).hexdigest()


def at_once(tokenizer: Tokenizer, documents: tuple[corpus.Document, ...]) -> np.ndarray:
    """The whole split in one call, as octlm encoded it before."""
    return tokenizer.encode_documents([d.text for d in documents])


def test_batched_token_file_equals_encoding_at_once(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    found = corpus.load(("corpus/*.txt",), home, 0.2)
    tokenizer = Tokenizer.train([d.text for d in found.train], 300)
    monkeypatch.setattr(tokens, "ENCODE_BATCH", 3)  # several batches per split, one of them short
    written = tokens.token_streams(found, tokenizer, home / "cache", "k" * 64)
    mapped = tokens.token_streams(found, tokenizer, home / "cache", "k" * 64)  # read back: mapped, verified
    assert written.note is None and mapped.note is None
    expected = (at_once(tokenizer, found.train), at_once(tokenizer, found.validation))
    for streams in (written, mapped):
        assert digest(streams.train, streams.validation) == digest(*expected)
        assert streams.train.dtype == np.dtype("<u2")  # 2 bytes a token on disk and in memory
    blocks, reference = (data.make_blocks(s, tokenizer, 16) for s in (mapped.train, expected[0]))
    assert len(blocks) == len(reference) > 3
    index = torch.tensor([3, 0, 3, len(blocks) - 1])
    for ours, theirs in zip(blocks.batch(index), reference.batch(index), strict=True):
        assert ours.dtype == torch.int64 and torch.equal(ours, theirs)
    assert torch.equal(blocks.select(slice(1, 3)).byte_lengths, reference.byte_lengths[1:3])
    assert (home / "cache" / f"tokens-{'k' * 64}.bin").stat().st_size == 2 * (len(expected[0]) + len(expected[1]))


def test_exp_008_streams_and_blocks_are_unchanged(tmp_path: Path) -> None:
    shutil.copytree(REPO / "experiments", tmp_path / "experiments")
    home = Home(tmp_path)
    config = experiments.load(home, "EXP-008")
    prepared = prepare(home, config, tmp_path / "tokenizer.json", first_step=False, device=torch.device("cpu"))
    assert prepared.data_hash == EXP_008_DATA_HASH
    found = corpus.load(config.data.sources, tmp_path, config.data.validation_fraction, config.data.max_bytes)
    streams = tokens.token_streams(found, prepared.tokenizer, home.cache, prepared.data_hash)
    assert (len(streams.train), len(streams.validation)) == EXP_008_TOKENS
    assert digest(streams.train, streams.validation) == EXP_008_STREAMS
    assert prepared.train_blocks.stream.dtype == np.dtype("<u2")  # a view on the mapped token file
    reference = data.make_blocks(at_once(prepared.tokenizer, found.train), prepared.tokenizer, 128)
    assert len(prepared.train_blocks) == len(reference) == 512
    assert torch.equal(prepared.train_blocks.inputs, reference.inputs)
    assert torch.equal(prepared.train_blocks.byte_lengths, reference.byte_lengths)


def test_a_token_file_that_cannot_be_written_trains_from_memory(home: Path) -> None:
    write_experiment(home, "EXP-002")
    found = corpus.load(("corpus/*.txt",), home, 0.2)
    tokenizer = Tokenizer.train([d.text for d in found.train], 300)
    blocked = home / "cache-file"
    blocked.write_text("a file where the cache folder would be")
    streams = tokens.token_streams(found, tokenizer, blocked, "k" * 64)
    assert digest(streams.train, streams.validation) == digest(
        at_once(tokenizer, found.train), at_once(tokenizer, found.validation)
    )


@pytest.mark.slow
def test_prepare_warms_the_token_file_and_the_tokenizer_for_train(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = json_out(cli(home, "prepare", "EXP-001", "--json"))
    assert first["token_file"] == "written" and first["tokens"]["train"] > 0 and first["peak_rss_mb"] > 0
    assert [p["name"] for p in first["phases"]] == ["reading corpus", "training tokenizer", "encoding"]
    assert (home / "checkpoints" / "EXP-001" / "tokenizer.json").is_file()
    again = json_out(cli(home, "prepare", "EXP-001", "--json"))
    assert again["token_file"] == "reused" and again["encoding_mb_per_second"] is None
    assert again["data_hash"] == first["data_hash"] and again["tokens"] == first["tokens"]

    def no_rewrite(*args: object) -> None:
        raise AssertionError("the token file was written again")

    monkeypatch.setattr(tokens, "_write_cache", no_rewrite)
    assert cli(home, "train", "EXP-001", "--until", "2", "-q").exit_code == 0  # starts warm: nothing encoded
    unknown = octlm(home, "prepare", "EXP-404")
    assert unknown.returncode == 2 and len(unknown.stderr.strip().splitlines()) == 1, unknown.stderr


@pytest.mark.slow
def test_documents_are_read_again_from_their_files_as_they_were(tmp_path: Path) -> None:
    """Files and .jsonl lines are read again at each use, to the same text; builtin:stdlib as read_text reads it."""
    (tmp_path / "a.txt").write_bytes(b"line one\r\nline two\n")
    lines = ['{"text": "first \\u2028 inside"}', "", '{"text": "second, \\u00e9t\\u00e9"}', '{"text": "third\\r\\n"}']
    (tmp_path / "b.jsonl").write_bytes("\r\n".join(lines).encode("utf-8"))
    found = corpus.documents(("a.txt", "b.jsonl"), tmp_path)
    assert [d.name for d in found] == ["a.txt", "b.jsonl:1", "b.jsonl:3", "b.jsonl:4"]
    assert [d.text for d in found] == ["line one\r\nline two\n", "first \u2028 inside", "second, été", "third\r\n"]
    assert [d.size for d in found] == [len(d.text.encode()) for d in found]
    (tmp_path / "b.jsonl").write_text(lines[0] + "\n")  # changed after the corpus was read
    with pytest.raises(BadInput, match="changed while octlm was using it"):
        _ = found[2].text
    stdlib = corpus.builtin_stdlib()
    root = Path(sysconfig.get_paths()["stdlib"])
    before = [
        corpus.Document(d.name, (root / d.name.removeprefix("builtin:stdlib/")).read_text("utf-8")) for d in stdlib
    ]
    assert corpus.Corpus(tuple(stdlib), ()).content_hash == corpus.Corpus(tuple(before), ()).content_hash
    assert [d.size for d in stdlib] == [d.size for d in before]
