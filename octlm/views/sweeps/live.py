"""What ``octlm watch`` draws, as plain data (torch-free): a snapshot of experiments and sweeps read from the run
files and the registry. Read-only and lock-free: the registry is opened ``mode=ro`` (WAL readers never block a
writer), run files are read as they stand (a line cut short ends the read), and no experiment's lock is taken,
so a watch beside running trainers and workers never slows or stops them.

Per experiment: its status (its newest run's, ``running`` while its process lives), step of steps, the latest
training and evaluation loss, tokens/s, the time left at that rate, and the training loss's recent history (a
sparkline). Per sweep: the queue's counts and where each running trial trains.
"""

from __future__ import annotations

from dataclasses import dataclass

from octlm.core.home import ID_PATTERN, Home
from octlm.store.registry import Registry, RunRow, SummaryRow
from octlm.store.runs import runfile
from octlm.store.sweeps.records import QueuedTrial
from octlm.views.estimate import duration
from octlm.views.side_by_side import final_values

BARS = "▁▂▃▄▅▆▇█"
HISTORY = 24  # records a sparkline shows


@dataclass(frozen=True)
class Experiment:
    id: str
    status: str
    step: int | None
    steps: int | None
    train_loss: float | None
    eval_loss: float | None
    tokens_per_second: float | None
    eta: str | None  # the time left at the latest rate, while running
    spark: str  # the training loss's recent history

    def line(self) -> str:
        """One line for a log: what changed is read off it."""
        parts = [f"{self.id} {self.status}", f"step {self.step or 0}/{self.steps or '?'}"]
        parts += [f"loss {self.train_loss:.4f}"] if self.train_loss is not None else []
        parts += [f"eval {self.eval_loss:.4f}"] if self.eval_loss is not None else []
        parts += [f"{self.tokens_per_second:,.0f} tokens/s"] if self.tokens_per_second else []
        parts += [f"ETA {self.eta}"] if self.eta else []
        return ", ".join(parts) + (f" {self.spark}" if self.spark else "")


@dataclass(frozen=True)
class Queue:
    name: str
    counts: dict[str, int]
    running: tuple[tuple[str, str], ...]  # (trial, where)

    def line(self) -> str:
        counts = ", ".join(f"{state} {n}" for state, n in self.counts.items())
        where = "; ".join(f"{trial} on {place}" for trial, place in self.running)
        return f"sweep {self.name}: {counts}" + (f"; {where}" if where else "")


@dataclass(frozen=True)
class Screen:
    experiments: tuple[Experiment, ...]
    sweeps: tuple[Queue, ...]
    unknown: tuple[str, ...] = ()  # names asked for that are neither an experiment nor a sweep


def snapshot(home: Home, targets: tuple[str, ...] = ()) -> Screen:
    """The experiments and sweeps ``targets`` name (IDs, sweep names); none: every running experiment and every
    sweep with trials queued or running."""
    with Registry(home.registry, create=False) as registry:
        summary = {row["id"]: row for row in registry.summary_rows()}
        running = {row["experiment_id"]: row for row in registry.running_runs()}
        sweeps = {row["name"]: (row, registry.trials(row["id"])) for row in registry.sweeps()}
    chosen_sweeps = [name for name in targets if name in sweeps] or ([] if targets else list(sweeps))
    queues = [_queue(name, sweeps[name][1]) for name in chosen_sweeps]
    if not targets:
        queues = [q for q in queues if q.counts["queued"] + q.counts["running"]]
    ids = [t for t in targets if ID_PATTERN.fullmatch(t) and (t in summary or home.config_path(t).exists())]
    ids += [trial for q in queues for trial, _ in q.running if trial not in ids]
    if not targets:
        ids += [i for i in running if running[i]["status"] == "running" and i not in ids]
    unknown = tuple(t for t in targets if t not in sweeps and t not in ids)
    return Screen(tuple(_experiment(home, i, summary.get(i), running.get(i)) for i in ids), tuple(queues), unknown)


def _queue(name: str, trials: list[QueuedTrial]) -> Queue:
    counts = {state: 0 for state in ("queued", "running", "done", "failed", "stopped")}
    for trial in trials:
        counts[trial["status"]] = counts.get(trial["status"], 0) + 1
    places = tuple(
        (t["experiment_id"], "a lost worker (to be taken over)" if t["lost"] else f"{t['host']} pid {t['pid']}")
        for t in trials
        if t["status"] == "running" and t["claim_id"] is not None
    )
    return Queue(name, counts, places)


def _experiment(home: Home, experiment_id: str, summary: SummaryRow | None, run: RunRow | None) -> Experiment:
    records = runfile.read(home.runs / f"{experiment_id}.jsonl")
    latest = final_values(records)
    status = str((run["status"] if run else None) or (summary and summary["status"]) or "new")
    steps, step = summary["steps"] if summary else None, latest.get("step")
    rate, eta = latest.get("tokens_per_second"), None
    if status == "running" and rate and step and steps and latest.get("tokens"):
        eta = duration((steps - step) * latest["tokens"] / step / rate)
    losses = [r["train_loss"] for r in records if isinstance(r.get("train_loss"), (int, float))][-HISTORY:]
    return Experiment(
        experiment_id, status, step, steps, latest.get("train_loss"), latest.get("eval_loss"), rate, eta, spark(losses)
    )


def spark(values: list[float]) -> str:
    """A sparkline: each value as one of eight bars between the lowest and the highest."""
    if len(values) < 2:
        return ""
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    return "".join(BARS[min(len(BARS) - 1, int((v - low) / span * len(BARS)))] for v in values)
