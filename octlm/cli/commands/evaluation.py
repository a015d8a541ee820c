"""``octlm eval``: a checkpoint's held-out evaluation, or on another corpus, with standard errors.

The use case (``tasks.evaluate``) imports torch, so it is imported inside the command."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from octlm.cli import render
from octlm.cli.common import IdArgument, JsonOption, handled, home_of
from octlm.core.reporting import counted

if TYPE_CHECKING:
    from octlm.core.records import EvalResult

EvalStepOption = Annotated[
    int | None,
    typer.Option(
        "--step", metavar="N", help="Evaluate the checkpoint at this step (default: the newest).", show_default=False
    ),
]
OnOption = Annotated[
    list[str] | None,
    typer.Option(
        "--on",
        metavar="SOURCE",
        help="Evaluate on these sources instead of the validation split: paths, globs, folders or builtins, as "
        "data.sources takes them (repeatable; several are also evaluated one by one).",
        show_default=False,
    ),
]
TokensOption = Annotated[
    int | None,
    typer.Option("--tokens", metavar="N", help="Read only this many target tokens (default: all).", show_default=False),
]


@handled
def eval_command(
    ctx: typer.Context,
    experiment_id: IdArgument,
    step: EvalStepOption = None,
    on: OnOption = None,
    tokens: TokensOption = None,
    as_json: JsonOption = False,
) -> None:
    """Evaluate a checkpoint on the held-out split (or --on another corpus), with standard errors; recorded."""
    from octlm.cli.live.progress import ConsoleReporter
    from octlm.tasks import evaluate  # imports torch

    reporter = ConsoleReporter()  # on stderr, with --json too: a large corpus takes a while to read and encode
    try:
        result = evaluate.run(home_of(ctx), experiment_id, step=step, on=on, tokens_budget=tokens, reporter=reporter)
    finally:
        reporter.close()
    if as_json:
        render.emit_json(result)
        return
    _print(result)


def _print(result: EvalResult) -> None:
    def shown(value: float | None, error: float | None, digits: int) -> str:
        return f"{value or 0.0:.{digits}f}" + (f" ± {error:.{digits}f}" if error is not None else "")

    rows = [
        ("eval loss", shown(result["eval_loss"], result["eval_loss_se"], 4)),
        ("perplexity", shown(result["perplexity"], result["perplexity_se"], 2)),
        ("bits per byte", shown(result["bits_per_byte"], result["bits_per_byte_se"], 4)),
        ("tokens", f"{result['eval_tokens'] or 0:,} in {counted(result['blocks'], 'block')}"),
    ]
    for name, figures in (result.get("eval_sources") or {}).items():
        rows.append(
            (
                f"  {name}",
                f"{shown(figures['eval_loss'], figures['eval_loss_se'], 4)} "
                f"({counted(figures['eval_tokens'], 'token')})",
            )
        )
    title = f"eval {result['id']} at step {result['step']} on {', '.join(result['on'])}"
    render.print_table(("figure", "value (± standard error)"), rows, title=title)
    render.say(f"{result['id']}: {result['summary']}")  # on a terminal wrapped at words
