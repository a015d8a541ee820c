"""``octlm prepare``: an experiment's data preparation alone, with what it cost, so a user sees the cost
before committing a night to a run (and the next ``train`` starts warm).

Does what a training command does before its first step, under the experiment's lock: reads the corpus,
loads the experiment's tokenizer (or takes it from the cache, or trains and saves it, as ``train`` would),
and encodes into the shared token file (or verifies and maps the one there). Reports each phase's
seconds and what it said, the tokens, the encoding speed, the wall time and this process's peak memory.
"""

from __future__ import annotations

import resource
import time
from typing import Any, NotRequired, TypedDict

from octlm.core.home import Home
from octlm.core.reporting import QuietReporter, Reporter
from octlm.data import tokens
from octlm.data.pipeline import prepare
from octlm.run.files import ExperimentFiles
from octlm.runtime import machine
from octlm.store import experiments


class Phase(TypedDict):
    """One phase of preparing the data (reading, training the tokenizer, encoding, ...), timed."""

    name: str
    detail: str  # what the phase said last ("30.9 MB, 9,148 documents")
    seconds: NotRequired[float]  # once it ended


class Prepared(TypedDict):
    """What ``octlm prepare --json`` writes: the data and tokenizer fingerprints, the tokens and blocks, each
    phase's time, and what became of the token file."""

    id: str
    data_hash: str
    tokenizer_hash: str
    tokens: dict[str, int]  # train, validation
    blocks: dict[str, int]  # train, evaluation
    phases: list[Phase]
    seconds: float
    token_file: str  # written | reused | not kept
    encoding_mb_per_second: float | None
    peak_rss_mb: float
    notes: list[str]


class PhaseTimer:
    """A reporter that times each named phase (and passes everything on to ``inner``)."""

    def __init__(self, inner: Reporter):
        self.inner, self.interactive = inner, inner.interactive
        self.phases: list[Phase] = []
        self.started: float | None = None  # the running phase's start on the performance clock

    def phase(self, name: str, detail: str = "") -> None:
        if not self.phases or self.phases[-1]["name"] != name:
            self.end()
            self.phases.append({"name": name, "detail": ""})
            self.started = time.perf_counter()
        if detail:
            self.phases[-1]["detail"] = detail
        self.inner.phase(name, detail)

    def end(self) -> list[Phase]:
        """The phases so far, the running one ended."""
        if self.phases and self.started is not None:
            self.phases[-1]["seconds"] = round(time.perf_counter() - self.started, 3)
            self.started = None
        return self.phases

    def __getattr__(self, name: str) -> Any:  # start, step, note, warn, ...: the inner reporter's
        return getattr(self.inner, name)


def run(home: Home, experiment_id: str, reporter: Reporter | None = None) -> Prepared:
    config = experiments.load(home, experiment_id)
    home.ensure_writable()
    files = ExperimentFiles(home, experiment_id)
    timer = PhaseTimer(reporter or QuietReporter())
    existing = set(home.cache.glob("tokens-*.bin")) if home.cache.is_dir() else set()
    started = time.perf_counter()
    with files.lock():
        device = machine.prepare_process(config)
        prepared = prepare(home, config, files.tokenizer, timer, first_step=False, apart=False, device=device)
    seconds = time.perf_counter() - started
    phases = timer.end()
    train, validation = len(prepared.train_blocks.stream), len(prepared.eval_blocks.stream)
    encoding = next((p for p in phases if p["name"] == "encoding"), None)
    text_mb = _megabytes(phases)
    written = home.cache / f"tokens-{prepared.data_hash}.bin" not in existing  # else verified and mapped
    written = written or tokens.rebuilt(prepared.notes, prepared.data_hash)  # there, but it did not verify
    return {
        "id": experiment_id,
        "data_hash": prepared.data_hash,
        "tokenizer_hash": prepared.tokenizer.fingerprint,
        "tokens": {"train": train, "validation": validation},
        "blocks": {"train": len(prepared.train_blocks), "evaluation": len(prepared.eval_blocks)},
        "phases": phases,
        "seconds": round(seconds, 3),
        "token_file": "not kept" if prepared.in_memory else "written" if written else "reused",
        "encoding_mb_per_second": round(text_mb / encoding["seconds"], 2) if written and encoding and text_mb else None,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "notes": list(prepared.notes),
    }


def _megabytes(phases: list[Phase]) -> float | None:
    """The corpus' size, as the reading phase told it ("30.9 MB, 9,148 documents")."""
    reading = next((p for p in phases if p["name"] == "reading corpus"), None)
    try:
        return float(reading["detail"].split(" MB")[0].replace(",", "")) if reading else None
    except ValueError:
        return None
