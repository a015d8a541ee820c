"""A tokenizer brought along (``tokenizer.file``): tokenizers JSON files made here with the ``tokenizers`` library (no
network), in the three shapes published tokenizers come in: byte-level BPE (GPT-2's, SmolLM's: one
``<|endoftext|>``, no pad), SentencePiece converted to BPE (Llama 2's: a ``▁`` before the text, byte-fallback tokens
``<0xE2>``, a decoder that strips the first space) and Metaspace BPE. Their special tokens are found by name, named,
or (pad) added; each token's bytes add up to the bytes of the decoded text; its fingerprint and the token file's name
follow the file; a bad file, token or size is one line naming the file; an experiment trains on one, resumes
exactly (``verify-resume``), refuses a resume under another file and exports a folder ``transformers`` loads."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from conftest import CORPUS, cli, json_out, tiny_config
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers

from octlm.data.tokenizer import BYTE_TOKEN, PAD, Tokenizer

TEXTS = [CORPUS[i * 900 : (i + 1) * 900] for i in range(8)]
HARD = [  # what a table of bytes per token gets wrong when it is not made from decoding
    "naïve café: 3 × 4 = 12 — ✓ 🦊 ünïcödé",
    " a leading space, then\ttabs\nand newlines  and double spaces",
    "Ελληνικά и кириллица, 日本語のテキスト",
    "x",
]


def byte_level(path: Path) -> Path:
    """GPT-2's shape: byte-level BPE with ``<|endoftext|>`` alone (bos and eos both, no pad)."""
    inner = HFTokenizer(models.BPE())
    inner.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    inner.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<|endoftext|>"], initial_alphabet=alphabet, show_progress=False
    )
    inner.train_from_iterator(TEXTS, trainer)
    inner.save(str(path))
    return path


def sentencepiece(path: Path) -> Path:
    """Llama 2's shape: ``▁`` prepended and for spaces, no pre-tokenizer, 256 byte-fallback tokens after ``<unk>``,
    ``<s>`` and ``</s>``, and a decoder that turns ``▁`` into spaces, bytes into text, and strips the first space."""
    prepend = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    trained = HFTokenizer(models.BPE(unk_token="<unk>"))
    trained.normalizer = prepend
    trained.train_from_iterator(TEXTS, trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"]))
    model = json.loads(trained.to_str())["model"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"<0x{byte:02X}>": 3 + byte for byte in range(256)}}
    for token, _ in sorted(model["vocab"].items(), key=lambda item: item[1]):
        vocab.setdefault(token, len(vocab))
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    inner = HFTokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    inner.normalizer = prepend
    steps = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    inner.decoder = decoders.Sequence(steps)
    inner.add_special_tokens(["<unk>", "<s>", "</s>"])
    inner.save(str(path))
    return path


def metaspace(path: Path) -> Path:
    """Metaspace BPE (newer SentencePiece conversions): ``<s>``, ``</s>`` and ``<pad>``, no byte fallback."""
    inner = HFTokenizer(models.BPE(unk_token="<unk>"))
    inner.pre_tokenizer = pre_tokenizers.Metaspace()
    inner.decoder = decoders.Metaspace()
    special = ["<unk>", "<s>", "</s>", "<pad>"]
    inner.train_from_iterator(TEXTS + HARD, trainers.BpeTrainer(vocab_size=400, special_tokens=special))
    inner.save(str(path))
    return path


SHAPES = {"byte-level": byte_level, "sentencepiece": sentencepiece, "metaspace": metaspace}


@pytest.mark.parametrize("shape", SHAPES)
def test_each_tokens_bytes_add_up_to_the_bytes_of_the_decoded_text(shape: str, tmp_path: Path) -> None:
    tokenizer = Tokenizer.bring(SHAPES[shape](tmp_path / "tokenizer.json"), {})
    for text in [*TEXTS, *HARD]:
        ids = tokenizer.encode(text)  # as octlm frames a document: bos text eos
        decoded = tokenizer.decode(ids)
        assert int(tokenizer.byte_lengths[ids].sum()) == len(decoded.encode("utf-8")), (shape, text)
        if shape != "metaspace":  # no unknown characters: the text comes back whole
            assert decoded == text
    if shape == "sentencepiece":  # the cases that need more than a token's spelling or its decoding alone
        tokens = [tokenizer.inner.id_to_token(i) for i in tokenizer.encode(HARD[0], add_special_tokens=False)]
        assert any(BYTE_TOKEN.fullmatch(token) for token in tokens)
        assert tokenizer.inner.decode([tokenizer.inner.token_to_id("<0xF0>")]) == "\ufffd"  # 3 bytes, not 1
        assert tokenizer.token_bytes(tokenizer.inner.token_to_id("<0xF0>")) == 1
        assert tokenizer.token_bytes(tokenizer.eos_id) == -1  # takes back the space put before each text


def test_special_tokens_are_found_by_name_named_or_added(tmp_path: Path) -> None:
    gpt2 = byte_level(tmp_path / "gpt2.json")
    plain = HFTokenizer.from_file(str(gpt2))
    found = Tokenizer.bring(gpt2, {})
    assert (found.bos, found.eos, found.pad, found.pad_added) == ("<|endoftext|>", "<|endoftext|>", PAD, True)
    assert found.pad_id == plain.get_vocab_size() == found.vocab_size - 1  # after the file's ids, which stay
    assert found.encode(TEXTS[0], add_special_tokens=False) == plain.encode(TEXTS[0]).ids
    assert found.token_bytes(found.pad_id) == found.token_bytes(found.bos_id) == 0
    named = Tokenizer.bring(gpt2, {"pad": "<|endoftext|>"})
    assert named.pad_id == named.eos_id and named.vocab_size == plain.get_vocab_size() and not named.pad_added
    assert named.fingerprint != found.fingerprint  # the roles are part of it
    llama = Tokenizer.bring(sentencepiece(tmp_path / "llama.json"), {})
    assert (llama.bos, llama.eos, llama.pad) == ("<s>", "</s>", PAD)
    metaspaced = Tokenizer.bring(metaspace(tmp_path / "meta.json"), {})
    assert (metaspaced.bos, metaspaced.eos, metaspaced.pad, metaspaced.pad_added) == ("<s>", "</s>", "<pad>", False)
    # the experiment's copy is the same tokenizer: the same fingerprint, roles and bytes when loaded again
    found.save(tmp_path / "copy.json")
    again = Tokenizer.load(tmp_path / "copy.json")
    assert (again.fingerprint, again.bos_id, again.eos_id, again.pad_id) == (
        found.fingerprint,
        found.bos_id,
        found.eos_id,
        found.pad_id,
    )
    assert np.array_equal(again.byte_lengths, found.byte_lengths)
    assert Tokenizer.load(tmp_path / "copy.json", {"bos": PAD}).fingerprint != found.fingerprint


def _home(tmp_path: Path, tokenizer: dict, shape: str = "byte-level") -> Path:
    """A home with the tests' corpus, a tokenizer file of ``shape`` at ``tok/tokenizer.json`` and EXP-001 training on
    it with the ``tokenizer`` section given (vocab_size left out unless given)."""
    from conftest import write_corpus

    home = write_corpus(tmp_path / "home")
    (home / "tok").mkdir()
    SHAPES[shape](home / "tok" / "tokenizer.json")
    config = {"id": "EXP-001", **tiny_config()}
    config["tokenizer"] = tokenizer
    (home / "experiments").mkdir()
    (home / "experiments" / "EXP-001.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return home


def _write_bad(home: Path, case: str) -> dict:
    """The tokenizer section of a bad case, with any file it names written under the home."""
    if case == "missing":
        return {"file": "tok/nothing.json"}
    if case == "folder":
        return {"file": "tok"}
    if case == "not json":
        (home / "tok" / "notes.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff")
        return {"file": "tok/notes.txt"}
    if case == "not a tokenizer":
        (home / "tok" / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
        return {"file": "tok/config.json"}
    if case == "no special tokens":
        inner = HFTokenizer(models.WordLevel({"<unk>": 0, "<mask>": 1, "a": 2}, unk_token="<unk>"))
        inner.add_special_tokens(["<unk>", "<mask>"])
        inner.save(str(home / "tok" / "words.json"))
        return {"file": "tok/words.json"}
    if case == "named token absent":
        return {"file": "tok/tokenizer.json", "special_tokens": {"pad": "<pad>"}}
    if case == "too many ids":
        inner = HFTokenizer(models.WordLevel({"<s>": 0, "</s>": 1, "<pad>": 2, "a": 2**20}, unk_token="<s>"))
        inner.save(str(home / "tok" / "huge.json"))
        return {"file": "tok/huge.json"}
    return {"file": "tok/tokenizer.json", "vocab_size": 1024}  # "another vocab_size"


BAD = {  # case: what the one line says
    "missing": r"tokenizer\.file .*tok/nothing\.json does not exist: give a tokenizers JSON file",
    "folder": r"tokenizer\.file .*tok: is a folder: give a tokenizers JSON file \(the tokenizer\.json inside it\)",
    "not json": r"tokenizer\.file .*notes\.txt: not a tokenizers JSON file \(not UTF-8\)",
    "not a tokenizer": r"tokenizer\.file .*config\.json: not a tokenizers JSON file \(.*\); save one with",
    "no special tokens": r"tokenizer\.file .*words\.json: no bos token found by name "
    r"\(looked for <\|bos\|> <s> .*<\|endoftext\|>; its special tokens: <unk> <mask>\): "
    r"name one in tokenizer\.special_tokens",
    "named token absent": r"tokenizer\.special_tokens names <pad> as pad, which it does not hold "
    r"\(its special tokens: <\|endoftext\|>\)",
    "too many ids": r"tokenizer\.file .*huge\.json: holds 1,048,577 token ids, "
    r"more than tokenizer\.vocab_size's limit of 1,048,576",
    "another vocab_size": r"tokenizer\.vocab_size is 1,024 but tokenizer\.file .*tokenizer\.json holds [0-9,]+ tokens: "
    r"leave vocab_size out",
}


@pytest.mark.parametrize("case", BAD)
def test_a_bad_tokenizer_file_is_one_line_naming_it_and_nothing_is_written(case: str, tmp_path: Path) -> None:
    home = _home(tmp_path, {"file": "tok/tokenizer.json"})
    section = _write_bad(home, case)
    config = yaml.safe_load((home / "experiments" / "EXP-001.yaml").read_text())
    (home / "experiments" / "EXP-001.yaml").write_text(yaml.safe_dump({**config, "tokenizer": section}))
    result = cli(home, "train", "EXP-001", "-q")
    assert result.exit_code == 2, result.stderr
    line = result.stderr.strip()
    assert "\n" not in line and "Traceback" not in line, line
    assert line.startswith("octlm: error: experiments/EXP-001.yaml: tokenizer.") and re.search(BAD[case], line), line
    assert not (home / "checkpoints" / "EXP-001").exists() and not list((home / "cache").glob("tokens-*"))


def test_the_token_file_follows_the_tokenizer_files_content(tmp_path: Path) -> None:
    """Two files, two token files; the same content under another name, the same token file (reused)."""
    home = _home(tmp_path, {"file": "tok/tokenizer.json"})
    config = yaml.safe_load((home / "experiments" / "EXP-001.yaml").read_text())
    metaspace(home / "tok" / "other.json")
    (home / "elsewhere").mkdir()
    (home / "elsewhere" / "same.json").write_bytes((home / "tok" / "tokenizer.json").read_bytes())
    for experiment, file in (("EXP-002", "tok/other.json"), ("EXP-003", str(home / "elsewhere" / "same.json"))):
        made = {**config, "id": experiment, "tokenizer": {"file": file}}
        (home / "experiments" / f"{experiment}.yaml").write_text(yaml.safe_dump(made))
    prepared = {}
    for experiment in ("EXP-001", "EXP-002", "EXP-003"):
        result = cli(home, "prepare", experiment, "--json")
        assert result.exit_code == 0, result.stderr
        prepared[experiment] = json_out(result)
    first, other, same = (prepared[e] for e in ("EXP-001", "EXP-002", "EXP-003"))
    assert first["tokenizer_hash"] != other["tokenizer_hash"] and first["data_hash"] != other["data_hash"]
    assert (same["tokenizer_hash"], same["data_hash"]) == (first["tokenizer_hash"], first["data_hash"])
    assert [p["token_file"] for p in (first, other, same)] == ["written", "written", "reused"]
    assert len(list((home / "cache").glob("tokens-*.bin"))) == 2
    assert any("pad <|pad|> (added: the file has none)" in note for note in first["notes"])


@pytest.mark.slow
def test_an_experiment_trains_on_a_brought_tokenizer_resumes_exactly_and_exports(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from octlm.train import checkpoint, generate

    home = _home(tmp_path, {"file": "tok/tokenizer.json"})
    model = {"context_length": 32, "n_heads": 4}
    config = yaml.safe_load((home / "experiments" / "EXP-001.yaml").read_text())
    config["model"].update(model)
    (home / "experiments" / "EXP-001.yaml").write_text(yaml.safe_dump(config))
    result = cli(home, "train", "EXP-001", "--until", "8")
    assert result.exit_code == 0, result.stderr
    record = checkpoint.read(home / "checkpoints" / "EXP-001" / "step-000008.pt")
    brought = Tokenizer.bring(home / "tok" / "tokenizer.json", {})
    plain = HFTokenizer.from_file(str(home / "tok" / "tokenizer.json"))
    assert record.config["tokenizer"]["vocab_size"] == brought.vocab_size == plain.get_vocab_size() + 1  # <|pad|>
    assert record.fingerprints.tokenizer == brought.fingerprint
    # a resume under another file is refused, and leaves the experiment as it was
    copy = (home / "checkpoints" / "EXP-001" / "tokenizer.json").read_bytes()
    original = (home / "tok" / "tokenizer.json").read_bytes()
    metaspace(home / "tok" / "tokenizer.json")
    refused = cli(home, "resume", "EXP-001")
    assert refused.exit_code == 3 and "is not the tokenizer EXP-001 trained with" in refused.stderr
    assert (home / "checkpoints" / "EXP-001" / "tokenizer.json").read_bytes() == copy
    (home / "tok" / "tokenizer.json").write_bytes(original)
    assert cli(home, "resume", "EXP-001").exit_code == 0
    verified = cli(home, "verify-resume", "EXP-001", "--split-at", "6", "--json")
    assert verified.exit_code == 0, verified.stderr
    assert json_out(verified)["verdict"] == "pass"
    out = tmp_path / "hf"
    assert cli(home, "export", "EXP-001", "-o", str(out)).exit_code == 0
    hf, hf_tokenizer = AutoModelForCausalLM.from_pretrained(out).eval(), AutoTokenizer.from_pretrained(out)
    tokenizer = Tokenizer.load(home / "checkpoints" / "EXP-001" / "tokenizer.json")
    ids = hf_tokenizer("The quick").input_ids
    assert ids == [tokenizer.bos_id, *tokenizer.encode("The quick", add_special_tokens=False)]
    assert (hf_tokenizer.bos_token, hf_tokenizer.eos_token, hf_tokenizer.pad_token) == ("<|endoftext|>",) * 2 + (PAD,)
    from octlm.config import from_dict
    from octlm.train.model.decoder import Decoder

    final = checkpoint.read(home / "checkpoints" / "EXP-001" / "step-000012.pt")
    ours = Decoder(from_dict(final.config))
    ours.load_state_dict(final.model)
    expected = generate.greedy(ours.eval(), ids, 16, torch.device("cpu"), stop_id=tokenizer.eos_id)
    assert hf.generate(torch.tensor([ids]), max_new_tokens=16, do_sample=False)[0].tolist() == expected


@pytest.mark.slow
def test_bench_builds_the_model_with_the_files_vocabulary(tmp_path: Path) -> None:
    """The config says 0 (the file's): ``bench`` reads the file for the number, as training does."""
    home = _home(tmp_path, {"file": "tok/tokenizer.json"})
    result = cli(home, "bench", "EXP-001", "--steps", "2", "--json")
    assert result.exit_code == 0, result.stderr
    from octlm.config import from_dict
    from octlm.train.model.decoder import Decoder

    vocabulary = Tokenizer.bring(home / "tok" / "tokenizer.json", {}).vocab_size
    config = from_dict({**tiny_config(), "tokenizer": {"file": "tok/tokenizer.json", "vocab_size": vocabulary}})
    assert json_out(result)["parameters"] == Decoder(config).parameter_count()
