"""The sweep samplers: one protocol (``Sampler``), one table (``SAMPLERS``), one member each.

``grid`` and ``random`` are octlm's own and make every trial when the sweep is made (the grid's product, crossed
with seeded draws of the ``--range`` keys); ``tpe`` asks Optuna (``asking``) for configurations as earlier trials
finish. Everything that differs between samplers is here: which options each takes, how many trials they make
(counted, never made), the first configurations and the ones asked for later. ``sweep new``, ``extend``, the
workers' top-up and ``sweep pack --shards`` read the table. Adding a sampler: its member here (Optuna's others
would reuse ``Asked``), its test in tests/tasks/test_sweep_samplers.py (``docs/modules.md``, "Families").
Torch-free; Optuna is imported only when a ``tpe`` sweep asks.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from octlm.core.errors import BadInput
from octlm.core.records.freeform import ConfigTree
from octlm.store.sweeps.records import Range, SweepSpec
from octlm.tasks.sweeps.planning import asking
from octlm.tasks.sweeps.planning.spec import Request


class Sampler(Protocol):
    """What a sweep's sampler does; ``asks``: whether it makes trials as earlier ones finish."""

    @property
    def name(self) -> str: ...
    @property
    def asks(self) -> bool: ...
    @property
    def help(self) -> str: ...

    def check(self, request: Request, grid: dict[str, list[Any]], ranges: dict[str, Range]) -> None: ...
    def count(self, request: Request, grid: dict[str, list[Any]]) -> int: ...
    def first(self, spec: SweepSpec) -> list[ConfigTree]: ...
    def more(
        self,
        spec: SweepSpec,
        finished: Sequence[tuple[ConfigTree, float | None]],
        wanted: int,
        pending: Sequence[ConfigTree],
    ) -> list[ConfigTree]: ...


@dataclass(frozen=True)
class Drawn:
    """``grid`` or ``random``: every configuration made at once, the same for the same options."""

    name: str
    help: str
    asks: bool = False

    def check(self, request: Request, grid: dict[str, list[Any]], ranges: dict[str, Range]) -> None:
        if request.trials is not None or bool(ranges) != bool(request.random):
            raise BadInput("--trials goes with --sampler tpe; --range with --random N (or --sampler tpe), and back")

    def count(self, request: Request, grid: dict[str, list[Any]]) -> int:
        return math.prod(len(values) for values in grid.values()) * max(request.random, 1) * request.seeds

    def first(self, spec: SweepSpec) -> list[ConfigTree]:
        return configurations(spec["grid"], spec["ranges"], spec["random"], spec["seed"])

    def more(
        self,
        spec: SweepSpec,
        finished: Sequence[tuple[ConfigTree, float | None]],
        wanted: int,
        pending: Sequence[ConfigTree],
    ) -> list[ConfigTree]:
        return []  # everything was made at once


@dataclass(frozen=True)
class Asked:
    """An Optuna sampler through ask-and-tell: ``parallel`` configurations ahead, ``trials`` in all."""

    name: str
    help: str
    asks: bool = True

    def check(self, request: Request, grid: dict[str, list[Any]], ranges: dict[str, Range]) -> None:
        if not ranges and not grid or not request.trials or request.trials < 1 or request.parallel < 1:
            raise BadInput(
                f"--sampler {self.name} asks as trials finish: give --trials N, --parallel K and --range keys"
            )

    def count(self, request: Request, grid: dict[str, list[Any]]) -> int:
        if request.parallel > (request.trials or 0):
            raise BadInput(f"--parallel {request.parallel}: at most --trials ({request.trials}) asked ahead")
        return (request.trials or 0) * request.seeds

    def first(self, spec: SweepSpec) -> list[ConfigTree]:
        return asking.ask(spec, [], min(spec["parallel"], spec["trials"] or 0))

    def more(
        self,
        spec: SweepSpec,
        finished: Sequence[tuple[ConfigTree, float | None]],
        wanted: int,
        pending: Sequence[ConfigTree],
    ) -> list[ConfigTree]:
        return asking.ask(spec, finished, wanted, pending)


SAMPLERS: dict[str, Sampler] = {
    sampler.name: sampler
    for sampler in (
        Drawn("grid", "the product of the --grid values"),
        Drawn("random", "--random N seeded draws of the --range keys (crossed with the --grid values)"),
        Asked("tpe", "Optuna's TPE, asked for --parallel K configurations ahead as trials finish, --trials N in all"),
    )
}


def chosen(request: Request) -> Sampler:
    """The request's sampler (``--sampler``; else ``random`` with ``--random N``, else ``grid``)."""
    name = request.sampler or ("random" if request.random else "grid")
    if name not in SAMPLERS:
        raise BadInput(f"--sampler {name}: choose one of {', '.join(SAMPLERS)}")
    return SAMPLERS[name]


def of(spec: SweepSpec) -> Sampler:
    """A sweep's sampler, as its spec names it (a spec from before it was recorded: grid)."""
    return SAMPLERS.get(str(spec.get("sampler") or "grid"), SAMPLERS["grid"])


def configurations(grid: dict[str, list[Any]], ranges: dict[str, Range], draws: int, seed: int) -> list[ConfigTree]:
    """The grid's product (keys in the order given), crossed with ``draws`` seeded draws of the ranges."""
    product = [dict(zip(grid, values, strict=True)) for values in itertools.product(*grid.values())] or [{}]
    if not ranges:
        return product
    generator = random.Random(seed)
    points = [{key: _draw(generator, spec) for key, spec in ranges.items()} for _ in range(max(draws, 1))]
    return [{**point, **cell} for point in points for cell in product]


def _draw(generator: random.Random, spec: Range) -> Any:
    low, high = spec["low"], spec["high"]
    value = math.exp(generator.uniform(math.log(low), math.log(high))) if spec["log"] else generator.uniform(low, high)
    return round(value) if spec["int"] else float(f"{value:.4g}")
