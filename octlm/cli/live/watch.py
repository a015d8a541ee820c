"""``octlm watch``'s screen: a rich ``Live`` table of experiments and sweeps on a terminal, redrawn from a fresh
``views.sweeps.live`` snapshot every interval; off a terminal, one timestamped line per experiment or sweep each
time what it shows changes. Read-only and lock-free (the snapshot's promise). Ctrl-C ends it cleanly, exit 0."""

from __future__ import annotations

import sys
import time

from rich import box
from rich.console import Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from octlm.cli import formats, render
from octlm.core.errors import BadInput
from octlm.core.home import Home
from octlm.views.sweeps import live

IDLE = "nothing to watch: no experiment is training and no sweep has a trial queued or running"
WATCH_COLUMNS = ("ID", "status", "step", "train loss", "eval loss", "tokens/s", "ETA", "train loss, recent")


def watch(home: Home, targets: tuple[str, ...], interval: float, once: bool = False) -> int:
    """Show the snapshot until Ctrl-C (``once``: one snapshot, then exit); exit code 0."""
    first = live.snapshot(home, targets)
    if first.unknown:
        raise BadInput(f"unknown experiment or sweep {first.unknown[0]}: give an experiment ID or a sweep's name")
    try:
        if render.terminal() and not once:
            _live(home, targets, interval, first)
        else:
            _lines(home, targets, interval, first, once)
    except KeyboardInterrupt:
        return 0
    return 0


def _live(home: Home, targets: tuple[str, ...], interval: float, screen: live.Screen) -> None:
    console = render.out_console()
    with Live(draw(screen, console.width), console=console, auto_refresh=False, transient=False) as shown:
        while True:
            time.sleep(interval)
            shown.update(draw(live.snapshot(home, targets), console.width), refresh=True)


DROPPABLE = ("train loss, recent", "tokens/s", "train loss", "eval loss")  # first to go on a narrow terminal
NUMBERS = ("train loss", "eval loss", "tokens/s")


def draw(screen: live.Screen, width: int = 200, heading: tuple[str, str] = ("octlm watch", "Ctrl-C to leave")) -> Group:
    """The experiments' table and the sweeps' queues, in ``width`` columns: the sparkline and then the figures go
    first (said in the title), ID, status, step and ETA stay whole. ``heading``: who draws it, and how to leave
    (``work --ray`` draws it too: ``on_ray``)."""
    body = [
        [
            render.plain(cell)
            for cell in (
                *(e.id, e.status, f"{e.step or 0}/{e.steps or '?'}", _metric(e.train_loss), _metric(e.eval_loss)),
                *(formats.format_cell("count", e.tokens_per_second), e.eta or "-", e.spark),
            )
        ]
        for e in screen.experiments
    ]
    header = list(WATCH_COLUMNS)
    keep, dropped = render.fit(header, body, ["raw"] * len(header), width, DROPPABLE)
    title = f"{heading[0]}  {time.strftime('%H:%M:%S')}  ({heading[1]})"
    title += f"  {width} columns: left out {', '.join(dropped)}" if dropped else ""
    table = Table(title=Text(title), title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for index in keep:
        table.add_column(Text(header[index]), no_wrap=True, justify="right" if header[index] in NUMBERS else "left")
    for row in body:
        table.add_row(*(Text(row[index]) for index in keep))
    queues = Table(title=Text("sweeps"), title_justify="left")
    for name in ("sweep", "queued", "running", "done", "failed", "stopped", "where"):
        queues.add_column(Text(name), no_wrap=name != "where")
    for q in screen.sweeps:
        where = "; ".join(f"{trial} on {place}" for trial, place in q.running) or "-"
        queues.add_row(*(Text(render.plain(str(c))) for c in (q.name, *q.counts.values(), where)))
    return Group(table, queues) if screen.sweeps else Group(table)


def _metric(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def _lines(home: Home, targets: tuple[str, ...], interval: float, screen: live.Screen, once: bool) -> None:
    said: dict[str, str] = {}
    while True:
        lines = [*((e.id, e.line()) for e in screen.experiments), *((q.name, q.line()) for q in screen.sweeps)]
        for key, line in lines or [("", IDLE)]:
            if said.get(key) != line:
                sys.stdout.write(f"{time.strftime('%H:%M:%S')} {render.plain(line)}\n")
                said[key] = line
        sys.stdout.flush()
        if once:
            return
        time.sleep(interval)
        screen = live.snapshot(home, targets)
