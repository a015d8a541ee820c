"""Checkpoints: the typed record of training progress, and its files.

``Record`` is the one place that knows a checkpoint's keys: ``to_payload`` and ``from_payload``
translate it to and from the dict that ``torch.save`` writes (format ``octlm-checkpoint-v2``,
loadable with ``torch.load(path, weights_only=True)``; ``octlm-checkpoint-v1`` files are still
read). Beside each ``step-NNNNNN.pt`` lies ``step-NNNNNN.sha256``, written before the checkpoint is
renamed into place, so a checkpoint's bytes are checked before anything in it is trusted.
"""

from __future__ import annotations

import hashlib
import io
import re
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, cast

import torch

from octlm.config import diff as config_diff
from octlm.config import flatten
from octlm.core import layout
from octlm.core.errors import Refused
from octlm.core.fsutil import atomic_write, read_regular
from octlm.core.records import Environment, RunRecord
from octlm.core.records.freeform import ConfigTree, StateDict
from octlm.core.reporting import counted
from octlm.data.fingerprints import Fingerprints

FORMAT = "octlm-checkpoint-v2"
FORMAT_V1 = "octlm-checkpoint-v1"  # RNG states at the top level; read, never written
MAX_BYTES = 16 << 30  # a checkpoint the registry has no size for: 16 GiB (day4's is about 1.1 GB)


class InvalidCheckpoint(Exception):
    """A checkpoint file that must not be loaded; the message says why."""


@dataclass
class Record:
    """Everything a checkpoint holds. ``rng`` has one entry per rank, in rank order: ``world_size`` entries."""

    experiment: str
    kind: str  # train | overfit | bench: which track wrote it
    step: int
    tokens: int
    elapsed_seconds: float
    model: StateDict
    optimizer: StateDict
    sampler: torch.Tensor
    scaler: StateDict
    rng: list[StateDict]
    fingerprints: Fingerprints
    config: ConfigTree
    environment: Environment = field(default_factory=lambda: Environment())  # read back: any of its keys may lack
    metrics: RunRecord = field(default_factory=lambda: RunRecord())  # the newest value of each run-file field
    log_accumulator: StateDict = field(default_factory=dict)  # loss sum and count since the last log
    world_size: int = 1  # the ranks that trained it (absent from files written before data parallelism: 1)
    receipt: StateDict = field(default_factory=dict)  # the data order so far: blocks read, rolling digest
    guard: dict[str, torch.Tensor] = field(default_factory=dict)  # the spike guard's window and skipped steps

    def to_payload(self) -> StateDict:
        """The dict ``torch.save`` writes: ``format``, then every field in declaration order."""
        payload = {"format": FORMAT, **{f.name: getattr(self, f.name) for f in fields(self)}}
        payload["fingerprints"] = asdict(self.fingerprints)  # config, data, tokenizer
        return payload

    @classmethod
    def from_payload(cls, payload: Any, name: str) -> Record:
        """Check and translate a loaded payload (v2 or v1); ``InvalidCheckpoint`` names what is wrong.
        Every value that is not a tensor or a state dict is checked for type, shape and size first."""
        if not isinstance(payload, dict) or payload.get("format") not in (FORMAT, FORMAT_V1):
            raise InvalidCheckpoint(f"{name}: not an {FORMAT} file")
        flat = _v2_keys(payload, name) if payload["format"] == FORMAT_V1 else payload
        for key, kinds in REQUIRED.items():
            if key not in flat:
                raise InvalidCheckpoint(f"{name}: missing the key {key!r}")
            if not isinstance(flat[key], kinds) or isinstance(flat[key], bool):
                raise InvalidCheckpoint(f"{name}: {key!r} has the wrong type ({type(flat[key]).__name__})")
        if not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in flat["model"].items()):
            raise InvalidCheckpoint(f"{name}: 'model' must map each parameter's name to a tensor")
        bounded = _Bounded(name)
        prints = bounded.mapping(flat["fingerprints"], "fingerprints")
        if not all(isinstance(prints.get(k), str) for k in ("config", "data", "tokenizer")):
            raise InvalidCheckpoint(f"{name}: 'fingerprints' must hold config, data and tokenizer hashes")
        return cls(
            experiment=bounded.scalar(_given(flat, "experiment", ""), "experiment", (str,)),
            kind=bounded.scalar(_given(flat, "kind", "train"), "kind", (str,)),
            step=bounded.scalar(flat["step"], "step", (int,)),
            tokens=bounded.scalar(flat["tokens"], "tokens", (int,)),
            elapsed_seconds=float(
                bounded.scalar(_given(flat, "elapsed_seconds", 0.0), "elapsed_seconds", (int, float))
            ),
            model=flat["model"],
            optimizer=flat["optimizer"],
            sampler=flat["sampler"],
            scaler=flat["scaler"],
            rng=flat["rng"],
            fingerprints=Fingerprints(prints["config"], prints["data"], prints["tokenizer"]),
            config=bounded.mapping(flat["config"], "config", sections=True),
            environment=cast(Environment, bounded.mapping(_given(flat, "environment", {}), "environment")),
            metrics=cast(RunRecord, bounded.mapping(_given(flat, "metrics", {}), "metrics")),
            log_accumulator=bounded.mapping(_given(flat, "log_accumulator", {}), "log_accumulator"),
            world_size=_world_size(flat, bounded, name),
            receipt=_receipt(_given(flat, "receipt", {}), bounded),
            guard=_guard(_given(flat, "guard", {}), name),
        )


def _given(flat: dict[str, Any], key: str, default: Any) -> Any:
    """``flat[key]``, or ``default`` where it is absent or empty (files written before it had it); a tensor as it is,
    for the check that refuses it (a tensor's truth is ambiguous: ``or`` would raise)."""
    value = flat.get(key)
    return value if isinstance(value, torch.Tensor) or value else default


def _receipt(value: Any, bounded: _Bounded) -> dict[str, Any]:
    """The data-order receipt (absent from files written before receipts: {})."""
    receipt = bounded.mapping(value, "receipt")
    if receipt and not (isinstance(receipt.get("blocks"), int) and isinstance(receipt.get("digest"), str)):
        raise bounded.fail("receipt", "must hold blocks (a count) and digest (text)")
    return receipt


def _guard(value: Any, name: str) -> dict[str, torch.Tensor]:
    """The spike guard's state: at most three one-dimensional tensors (absent before the guard: {})."""
    known = {"losses": torch.float64, "norms": torch.float64, "skipped": torch.int64}
    if not isinstance(value, dict) or set(value) - set(known):
        raise InvalidCheckpoint(f"{name}: 'guard' must map losses, norms and skipped to tensors")
    for key, tensor in value.items():
        if not isinstance(tensor, torch.Tensor) or tensor.dtype != known[key] or tensor.dim() != 1:
            raise InvalidCheckpoint(f"{name}: 'guard.{key}' must be a one-dimensional {known[key]} tensor")
    return value


def _world_size(flat: dict[str, Any], bounded: _Bounded, name: str) -> int:
    """The ranks that wrote a payload: one random state each."""
    world_size = bounded.scalar(flat.get("world_size", 1), "world_size", (int,))
    if world_size < 1 or len(flat["rng"]) != world_size:
        states = counted(len(flat["rng"]), "random state")
        raise InvalidCheckpoint(f"{name}: 'rng' holds {states} for {counted(world_size, 'rank')}")
    return int(world_size)


class _Bounded:
    """Checks a payload's plain values against their shapes and one size budget: ``metrics`` and
    ``environment`` map short text to numbers, None or short text; ``config`` maps sections of
    such values and short lists of them. Never walks deeper than the shape, so a structure of
    shared references (a "bomb" that expands to gigabytes) costs nothing to refuse."""

    ENTRIES, ITEMS, TEXT, BUDGET = 512, 4096, 65536, 4 << 20

    def __init__(self, name: str):
        self.name, self.left = name, self.BUDGET

    def fail(self, key: str, problem: str) -> InvalidCheckpoint:
        return InvalidCheckpoint(f"{self.name}: {key!r} {problem}")

    def scalar(self, value: Any, key: str, kinds: tuple[type, ...] = (str, int, float, type(None))) -> Any:
        fits = isinstance(value, kinds) and (len(value) <= self.TEXT if isinstance(value, str) else True)
        if not fits or isinstance(value, int) and not -(2**63) <= value < 2**64:
            raise self.fail(key, f"holds {type(value).__name__} where a number, a short text or nothing belongs")
        self.left -= 8 + (len(value) if isinstance(value, str) else 0)
        if self.left < 0:
            raise self.fail(key, f"makes the checkpoint's plain values larger than {self.BUDGET} bytes")
        return value

    def mapping(self, value: Any, key: str, sections: bool = False, lists: bool = False) -> dict[str, Any]:
        if not isinstance(value, dict) or len(value) > self.ENTRIES:
            raise self.fail(key, f"must be a mapping of at most {self.ENTRIES} entries")
        for inner, item in value.items():
            where = f"{key}.{self.scalar(inner, key, (str,))}"
            if sections and isinstance(item, dict):
                self.mapping(item, where, lists=True)
            elif lists and isinstance(item, list) and len(item) <= self.ITEMS:
                for element in item:
                    self.scalar(element, where)
            else:
                self.scalar(item, where)
        return value


REQUIRED: dict[str, type] = {"step": int, "tokens": int, "model": dict, "optimizer": dict, "sampler": torch.Tensor}
REQUIRED |= {"scaler": dict, "rng": list, "fingerprints": dict, "config": dict}
_V1_RNG = {"python_rng": "python", "torch_rng": "torch", "cuda_rng": "cuda", "mps_rng": "mps"}
_V1_REQUIRED: tuple[str, ...] = ("python_rng", "torch_rng", "sampler_rng", "tokens_processed", "config_hash")
_V1_REQUIRED += ("data_hash", "tokenizer_hash")


def _v2_keys(payload: dict[str, Any], name: str) -> dict[str, Any]:
    """A v1 payload under v2's names."""
    for key in _V1_REQUIRED:
        if key not in payload:
            raise InvalidCheckpoint(f"{name}: missing the key {key!r}")
    out = {k: v for k, v in payload.items() if k not in _V1_RNG}
    renames = {"sampler_rng": "sampler", "tokens_processed": "tokens"}
    for old, new in renames.items():
        if old in out:
            out[new] = out.pop(old)
    out["rng"] = [{new: payload[old] for old, new in _V1_RNG.items() if payload.get(old) is not None}]
    hashes = {"config": "config_hash", "data": "data_hash", "tokenizer": "tokenizer_hash"}
    out["fingerprints"] = {new: out.pop(old) for new, old in hashes.items()}
    if out.get("kind") == "resume":  # v1 named the command; v2 names the track (train or overfit)
        out["kind"] = "train"
    return out


# ---------------------------------------------------------------- files


def save(path: Path, record: Record) -> tuple[str, int]:
    """Write ``record`` durably and atomically; returns (sha256, size).

    Order: checksum file, then the checkpoint, each through temporary file, flush, fsync and
    rename, then an fsync of the folder. A crash at any point leaves the previous
    checkpoints intact and at worst an orphaned ``.sha256`` or ``.tmp`` file (cleaned up later).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    torch.save(record.to_payload(), buffer)
    payload = buffer.getvalue()
    digest = hashlib.sha256(payload).hexdigest()
    layout.write_sidecar(path, digest)
    atomic_write(path, payload, sync_dir=True)
    return digest, len(payload)


def size_cap(known_size: int | None) -> int:
    """The most bytes a checkpoint may have before it is read: near the registry's record when
    known (a stale row of a rewritten checkpoint differs by a few bytes), else a sane bound. A recorded size that is
    not a count of bytes (a damaged registry's text, real or blob; a negative number) is not known: the file is still
    checked against its checksums once read."""
    if not isinstance(known_size, int) or isinstance(known_size, bool) or known_size < 0:
        return MAX_BYTES
    return known_size + max(known_size // 8, 1 << 20)


def read(path: Path, known_sha256: str | None = None, known_size: int | None = None, *, exact: bool = False) -> Record:
    """Verify and load a checkpoint; raise ``InvalidCheckpoint`` for anything not to be trusted.

    The file must be a regular file, not a link, within ``size_cap``; it is read once, checked
    against its checksums (only ``known_sha256`` when ``exact``), and only then unpickled."""
    try:
        payload = read_regular(path, max_bytes=size_cap(known_size), follow=False)
    except OSError as error:
        raise InvalidCheckpoint(f"{path.name}: unreadable ({error.strerror})") from None
    digest = hashlib.sha256(payload).hexdigest()
    # Either record is written by octlm only for bytes it wrote; a crash can leave one of them
    # stale (between the checksum and checkpoint renames, or before the registry commit), so
    # the bytes must match at least one, and a file that matches none is never trusted.
    known = [d for d in ((None if exact else layout.read_sidecar(path)), known_sha256) if d is not None]
    if not known:
        raise InvalidCheckpoint(f"{path.name}: no checksum to verify it against ({layout.sidecar(path).name} missing)")
    if digest not in known:
        raise InvalidCheckpoint(f"{path.name}: checksum mismatch (truncated or corrupted)")
    try:
        state = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
    except Exception as error:  # weights_only refuses pickled code with UnpicklingError
        raise InvalidCheckpoint(f"{path.name}: refused by the safe loader ({_reason(error)})") from None
    return Record.from_payload(state, path.name)


def _reason(error: Exception) -> str:
    """The informative line of a torch.load error (it wraps the cause in advice and ANSI codes)."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in str(error).splitlines()]
    for line in lines:
        if "Unsupported" in line or "error:" in line.lower():
            return line[:200]
    return next((line[:200] for line in lines if line), type(error).__name__)


@dataclass(frozen=True)
class Loaded:
    path: Path
    record: Record
    skipped: tuple[str, ...]  # why newer checkpoints were passed over


def newest_valid(
    folder: Path, known: dict[str, str] | None = None, step: int | None = None, sizes: dict[str, int] | None = None
) -> Loaded | None:
    """The newest checkpoint that verifies (or the one at ``step``); invalid ones are skipped with a reason.

    ``known`` and ``sizes`` are the registry's checksums and sizes by absolute path."""
    known, sizes = known or {}, sizes or {}
    skipped: list[str] = []
    for found_step, path in reversed(layout.checkpoints(folder)):
        if step is not None and found_step != step:
            continue
        try:
            return Loaded(path, read(path, known.get(str(path)), sizes.get(str(path))), tuple(skipped))
        except InvalidCheckpoint as error:
            skipped.append(str(error))
            if step is not None:
                raise Refused(f"checkpoint at step {step} cannot be used: {error}") from None
    if step is not None:
        raise Refused(f"no checkpoint at step {step} in {folder}")
    if skipped:
        raise Refused(f"no valid checkpoint in {folder}: " + "; ".join(skipped))
    return None


# ---------------------------------------------------------------- refusals and warnings


def load_weights(model: torch.nn.Module, record: Record, path: Path) -> None:
    """``record``'s weights into ``model`` (built from its config), or Refused in one line where they do not fit it: a
    parameter missing or unknown, a tensor of another shape (a checkpoint edited and signed again)."""
    try:
        model.load_state_dict(record.model)
    except RuntimeError as error:
        detail = " ".join(str(error).split())[:200]
        raise Refused(
            f"checkpoint {path.name} cannot be used: its weights do not fit the model its config builds ({detail})"
        ) from None


def check_fingerprints(record: Record, *, config: Any, current: Fingerprints, path: Path) -> None:
    """Refuse a checkpoint made under another config, dataset or tokenizer, saying what changed."""
    saved, problems = record.fingerprints, []
    if saved.config != current.config:
        trajectory = config.trajectory_dict()
        old = {k: v for k, v in flatten(record.config).items() if k in trajectory}
        lines = config_diff(old, trajectory)
        problems.append("config changed: " + ("; ".join(lines) if lines else "fingerprint differs"))
    if saved.tokenizer != current.tokenizer:
        problems.append(f"tokenizer changed (tokenizer hash {saved.tokenizer[:12]} -> {current.tokenizer[:12]})")
    if saved.data != current.data:
        problems.append(
            f"dataset changed (data hash {saved.data[:12]} -> {current.data[:12]}): "
            "the corpus, its split or the tokenizer differs"
        )
    if problems:
        raise Refused(
            f"{path.name} was trained under a different setup and will not be continued: "
            + "; ".join(problems)
            + ". Restore the original, or start over with `octlm train --restart`"
        )
