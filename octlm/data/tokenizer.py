"""Tokenizers from Hugging Face ``tokenizers``: byte-level BPE trained once per experiment and then reused, or one
brought along (``tokenizer.file``: a ``tokenizer.json`` saved from GPT-2, SmolLM or one's own).

Training is deterministic, so a tokenizer trained on the same texts with the same vocabulary size is
byte-identical: a home keeps one in ``cache/tokenizer-<texts hash>-<vocab>.json`` (its fingerprint
beside it, checked on load) for the next experiment with the same data and vocabulary.

Special tokens: octlm's BPE has ``<|bos|>``, ``<|eos|>``, ``<|pad|>``. A brought tokenizer's are named in
``tokenizer.special_tokens`` or found by name (``config.CANDIDATES``: ``<s>``, ``</s>``, ``<|endoftext|>``, ...);
one with no pad token (GPT-2's) gets ``<|pad|>`` added after its vocabulary, its own ids unchanged, so that the
padding the loss leaves out is never a token of the text (a pad named as the eos token would make the loss leave
out every end of document). The saved ``tokenizer.json`` loads with plain ``tokenizers.Tokenizer.from_file``.

Fingerprint: the SHA-256 of the tokenizer's canonical JSON (what the library reads from the file, key order and
whitespace aside), and, where its special tokens are not octlm's three, of their names too.

Bytes: ``byte_lengths`` gives each token the bytes it decodes to, so that bits per byte counts the bytes of the
text. A byte-level token (GPT-2's alphabet) is as many bytes as characters, a byte-fallback token (``<0xE2>``)
one: each decoded alone would read U+FFFD, three. Any other token is what it adds to the decoding of a token before
it (a SentencePiece word's ``▁`` is the space it decodes to there, which the first word of a text drops). Where a
tokenizer adds bytes to every text it encodes (SentencePiece's space before the text), the eos token, one to each
document, takes them back, so that a document's tokens add up to the bytes of its decoded text; a tokenizer whose
tokens do not add up so is refused (``ADDED_PROBES``).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from octlm.config.section_classes import CANDIDATES
from octlm.core.errors import BadInput, OctlmError, Refused
from octlm.core.fsutil import atomic_write, read_regular
from octlm.core.reporting import counted

BOS, EOS, PAD = "<|bos|>", "<|eos|>", "<|pad|>"
SPECIALS = (BOS, EOS, PAD)
CACHE_FORMAT = "octlm-bpe-v1"  # a change to how octlm builds its BPE gets a new tag
MAX_BYTES = 1 << 30  # a tokenizer.json of a million tokens is about 60 MB
MAX_VOCABULARY = 2**20  # tokenizer.vocab_size's limit, which a brought file keeps to
BYTE_TOKEN = re.compile(r"<0x[0-9A-Fa-f]{2}>")  # a byte-fallback token: one byte
# Texts whose decoding a brought tokenizer's byte lengths must add up to, less the same few bytes for each.
ADDED_PROBES = ("Hello, world.", "a", "naïve café: 3 × 4 = 12 ✓", "x  y\tz\n")


TRAIN_BATCH = 1000  # documents handed to the BPE trainer at a time


class Tokenizer:
    def __init__(self, inner: HFTokenizer, names: tuple[str, str, str] = SPECIALS):
        """``inner`` with its bos, eos and pad tokens by name (octlm's own by default)."""
        self.inner, (self.bos, self.eos, self.pad) = inner, names
        self.pad_added = False  # a brought tokenizer's <|pad|>, added because the file has no pad token
        ids: list[int] = []
        for token in names:
            index = inner.token_to_id(token)
            if index is None:
                raise Refused(f"tokenizer.json lacks the special token {token}: it was not made by octlm")
            ids.append(index)
        self.bos_id, self.eos_id, self.pad_id = ids
        self.vocab_size = _size(inner)
        canonical = json.dumps(json.loads(inner.to_str()), sort_keys=True, separators=(",", ":"))
        digest = hashlib.sha256(canonical.encode())
        if names != SPECIALS:  # the ids each document is framed by
            digest.update(json.dumps(names).encode())
        self.fingerprint = digest.hexdigest()
        self.byte_lengths = byte_lengths(inner, self.vocab_size, set(ids))
        if names != SPECIALS:
            self._take_back_added()

    def _take_back_added(self) -> None:
        """The bytes the tokenizer adds to every text it encodes, taken back by the eos token (none for byte-level
        BPE); BadInput when its tokens do not add up to the decoded text by the same few bytes."""
        added = {self._added(text) for text in ADDED_PROBES}
        if len(added) > 1:
            raise BadInput(
                "the bytes its tokens decode to one by one do not add up to the text it decodes (its decoder joins "
                "them by context), so bits per byte could not be counted exactly; bring a BPE tokenizer"
            )
        if (extra := added.pop()) and self.eos_id in (self.bos_id, self.pad_id):
            raise BadInput(
                f"it adds {counted(extra, 'byte')} to each text it encodes, which the eos token takes back, and "
                f"{self.eos} is also its bos or pad: name another in tokenizer.special_tokens"
            )
        self.byte_lengths[self.eos_id] = -extra

    def _added(self, text: str) -> int:
        ids = self.inner.encode(text, add_special_tokens=False).ids
        return int(self.byte_lengths[ids].sum()) - len(self.decode(ids).encode("utf-8"))

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int, length: int | None = None) -> Tokenizer:
        """BPE trained from ``texts`` in batches, read as they come (``length``: how many). The library's own
        progress bars are off: they would draw over octlm's display, which says what the tokenizer is doing."""
        inner = HFTokenizer(models.BPE())
        inner.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        inner.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=list(SPECIALS),
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        remaining = iter(texts)
        batches = iter(lambda: list(itertools.islice(remaining, TRAIN_BATCH)), [])  # fewer crossings into Rust
        inner.train_from_iterator(batches, trainer, length=length)
        return cls(inner)

    @classmethod
    def load(cls, path: Path, named: Mapping[str, str] | None = None) -> Tokenizer:
        """Load a ``tokenizer.json`` octlm wrote (an experiment's, the cache's): a regular file (not a link) within
        ``MAX_BYTES``; its special tokens ``named`` (``TokenizerConfig.named``) or found by name."""

        def refuse(reason: str) -> Refused:
            return Refused(f"{path}: not a readable tokenizer ({reason}); delete it to retrain")

        inner = _read(path, refuse, follow=False)
        try:
            return cls(inner, roles(inner, named or {}))
        except LookupError as error:
            raise refuse(str(error.args[0])) from None

    @classmethod
    def bring(cls, path: Path, named: Mapping[str, str]) -> Tokenizer:
        """A tokenizer brought along (``tokenizer.file``): any ``tokenizers`` JSON file within ``MAX_BYTES`` and
        ``MAX_VOCABULARY``, its special tokens ``named`` or found by name, ``<|pad|>`` added when it has no pad
        token. Each fault is BadInput, one line naming the file and what to do."""

        def bad(reason: str) -> BadInput:
            return BadInput(f"tokenizer.file {path}: {reason}")

        if path.is_dir():
            inside = " (the tokenizer.json inside it)" if (path / "tokenizer.json").exists() else ""
            raise bad(f"is a folder: give a tokenizers JSON file{inside}")
        inner = _read(
            path,
            lambda reason: bad(
                f"not a tokenizers JSON file ({reason}); save one with tokenizers' "
                "Tokenizer.save or transformers' save_pretrained"
            ),
        )
        try:
            bos, eos, pad = roles(inner, named, add_pad=True)
        except LookupError as error:
            raise bad(str(error.args[0])) from None
        added = inner.token_to_id(pad) is None
        if added and _size(inner) != inner.get_vocab_size():  # the library would add it at an id already taken
            raise bad("it has no pad token and its ids leave gaps, so none can be added: name one in special_tokens")
        if added:
            inner.add_special_tokens([pad])
        if (size := _size(inner)) > MAX_VOCABULARY:
            raise bad(f"holds {size:,} token ids, more than tokenizer.vocab_size's limit of {MAX_VOCABULARY:,}")
        try:
            tokenizer = cls(inner, (bos, eos, pad))
        except OctlmError as error:
            raise bad(str(error)) from None
        tokenizer.pad_added = added
        return tokenizer

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, self.inner.to_str(pretty=True).encode("utf-8"))

    def token_bytes(self, token_id: int) -> int:
        return int(self.byte_lengths[token_id])

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        ids = self.inner.encode(text, add_special_tokens=False).ids
        return [self.bos_id, *ids, self.eos_id] if add_special_tokens else ids

    def encode_each(self, texts: list[str]) -> list[np.ndarray]:
        """``<|bos|> text <|eos|>`` of each document (int64)."""
        encodings = self.inner.encode_batch(texts, add_special_tokens=False) if texts else []
        bos, eos = np.array([self.bos_id]), np.array([self.eos_id])
        return [np.concatenate((bos, np.asarray(e.ids, dtype=np.int64), eos)).astype(np.int64) for e in encodings]

    def encode_documents(self, texts: list[str]) -> np.ndarray:
        """``<|bos|> text <|eos|>`` for every document, joined into one stream (int64)."""
        pieces = self.encode_each(texts)
        return np.concatenate(pieces).astype(np.int64) if pieces else np.zeros(0, dtype=np.int64)

    def decode(self, ids: Iterable[int]) -> str:
        """The text of ``ids``, special tokens left out (and bos, eos and pad even where the file does not mark them
        special)."""
        framing = {self.bos_id, self.eos_id, self.pad_id}
        return self.inner.decode([i for i in ids if i not in framing], skip_special_tokens=True)


def _size(inner: HFTokenizer) -> int:
    """The ids a model needs rows for: up to the highest (a file's ids may leave gaps)."""
    return max(inner.get_vocab_size(), max(inner.get_vocab().values(), default=-1) + 1)


def _read(path: Path, fail: Callable[[str], OctlmError], follow: bool = True) -> HFTokenizer:
    """The tokenizer the file at ``path`` holds; ``fail(reason)`` is raised for one that cannot be read."""
    try:
        text = read_regular(path, max_bytes=MAX_BYTES, follow=follow).decode("utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise fail(error.strerror or str(error) if isinstance(error, OSError) else "not UTF-8") from None
    try:
        return HFTokenizer.from_str(text)
    except Exception as error:  # tokenizers raises a bare Exception on a bad file
        raise fail(str(error).splitlines()[0] if str(error) else type(error).__name__) from None


def roles(inner: HFTokenizer, named: Mapping[str, str], add_pad: bool = False) -> tuple[str, str, str]:
    """The bos, eos and pad tokens of ``inner``: ``named`` ones, else the first of ``CANDIDATES`` it holds; with
    ``add_pad``, a pad it lacks is octlm's ``<|pad|>`` (to be added). LookupError saying what is missing."""
    found: list[str] = []
    for role, spellings in CANDIDATES.items():
        if role in named:
            if inner.token_to_id(named[role]) is None:
                raise LookupError(
                    f"tokenizer.special_tokens names {named[role]} as {role}, which it does not hold"
                    f" (its special tokens: {_specials(inner)})"
                )
            found.append(named[role])
            continue
        held = [token for token in spellings if inner.token_to_id(token) is not None]
        if not held and not (role == "pad" and add_pad):
            raise LookupError(
                f"no {role} token found by name (looked for {' '.join(spellings)}; its special tokens: "
                f"{_specials(inner)}): name one in tokenizer.special_tokens, as {{{role}: TOKEN}}"
            )
        found.append(held[0] if held else PAD)
    return found[0], found[1], found[2]


def _specials(inner: HFTokenizer) -> str:
    tokens = [t.content for _, t in sorted(inner.get_added_tokens_decoder().items()) if t.special]
    return " ".join(tokens[:12]) + (f" and {len(tokens) - 12} more" if len(tokens) > 12 else "") if tokens else "none"


def byte_lengths(inner: HFTokenizer, size: int, framing: set[int]) -> np.ndarray:
    """The bytes each of ``size`` token ids decodes to (module docstring); 0 for special tokens and ``framing``."""
    table = np.zeros(size, dtype=np.int64)
    vocab = inner.get_vocab()
    if "ByteLevel" in _decoders(inner):
        for token, index in vocab.items():
            table[index] = len(token) if set(token) <= BYTE_LEVEL else len(token.encode("utf-8"))
    else:
        anchor = inner.encode("a", add_special_tokens=False).ids[-1:] or [min(vocab.values())]
        alone = len(inner.decode(anchor).encode("utf-8"))
        for index in vocab.values():  # one by one: decode_batch's threads would make a fork (``apart``) warn
            table[index] = len(inner.decode([*anchor, index]).encode("utf-8")) - alone
        if "ByteFallback" in _decoders(inner):
            table[[index for token, index in vocab.items() if BYTE_TOKEN.fullmatch(token)]] = 1
    special = [index for index, token in inner.get_added_tokens_decoder().items() if token.special]
    table[[*special, *framing]] = 0
    return table


def _decoders(inner: HFTokenizer) -> set[str]:
    """The types of the decoder's steps (``Sequence``'s members too)."""
    decoder = json.loads(inner.to_str()).get("decoder") or {}
    return {step.get("type", "") for step in [decoder, *decoder.get("decoders", [])]}


BYTE_LEVEL = frozenset(pre_tokenizers.ByteLevel.alphabet())  # the 256 characters byte-level BPE spells bytes with


def texts_hash(texts: Iterable[str], vocab_size: int) -> str:
    """What a trained tokenizer depends on: its format, the vocabulary size and every training text."""
    digest = hashlib.sha256(f"{CACHE_FORMAT}:{vocab_size}:".encode())
    for text in texts:
        encoded = text.encode("utf-8", "surrogatepass")
        digest.update(len(encoded).to_bytes(8, "little"))
        digest.update(encoded)
    return digest.hexdigest()


def cache_path(cache_dir: Path, texts: Iterable[str], vocab_size: int) -> Path:
    return cache_dir / f"tokenizer-{texts_hash(texts, vocab_size)[:16]}-{vocab_size}.json"


def from_cache(path: Path) -> Tokenizer | None:
    """The cached tokenizer at ``path`` when it is there and matches the fingerprint stored beside it."""
    try:
        expected = read_regular(path.with_suffix(".fingerprint"), max_bytes=256, follow=False).decode().strip()
        tokenizer = Tokenizer.load(path)
    except (OSError, UnicodeDecodeError, Refused):
        return None
    return tokenizer if tokenizer.fingerprint == expected else None


def to_cache(tokenizer: Tokenizer, path: Path) -> None:
    """Keep a trained tokenizer for the next experiment; a cache that cannot be written is no error."""
    try:
        tokenizer.save(path)
        atomic_write(path.with_suffix(".fingerprint"), f"{tokenizer.fingerprint}\n".encode())
    except OSError:
        pass


def load_or_train(
    path: Path,
    texts: Iterable[str],
    vocab_size: int,
    cache: Path | None = None,
    length: int | None = None,
) -> tuple[Tokenizer, str]:
    """Reuse ``path`` if it exists (never retrain silently); else take the cached one at ``cache`` (a
    path from ``cache_path``) if it verifies; else train. Returns (tokenizer, "loaded" | "cached" | "trained").

    A trained or cached tokenizer is not saved here: the caller saves it (``Tokenizer.save``) only once
    the corpus has encoded with it, so a failure never leaves a tokenizer behind to be reused silently.

    A small corpus may yield fewer tokens than ``vocab_size``; the model's embedding keeps the
    configured size either way, so only a tokenizer larger than the config is refused.
    """
    if os.path.lexists(path):
        tokenizer = Tokenizer.load(path)
        if tokenizer.vocab_size > vocab_size:
            raise Refused(
                f"{path} has {tokenizer.vocab_size} tokens but tokenizer.vocab_size is {vocab_size}: "
                "it is never retrained silently; restore the config or start over with `octlm train --restart`"
            )
        return tokenizer, "loaded"
    cached = from_cache(cache) if cache is not None else None
    if cached is not None:
        return cached, "cached"
    return Tokenizer.train(texts, vocab_size, length), "trained"
