"""The sweep samplers: one table (``SAMPLERS``), a row each, and everything that reads a sampler reads it there.

A row (``SweepSampler``) is the whole member: its name (``--sampler NAME``), its sentence in ``sweep new --help`` (the
option's choices and help are made from the table), the spec keys it reads beyond ``grid`` and ``seeds`` (an
option of those given to a sampler that does not read it is refused; ``sweep extend --random`` goes only to one
that reads ``random``), the ones it cannot go without, how many configurations a spec makes (counted, never made),
its first configurations, those it asks for as trials finish, and checks of its own. ``grid`` and ``random`` are
octlm's own and make every trial when the sweep is made (the grid's product, crossed with seeded draws of the
``--range`` keys); ``tpe`` asks Optuna (``asking``) for configurations as earlier trials finish.

Everyone goes through the table: ``sweep new`` (``chosen``, ``check``, ``size``, a row's ``first``), ``sweep
extend`` (``of``, ``size`` and the sweep's own row's ``first``), the workers' top-up (``of``, a row's ``more``) and
``sweep pack --shards`` (``of``); ``size`` is the one trial count and the one place its cap (``MAX_TRIALS``) is
checked; a sweep whose spec names no row is refused in one line naming the key (``of``), never read as another.
tests/tasks/test_sweep_samplers.py makes real trials with every row, reading what to expect from the row, and finds
any code that makes configurations outside this module. Adding a sampler: its function and its row here, a
paragraph in docs/guide/sweeps.md (``docs/modules.md``, "Families"). Torch-free; Optuna is imported only when a
``tpe`` sweep asks.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from octlm.core.errors import BadInput
from octlm.core.records.freeform import ConfigTree
from octlm.store.sweeps.records import Range, SweepSpec
from octlm.store.sweeps.specs import MAX_TRIALS, SPEC
from octlm.tasks.sweeps.planning import asking
from octlm.tasks.sweeps.planning.spec import SweepRequest

Finished = Sequence[tuple[ConfigTree, float | None]]  # a configuration that ended, with its metric (None: failed)
# The spec's keys that only a sampler reads, each with the option of ``sweep new`` that sets it.
OPTIONS = {"ranges": "--range", "random": "--random", "trials": "--trials", "parallel": "--parallel", "seed": "--seed"}


def _none(spec: SweepSpec) -> None:
    """A sampler with no check of its own."""


@dataclass(frozen=True)
class SweepSampler:
    """One member of the family, whole: see the module. ``needs``: each a tuple of keys of which one at least must
    be given; ``more`` None: every configuration is made at once (``asks`` False)."""

    name: str
    help: str
    reads: tuple[str, ...]  # keys of OPTIONS
    needs: tuple[tuple[str, ...], ...]
    configurations: Callable[[SweepSpec], int]
    first: Callable[[SweepSpec], list[ConfigTree]]
    more: Callable[[SweepSpec, Finished, int, Sequence[ConfigTree]], list[ConfigTree]] | None = None
    check: Callable[[SweepSpec], None] = _none

    @property
    def asks(self) -> bool:
        """Whether it makes configurations as earlier trials finish (the workers' top-up asks it for them)."""
        return self.more is not None


def cells(spec: SweepSpec) -> list[ConfigTree]:
    """The grid's product, keys in the order given (one empty configuration without a grid)."""
    grid = spec["grid"]
    return [dict(zip(grid, values, strict=True)) for values in itertools.product(*grid.values())] or [{}]


def _cells_count(spec: SweepSpec) -> int:
    return math.prod(len(values) for values in spec["grid"].values())


def drawn(spec: SweepSpec) -> list[ConfigTree]:
    """``random`` seeded draws of the ranges (the same spec draws the same values; more draws keep the first ones),
    each crossed with the grid's product."""
    generator = random.Random(spec["seed"])
    points = [{key: _draw(generator, bounds) for key, bounds in spec["ranges"].items()} for _ in range(spec["random"])]
    return [{**point, **cell} for point in points for cell in cells(spec)]


def _draw(generator: random.Random, spec: Range) -> Any:
    low, high = spec["low"], spec["high"]
    value = math.exp(generator.uniform(math.log(low), math.log(high))) if spec["log"] else generator.uniform(low, high)
    return round(value) if spec["int"] else float(f"{value:.4g}")


def _some_draws(spec: SweepSpec) -> None:
    if spec["random"] < 1:
        raise BadInput(f"--random {spec['random']}: give the number of draws (1 or more)")


def _asked_first(spec: SweepSpec) -> list[ConfigTree]:
    return asking.ask(spec, [], min(spec["parallel"], spec["trials"] or 0))


def _within_budget(spec: SweepSpec) -> None:
    """A sampler that asks: at least one configuration in all, and at most all of them asked for ahead."""
    trials, parallel = spec["trials"] or 0, spec["parallel"]
    if trials < 1 or parallel < 1:
        raise BadInput(f"--trials {trials} --parallel {parallel}: give 1 or more of each")
    if parallel > trials:
        raise BadInput(f"--parallel {parallel}: at most --trials ({trials}) asked ahead")


SAMPLERS: dict[str, SweepSampler] = {
    sampler.name: sampler
    for sampler in (
        SweepSampler("grid", "the product of the --grid values", (), (), _cells_count, cells),
        SweepSampler(
            "random",
            "--random N seeded draws of the --range keys (crossed with the --grid values)",
            ("ranges", "random", "seed"),
            (("random",), ("ranges",)),
            lambda spec: _cells_count(spec) * spec["random"],
            drawn,
            check=_some_draws,
        ),
        SweepSampler(
            "tpe",
            "Optuna's TPE, asked for --parallel K configurations ahead as trials finish, --trials N in all",
            ("ranges", "trials", "parallel", "seed"),
            (("trials",), ("ranges", "grid")),
            lambda spec: spec["trials"] or 0,
            _asked_first,
            asking.ask,
            _within_budget,
        ),
    )
}


def chosen(request: SweepRequest) -> str:
    """The name of the request's sampler (``--sampler``; else ``random`` with ``--random N``, else ``grid``), one of
    the table's."""
    name = request.sampler or ("random" if request.random else "grid")
    if name not in SAMPLERS:
        raise BadInput(f"--sampler {name}: choose one of {', '.join(SAMPLERS)}")
    return name


def of(spec: SweepSpec, source: str) -> SweepSampler:
    """A sweep's sampler, as its spec names it (``check_spec`` reads a spec without one as grid); a name not in the
    table is refused in one line naming ``source`` and the key (``PATH: sweep NAME: spec.sampler must be ...``), as
    ``store/sweeps/specs`` refuses the spec's other keys, never read as another sampler."""
    name = spec.get("sampler", "grid")
    if name not in SAMPLERS:
        raise BadInput(f"{source}: spec.sampler must be one of {', '.join(SAMPLERS)} (not {name!r})")
    return SAMPLERS[name]


def given(spec: SweepSpec, key: str) -> bool:
    """Whether the spec sets ``key`` (an option of ``sweep new``) to other than its default."""
    return spec.get(key) != SPEC[key][2]


def readers(key: str) -> str:
    """``random or tpe``: the samplers that read ``key``."""
    return " or ".join(name for name, sampler in SAMPLERS.items() if key in sampler.reads)


def check(spec: SweepSpec) -> SweepSampler:
    """The spec's sampler, once what ``sweep new`` was given fits it (BadInput naming the option): no option it
    does not read, one at least of each of its ``needs``, its own check."""
    sampler = SAMPLERS[spec["sampler"]]
    for key, option in OPTIONS.items():
        if given(spec, key) and key not in sampler.reads:
            raise BadInput(f"{option} goes with --sampler {readers(key)} (this sweep's sampler is {sampler.name})")
    for keys in sampler.needs:
        if not any(given(spec, key) for key in keys):
            wanted = " or ".join(OPTIONS.get(key, f"--{key}") for key in keys)
            raise BadInput(f"--sampler {sampler.name} needs {wanted}: {sampler.help}")
    sampler.check(spec)
    return sampler


def size(spec: SweepSpec) -> int:
    """The trials the spec makes, counted by its sampler, never by making them: its configurations times its seeds,
    at most ``MAX_TRIALS`` (else BadInput). The one count: ``sweep new`` and ``sweep extend`` both ask it."""
    count = SAMPLERS[spec["sampler"]].configurations(spec) * spec["seeds"]
    if count > MAX_TRIALS:
        raise BadInput(f"{count:,} trials: at most {MAX_TRIALS:,} in one sweep; fewer values, draws, --trials or seeds")
    return count
