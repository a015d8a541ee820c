"""Checkpoint files: durable atomic writes, checksums, validated loads and explained refusals.

Format ``octlm-checkpoint-v1``: a dict of named top-level keys, loadable with
``torch.load(path, weights_only=True)``. Beside each ``step-NNNNNN.pt`` lies
``step-NNNNNN.sha256``, written before the checkpoint is renamed into place, so a
checkpoint's bytes are checked before anything in it is trusted.
"""

from __future__ import annotations

import hashlib
import io
import platform
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from . import __version__
from .config import diff as config_diff
from .errors import Refused
from .fsutil import atomic_write

FORMAT = "octlm-checkpoint-v1"
NAME = re.compile(r"step-(\d{6,})\.pt")


def path_for(folder: Path, step: int) -> Path:
    return folder / f"step-{step:06d}.pt"


def sidecar(path: Path) -> Path:
    return path.with_suffix(".sha256")


def environment(device: torch.device, precision: str, optimizer_impl: str) -> dict[str, Any]:
    return {
        "octlm": __version__,
        "torch": str(torch.__version__),
        "python": platform.python_version(),
        "platform": f"{platform.system()}-{platform.machine()}",
        "device": device.type,
        "dtype": precision,
        "threads": torch.get_num_threads(),
        "optimizer": optimizer_impl,
    }


def save(path: Path, state: dict[str, Any]) -> tuple[str, int]:
    """Write ``state`` durably and atomically; returns (sha256, size).

    Order: checksum file, then the checkpoint, each through temporary file, flush, fsync and
    rename, then an fsync of the folder. A crash at any point leaves the previous
    checkpoints intact and at worst an orphaned ``.sha256`` or ``.tmp`` file (cleaned up later).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    payload = buffer.getvalue()
    digest = hashlib.sha256(payload).hexdigest()
    atomic_write(sidecar(path), f"{digest}  {path.name}\n".encode())
    atomic_write(path, payload, sync_dir=True)
    return digest, len(payload)


class InvalidCheckpoint(Exception):
    """A checkpoint file that must not be loaded; the message says why."""


def expected_digest(path: Path) -> str | None:
    try:
        return sidecar(path).read_text().split()[0]
    except (OSError, IndexError):
        return None


def read(path: Path, known_sha256: str | None = None) -> dict[str, Any]:
    """Verify and load a checkpoint; raise ``InvalidCheckpoint`` for anything not to be trusted."""
    try:
        payload = path.read_bytes()
    except OSError as error:
        raise InvalidCheckpoint(f"{path.name}: unreadable ({error.strerror})") from None
    digest = hashlib.sha256(payload).hexdigest()
    # Either record is written by octlm only for bytes it wrote; a crash can leave one of them
    # stale (between the checksum and checkpoint renames, or before the registry commit), so
    # the bytes must match at least one, and a file that matches none is never trusted.
    known = [d for d in (expected_digest(path), known_sha256) if d is not None]
    if not known:
        raise InvalidCheckpoint(f"{path.name}: no checksum to verify it against ({sidecar(path).name} missing)")
    if digest not in known:
        raise InvalidCheckpoint(f"{path.name}: checksum mismatch (truncated or corrupted)")
    try:
        state = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
    except Exception as error:  # weights_only refuses pickled code with UnpicklingError
        raise InvalidCheckpoint(f"{path.name}: refused by the safe loader ({_reason(error)})") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise InvalidCheckpoint(f"{path.name}: not an {FORMAT} file")
    return state


def _reason(error: Exception) -> str:
    """The informative line of a torch.load error (it wraps the cause in advice and ANSI codes)."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in str(error).splitlines()]
    for line in lines:
        if "Unsupported" in line or "error:" in line.lower():
            return line[:200]
    return next((line[:200] for line in lines if line), type(error).__name__)


def remove(path: Path) -> None:
    """A checkpoint and its checksum file."""
    path.unlink(missing_ok=True)
    sidecar(path).unlink(missing_ok=True)


def listing(folder: Path) -> list[tuple[int, Path]]:
    if not folder.is_dir():
        return []
    found = []
    for path in folder.iterdir():
        match = NAME.fullmatch(path.name)
        if match:
            found.append((int(match.group(1)), path))
    return sorted(found)


def leftovers(folder: Path) -> list[Path]:
    """Temporary files and orphaned checksum files left by a crash."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.name.endswith(".tmp")
                  or (p.suffix == ".sha256" and not p.with_suffix(".pt").exists()))


def clean_leftovers(folder: Path) -> list[Path]:
    found = leftovers(folder)
    for path in found:
        path.unlink(missing_ok=True)
    return found


@dataclass(frozen=True)
class Loaded:
    path: Path
    state: dict[str, Any]
    skipped: tuple[str, ...]  # why newer checkpoints were passed over


def newest_valid(folder: Path, known: dict[str, str] | None = None, step: int | None = None) -> Loaded | None:
    """The newest checkpoint that verifies (or the one at ``step``); invalid ones are skipped with a reason."""
    known = known or {}
    skipped = []
    for found_step, path in reversed(listing(folder)):
        if step is not None and found_step != step:
            continue
        try:
            return Loaded(path, read(path, known.get(str(path))), tuple(skipped))
        except InvalidCheckpoint as error:
            skipped.append(str(error))
            if step is not None:
                raise Refused(f"checkpoint at step {step} cannot be used: {error}") from None
    if step is not None:
        raise Refused(f"no checkpoint at step {step} in {folder}")
    if skipped:
        raise Refused(f"no valid checkpoint in {folder}: " + "; ".join(skipped))
    return None


def check_fingerprints(state: dict[str, Any], *, config: Any, data_hash: str, tokenizer_hash: str,
                       path: Path) -> None:
    """Refuse a checkpoint made under another config, dataset or tokenizer, saying what changed."""
    problems = []
    if state["config_hash"] != config.fingerprint:
        saved = state.get("config") or {}
        from .config import flatten

        current = config.trajectory_dict()
        lines = [line for line in config_diff(
            {k: v for k, v in flatten(saved).items() if k in current}, current)]
        problems.append("config changed: " + ("; ".join(lines) if lines else "fingerprint differs"))
    if state["tokenizer_hash"] != tokenizer_hash:
        problems.append(f"tokenizer changed (tokenizer hash {state['tokenizer_hash'][:12]} -> {tokenizer_hash[:12]})")
    if state["data_hash"] != data_hash:
        problems.append(
            f"dataset changed (data hash {state['data_hash'][:12]} -> {data_hash[:12]}): the corpus, its split or the tokenizer differs"
        )
    if problems:
        raise Refused(
            f"{path.name} was trained under a different setup and will not be continued: "
            + "; ".join(problems)
            + ". Restore the original, or start over with `octlm train --restart`"
        )


def environment_warnings(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    keys = ("torch", "python", "platform", "device", "dtype", "threads", "optimizer")
    changed = [f"{key} {saved.get(key)} -> {current.get(key)}" for key in keys if saved.get(key) != current.get(key)]
    if not changed:
        return []
    return [
        "resuming in a different environment (" + ", ".join(changed) + "): the run continues, but "
        "bit-exact resume is promised only on one torch release, platform, device and thread count"
    ]
