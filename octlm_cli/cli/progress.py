"""The training reporter: a rich progress bar on an interactive stderr, plain lines otherwise."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeRemainingColumn

from . import render


class ConsoleReporter:
    def __init__(self, quiet: bool = False):
        self.quiet = quiet
        self.console = render.err
        self.interactive = self.console.is_terminal and not quiet
        self.progress: Progress | None = None
        self.task = TaskID(0)

    def start(self, info: dict[str, Any]) -> None:
        self.note(
            f"{info['kind']} {info['id']}: steps {info['start']} -> {info['until']}, "
            f"{info['parameters']:,} parameters, {info['device']}, {info['precision']}"
        )
        if self.interactive:
            self.progress = Progress(
                TextColumn("[bold]{task.fields[id]}"),
                BarColumn(bar_width=12),
                TextColumn("{task.completed}/{task.total}"),
                TextColumn("{task.fields[metrics]}"),
                TimeRemainingColumn(),
                console=self.console,
                transient=False,
            )
            self.task = self.progress.add_task(
                "train", total=info["until"], completed=info["start"], id=info["id"], metrics=""
            )
            self.progress.start()

    def step(self, step: int) -> None:
        if self.progress is not None:
            self.progress.update(self.task, completed=step)

    def eval(self, record: dict[str, Any]) -> None:
        if self.progress is not None:  # fits 80 columns beside the bar and the ETA
            self.progress.update(
                self.task,
                metrics=(
                    f"loss {record['train_loss']:.3f} eval {record['eval_loss']:.3f} lr {record['lr']:.1e} "
                    f"{record['tokens_per_second'] / 1000:.1f}k tok/s"
                ),
            )
            return
        text = (
            f"loss {record['train_loss']:.4f} eval {record['eval_loss']:.4f} "
            f"lr {record['lr']:.2e} {record['tokens_per_second']:,.0f} tok/s"
        )
        if not self.quiet:
            render.info(
                f"step {record['step']}: {text} ppl {record['perplexity']:.2f} bpb {record['bits_per_byte']:.4f}"
            )

    def checkpoint(self, step: int, path: Path) -> None:
        if self.progress is None and not self.quiet:
            render.info(f"step {step}: checkpoint {path.name}")

    def note(self, message: str) -> None:
        if not self.quiet:
            (self.progress.console if self.progress else self.console).print(message, markup=False, highlight=False)

    def warn(self, message: str) -> None:
        render.warn(message)

    def finish(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
