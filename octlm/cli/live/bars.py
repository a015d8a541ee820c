"""What the live lines are made of (the training bar, verify-resume's segments): a time column that says whether it
is elapsed or left, and text fitted to the terminal's width whole words at a time, so that no line is cut by the
terminal and no word by octlm."""

from __future__ import annotations

from collections.abc import Sequence

from rich.progress import ProgressColumn, Task
from rich.text import Text

ELLIPSIS = "…"


def clock(seconds: float | None) -> str:
    """``0:01:05``; ``-:--:--`` when not known yet."""
    if seconds is None:
        return "-:--:--"
    whole = max(0, int(seconds))
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


class TimeLeft(ProgressColumn):
    """``0:00:05 left`` (rich's own column shows the bare figure: elapsed or remaining, it does not say)."""

    WIDTH = len("0:00:00 left")

    def render(self, task: Task) -> Text:
        return Text(f"{clock(task.time_remaining)} left", style="progress.remaining")


class TimeElapsed(ProgressColumn):
    """``0:00:16 elapsed``."""

    WIDTH = len("0:00:00 elapsed")

    def render(self, task: Task) -> Text:
        return Text(f"{clock(task.finished_time if task.finished else task.elapsed)} elapsed", style="progress.elapsed")


def words(text: str, room: int) -> str:
    """``text`` within ``room`` characters: whole, or cut after its last whole word that fits, with an ellipsis."""
    if len(text) <= room:
        return text
    if room <= 1:
        return ""
    prefix = text[: room - 1]
    if text[room - 1] != " ":  # the prefix ends inside a word: that word goes whole
        prefix = prefix.rsplit(" ", 1)[0] if " " in prefix else ""
    cut = prefix.rstrip(" ,;:")
    return cut + ELLIPSIS if cut else ""


def parts(items: Sequence[str], room: int) -> str:
    """As many of ``items`` (most important first) as fit in ``room`` characters, joined by spaces; the last ones go
    first, whole."""
    shown = list(items)
    while shown and len(" ".join(shown)) > room:
        shown.pop()
    return " ".join(shown)
