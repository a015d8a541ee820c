"""The token file: both splits' token streams, encoded in batches of documents straight into
``cache/tokens-<dataset hash>.bin`` (uint16 while the vocabulary fits, else int32) with its record beside it,
verified and memory-mapped read-only when read, so training holds no copy of the corpus's tokens.

The record is signed: an HMAC-SHA256, under a key of this user's kept outside every home
(``$XDG_STATE_HOME/octlm/token-cache.key``, else ``~/.local/state/octlm/``; made on first use, mode 0600), of the
record with the token file's sha256 in it. Whoever can edit a home can rewrite a token file and its checksum, but
cannot sign it, so a poisoned cache never verifies and is rebuilt. A cache made by another user or box (a copied
home) is rebuilt once. Where there is no key to trust (the state folder cannot be written, a read-only HOME; the key
file is a link, another user's, or readable by others), no token file is read or written: the corpus is encoded in
memory, as a run without a cache folder is, and one warning names the key's problem and its fix (``signing_key``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import hmac
import json
import mmap
import os
import random
import secrets
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from octlm.core.errors import BadInput
from octlm.core.fsutil import atomic_write, atomic_writer, open_regular, read_regular
from octlm.data.corpus import Corpus, Document
from octlm.data.tokenizer import Tokenizer

CACHE_FORMAT = "octlm-tokens-v4"  # v4: the record is signed (``mac``)
KEY_BYTES = 32
ENCODE_BATCH = 256  # documents per batch handed to the tokenizer (it encodes a batch on its own threads)
SPOT_CHECKS = 6  # documents per split encoded again each time a cache is read, besides the first and last


@dataclass(frozen=True)
class Streams:
    """Both splits' token streams (views on the memory-mapped token file, or arrays when there is no
    cache), and why a cache was rebuilt when it was."""

    train: np.ndarray
    validation: np.ndarray
    note: str | None = None
    lengths: tuple[np.ndarray, np.ndarray] = (np.zeros(0, dtype="<i8"), np.zeros(0, dtype="<i8"))  # per document
    warning: str | None = None  # the cache could not be used at all (no key to trust): said once, as a warning


def token_streams(corpus: Corpus, tokenizer: Tokenizer, cache_dir: Path | None, key: str) -> Streams:
    """Encode both splits into ``cache_dir/tokens-<key>.bin``, or map that file when it verifies.

    The file holds the train stream then the validation stream (uint16 when the vocabulary fits, else
    int32), written in batches of documents as they are encoded, so no split is ever held in memory
    whole. Beside it, ``tokens-<key>.json`` records its format, its key, the tokenizer's hash, each
    document's token count and the file's sha256. On load the checksum is verified, every id must be
    below the tokenizer's size, and a few documents, drawn afresh each time, are encoded again and
    compared; a cache that does not verify is rebuilt, with a note saying why.
    """
    if cache_dir is None:
        return _in_memory(tokenizer, corpus.train, corpus.validation)
    signing = signing_key()
    if signing.secret is None:
        warning = f"the token cache is not used: {signing.problem}; the corpus is encoded again each run meanwhile"
        return dataclasses.replace(_in_memory(tokenizer, corpus.train, corpus.validation), warning=warning)
    path, note = cache_dir / f"tokens-{key}.bin", None
    splits = (corpus.train, corpus.validation)
    if os.path.lexists(path) or os.path.lexists(path.with_suffix(".json")):
        try:
            return _read_cache(path, tokenizer, key, splits)
        except Exception as error:  # ValueError, OSError, JSON errors...: a damaged cache is only a cache
            note = f"cache/{path.name} did not verify ({_short(error)}); rebuilt"
    try:
        (cache_dir / f"tokens-{key}.npz").unlink(missing_ok=True)  # written by octlm before the token file
        _write_cache(path, splits, tokenizer, key)
        return dataclasses.replace(_read_cache(path, tokenizer, key, splits, verified=True), note=note)
    except OSError:  # no room for the cache (or no folder for it): train from memory
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)
        return _in_memory(tokenizer, *splits, note=note)


def rebuilt(notes: list[str] | tuple[str, ...], key: str) -> bool:
    """Whether ``notes`` say the token file of ``key`` was there but did not verify, and was written again."""
    return any(note.startswith(f"cache/tokens-{key}.bin did not verify") for note in notes)


def _in_memory(
    tokenizer: Tokenizer, train: tuple[Document, ...], validation: tuple[Document, ...], note: str | None = None
) -> Streams:
    (train_stream, train_lengths), (stream, lengths) = _encode(tokenizer, train), _encode(tokenizer, validation)
    return Streams(train_stream, stream, note, (train_lengths, lengths))


def _encode(tokenizer: Tokenizer, documents: tuple[Document, ...]) -> tuple[np.ndarray, np.ndarray]:
    """A split's stream and each document's token count, in memory."""
    pieces = [piece for batch in _batches(tokenizer, documents) for piece in batch]
    stream = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)
    return stream, np.array([len(piece) for piece in pieces], dtype="<i8")


def _batches(tokenizer: Tokenizer, documents: tuple[Document, ...]) -> Iterator[list[np.ndarray]]:
    """``<|bos|> text <|eos|>`` of each document, ``ENCODE_BATCH`` documents at a time (the tokenizer's threads)."""
    for start in range(0, len(documents), ENCODE_BATCH):
        texts = [d.text for d in documents[start : start + ENCODE_BATCH]]
        try:
            yield tokenizer.encode_each(texts)
        except (TypeError, UnicodeError) as error:
            raise BadInput(
                f"data.sources: a document cannot be tokenized ({error}); texts must be valid Unicode"
            ) from None


def _short(error: Exception) -> str:
    return (str(error).splitlines() or [type(error).__name__])[0][:160]


def _dtype(tokenizer: Tokenizer) -> np.dtype:
    return np.dtype("<u2") if tokenizer.vocab_size <= 2**16 else np.dtype("<i4")


def _write_cache(path: Path, splits: tuple[tuple[Document, ...], ...], tokenizer: Tokenizer, key: str) -> None:
    """The token file, written as the documents encode, then its record (both atomically)."""
    dtype, digest, meta = _dtype(tokenizer), hashlib.sha256(), {}
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_writer(path) as handle:
        for name, documents in zip(("train", "validation"), splits, strict=True):
            lengths: list[int] = []
            for batch in _batches(tokenizer, documents):
                for piece in batch:
                    payload = piece.astype(dtype).tobytes()
                    handle.write(payload)
                    digest.update(payload)
                    lengths.append(len(piece))
            meta[f"{name}_lengths"] = lengths
    record = {"format": CACHE_FORMAT, "key": key, "tokenizer": tokenizer.fingerprint, "dtype": dtype.str, **meta}
    record["sha256"] = digest.hexdigest()
    secret = signing_key().secret
    signed = {**record, "mac": _mac(secret, record) if secret else None}
    atomic_write(path.with_suffix(".json"), json.dumps(signed).encode())


def _mac(secret: bytes, record: Mapping[str, object]) -> str:
    """The record's signature: HMAC-SHA256 of its canonical JSON (``mac`` left out), the tokens' sha256 in it."""
    text = json.dumps({k: v for k, v in record.items() if k != "mac"}, sort_keys=True, separators=(",", ":"))
    return hmac.new(secret, text.encode(), hashlib.sha256).hexdigest()


def key_path() -> Path:
    """Where this user's signing key lives: ``$XDG_STATE_HOME/octlm/token-cache.key``, else under ~/.local/state."""
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "octlm" / "token-cache.key"


@dataclass(frozen=True)
class SigningKey:
    """This user's key for signing token caches, or why there is none to trust (one line, with its fix)."""

    secret: bytes | None
    problem: str | None = None


def signing_key() -> SigningKey:
    """The key (see the module), made on first use; without one, ``problem`` says what is wrong and what to do."""
    path = key_path()
    try:
        if not os.path.lexists(path):
            _make_key(path)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as error:
        return SigningKey(None, _unusable(path, error))
    try:
        info = os.fstat(fd)
        problem = _not_private(path, info)
        data = os.read(fd, KEY_BYTES + 1) if problem is None else b""
    except OSError as error:
        return SigningKey(None, _unusable(path, error))
    finally:
        os.close(fd)
    if problem is None and len(data) != KEY_BYTES:
        problem = f"{path} holds {len(data)} bytes, not a key of {KEY_BYTES}: remove it (a new key is made)"
    return SigningKey(data if problem is None else None, problem)


def _make_key(path: Path) -> None:
    """A new random key at ``path``, mode 0600, never over one another process made first."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    with os.fdopen(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600), "wb") as out:
        out.write(secrets.token_bytes(KEY_BYTES))
        out.flush()
        os.fsync(out.fileno())
    try:
        with contextlib.suppress(FileExistsError):  # another process made it first: theirs is the key
            os.link(temporary, path)
    finally:
        temporary.unlink()


def _unusable(path: Path, error: OSError) -> str:
    if os.path.islink(path):
        return f"{path} is a symbolic link, and octlm keeps its key in a file of its own: remove the link"
    reason = error.strerror or str(error)
    return (
        f"its signing key {path} cannot be made or read ({reason}): set XDG_STATE_HOME to a folder of yours that "
        "can be written"
    )


def _not_private(path: Path, info: os.stat_result) -> str | None:
    """Why the key file cannot be trusted (None: a regular file of this user's that only they can read)."""
    if not stat.S_ISREG(info.st_mode):
        return f"{path} is not a regular file: remove it (a new key is made)"
    if info.st_uid != os.geteuid():
        return f"{path} belongs to another user: remove it (a new key is made)"
    if info.st_mode & 0o077:
        return (
            f"{path} can be read by others (mode {stat.S_IMODE(info.st_mode):04o}), so caches signed with it cannot "
            f"be trusted: `chmod 600 {path}`, or remove it for a new key"
        )
    return None


def _read_cache(
    path: Path, tokenizer: Tokenizer, key: str, splits: tuple[tuple[Document, ...], ...], verified: bool = False
) -> Streams:
    """Both streams as views on a read-only memory map of the token file, once it verifies against its record
    (the checksum only when not ``verified`` just now by writing it)."""
    documents = (*splits[0], *splits[1])
    record = json.loads(read_regular(path.with_suffix(".json"), max_bytes=64 * len(documents) + 4096, follow=False))
    dtype = _dtype(tokenizer)
    expected = {"format": CACHE_FORMAT, "key": key, "tokenizer": tokenizer.fingerprint, "dtype": dtype.str}
    if {name: record.get(name) for name in expected} != expected:
        raise ValueError("made with another tokenizer or corpus, or by another octlm")
    lengths = [np.asarray(record.get(f"{name}_lengths"), dtype="<i8") for name in ("train", "validation")]
    size = int(sum(part.sum() for part in lengths)) * dtype.itemsize
    tokens = _mapped(path, size, dtype)
    if not verified and _digest(tokens) != record.get("sha256"):
        raise ValueError("its tokens changed since they were written")
    cut = int(lengths[0].sum())
    streams = (tokens[:cut], tokens[cut:])
    for stream, counts, split in zip(streams, lengths, splits, strict=True):
        _check_stream(stream, counts, split, tokenizer)
    # last, so the checks above name what is wrong; whatever they miss, an unsigned record never passes
    if not verified:
        secret = signing_key().secret
        if secret is None:
            raise ValueError(f"no key to check its signature with ({key_path()})")
        if not hmac.compare_digest(str(record.get("mac")), _mac(secret, record)):
            raise ValueError("its record is not signed by this user's key (made elsewhere, or edited)")
    return Streams(*streams, lengths=(lengths[0], lengths[1]))


def _mapped(path: Path, size: int, dtype: np.dtype) -> np.ndarray:
    """The token file mapped read-only: a regular file (not a link) of exactly ``size`` bytes."""
    fd = open_regular(path, max_bytes=size, follow=False)
    try:
        if os.fstat(fd).st_size != size:
            raise ValueError(f"{os.fstat(fd).st_size} bytes where its record says {size}")
        if size == 0:
            return np.zeros(0, dtype=dtype)
        return np.frombuffer(mmap.mmap(fd, size, access=mmap.ACCESS_READ), dtype=dtype)
    finally:
        os.close(fd)


def _digest(tokens: np.ndarray) -> str:
    digest, view = hashlib.sha256(), tokens.view(np.uint8).data
    for start in range(0, len(view), 1 << 24):
        digest.update(view[start : start + (1 << 24)])
    return digest.hexdigest()


def _check_stream(stream: np.ndarray, lengths: np.ndarray, split: tuple[Document, ...], tokenizer: Tokenizer) -> None:
    """Shapes, id range and per-document counts, then a few documents drawn at random encoded again."""
    if stream.dtype.str not in ("<u2", "<i4") or lengths.dtype.str != "<i8" or stream.ndim != 1 or lengths.ndim != 1:
        raise ValueError(f"unexpected arrays ({stream.dtype}, {lengths.dtype})")
    if len(stream) and not 0 <= int(stream.min()) <= int(stream.max()) < tokenizer.vocab_size:
        raise ValueError(f"token ids outside the tokenizer's {tokenizer.vocab_size}")
    if len(lengths) != len(split) or int(lengths.min(initial=2)) < 2 or int(lengths.sum()) != len(stream):
        raise ValueError("its documents do not match the corpus")
    if not split:
        return
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    drawn = {0, len(split) - 1, *random.SystemRandom().sample(range(len(split)), min(SPOT_CHECKS, len(split)))}
    for index in sorted(drawn):
        if not np.array_equal(
            stream[offsets[index] : offsets[index + 1]], tokenizer.encode_each([split[index].text])[0]
        ):
            raise ValueError(f"its tokens of {split[index].name} are not what the tokenizer makes of it")
