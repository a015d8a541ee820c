"""``bench --nproc N``'s rounds, torch-free: what is timed (``variants``), in which order (``order``), how busy the box
was meanwhile (``runtime.load.Meter``), and what the medians say (``summarise``, ``load_warning``).

Every variant runs in processes of its own, at equal total threads: one process gets N x t threads where each of N
ranks gets t (``OMP_NUM_THREADS``, else cores / N). The variants alternate, forwards then backwards, round after
round, so that a box whose speed drifts moves them alike; each figure is the median over rounds of a run's median
step, beside its spread over the rounds (max - min over the median), the 1-minute load average and the cores that
other processes kept busy during its runs (``/proc/stat`` less this process and its children).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from octlm.core.reporting import counted
from octlm.runtime.load import Busy
from octlm.tasks.bench.records import RanksReport, RanksRow

BUSY_SHARE = 0.2  # other processes busy on more than this share of the cores: the ratios mean little


@dataclass(frozen=True)
class Variant:
    """One way of running the step: on ``ranks`` processes of ``threads`` threads each, per-rank slices
    (``pieces`` 0) or canonical pieces."""

    ranks: int
    pieces: int
    threads: int

    @property
    def mode(self) -> str:
        return f"{self.pieces} pieces" if self.pieces else "per rank"


def variants(world_size: int, pieces: int, threads: int) -> list[Variant]:
    """One process (the seed's step), N ranks per rank, then with ``pieces`` (0: none) one process and N ranks of
    canonical pieces; a process alone has the threads of all N ranks together."""
    found = [Variant(1, 0, world_size * threads), Variant(world_size, 0, threads)]
    if pieces:
        found += [Variant(1, pieces, world_size * threads), Variant(world_size, pieces, threads)]
    return found


def order(planned: list[Variant], rounds: int) -> list[Variant]:
    """Every variant once per round: in order in even rounds, reversed in odd ones (A B C D, D C B A, ...)."""
    return [variant for r in range(rounds) for variant in (planned if r % 2 == 0 else planned[::-1])]


def summarise(runs: list[tuple[Variant, RanksReport, Busy]], planned: list[Variant]) -> list[RanksRow]:
    """One row per precision and variant (in ``planned`` order): the medians over its rounds, the spread of its
    tokens/s, the load beside it, and its speed-up over the first variant (one process, the seed's step)."""
    rows: list[RanksRow] = []
    for precision in [row["precision"] for row in runs[0][1]["results"]]:
        base = None
        for variant in planned:
            row = _median_row(variant, precision, [(found, busy) for v, found, busy in runs if v == variant])
            base = base or row["tokens_per_second"]
            rows.append({**row, "speed_up": round(row["tokens_per_second"] / base, 3)})
    return rows


def _median_row(variant: Variant, precision: str, mine: list[tuple[RanksReport, Busy]]) -> RanksRow:
    found = [next(row for row in report["results"] if row["precision"] == precision) for report, _ in mine]
    rates = [row["tokens_per_second"] for row in found]
    median = statistics.median(rates)
    others = [busy.others for _, busy in mine if busy.others is not None]
    median_row: RanksRow = {
        **found[0],
        "ms_per_step": statistics.median(row["ms_per_step"] for row in found),
        "all_reduce_ms": statistics.median(row["all_reduce_ms"] for row in found),
        "all_reduce_longest_ms": statistics.median(row["all_reduce_longest_ms"] for row in found),
        "all_reduce_share": statistics.median(row["all_reduce_share"] for row in found),
        "tokens_per_second": round(median, 1),
        "mode": variant.mode,
        "pieces": variant.pieces,
        "rounds": len(found),
        "tokens_per_second_by_round": rates,
        "spread": round((max(rates) - min(rates)) / median, 4),
        "load_average": max(busy.load_average for _, busy in mine),
        "others_busy_cores": max(others) if others else None,
    }
    return median_row


def load_warning(rows: list[RanksRow], cores: int, simulated: float | None = None) -> str | None:
    """A warning when other processes kept more than ``BUSY_SHARE`` of the cores busy during a variant's runs
    (``simulated``: that figure instead of the measured one, for tests), else None."""
    measured = [busy for row in rows if (busy := row.get("others_busy_cores")) is not None]
    busiest = simulated if simulated is not None else max(measured, default=0.0)
    if busiest <= BUSY_SHARE * cores:
        return None
    load = max((row["load_average"] for row in rows), default=0.0)
    return (
        f"other processes kept {busiest:.2f} of the {counted(cores, 'core')} busy during the measurement (1-minute "
        f"load average up to {load:.2f}): the ratios mean little; run bench on an idle box"
    )
