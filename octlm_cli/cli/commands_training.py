"""Commands that train and use models: ``train``, ``resume``, ``verify-resume``, ``overfit``, ``sample``."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from . import render
from .app import JsonOption, QuietOption, UntilOption, app, handled, state


def _summary_line(result: dict[str, Any]) -> str:
    metrics = result.get("metrics") or {}
    line = f"{result['id']}: {result['status']} at step {result['end_step']}/{result['steps']}"
    if metrics.get("eval_loss") is not None:
        line += (f"; train loss {metrics['train_loss']:.4f}, eval loss {metrics['eval_loss']:.4f}, "
                 f"perplexity {metrics['perplexity']:.2f}, {metrics['bits_per_byte']:.4f} bits per byte")
    if result.get("tokens_per_second"):
        line += f"; {result['tokens_per_second']:,.0f} tokens/s"
    return line


def _finish(result: dict[str, Any], as_json: bool) -> None:
    if as_json:
        render.emit_json(result)
    else:
        render.info(_summary_line(result))


@app.command()
@handled
def train(
    experiment_id: Annotated[str, typer.Argument(metavar="ID", help="The experiment, e.g. EXP-008.")],
    restart: Annotated[bool, typer.Option("--restart", help="Discard existing checkpoints, tokenizer and run file, and start over.")] = False,
    until: UntilOption = None,
    as_json: JsonOption = False,
    quiet: QuietOption = False,
) -> None:
    """Train an experiment from step 0 (refuses existing progress unless --restart)."""
    from .. import runner
    from .progress import ConsoleReporter

    _finish(runner.train(state.home, experiment_id, restart=restart, until=until, reporter=ConsoleReporter(quiet)), as_json)


@app.command()
@handled
def resume(
    experiment_id: Annotated[str, typer.Argument(metavar="ID", help="The experiment, e.g. EXP-008.")],
    step: Annotated[Optional[int], typer.Option("--step", metavar="N", help="Resume from the checkpoint at this step (default: the newest valid one).", show_default=False)] = None,
    until: UntilOption = None,
    as_json: JsonOption = False,
    quiet: QuietOption = False,
) -> None:
    """Continue from the newest valid checkpoint (or start at 0); exits 0 at once when complete."""
    from .. import runner
    from .progress import ConsoleReporter

    _finish(runner.resume(state.home, experiment_id, step=step, until=until, reporter=ConsoleReporter(quiet)), as_json)


@app.command("verify-resume")
@handled
def verify_resume(
    experiment_id: Annotated[str, typer.Argument(metavar="ID", help="The experiment, e.g. EXP-008.")],
    split_at: Annotated[str, typer.Option("--split-at", metavar="N[,N2,...]", help="Step(s) where run (b) stops and resumes in a new process: N or N1,N2,...")],
    until: Annotated[Optional[int], typer.Option("--until", metavar="N", help="Final step M of both runs (default: training.steps).", show_default=False)] = None,
    keep_scratch: Annotated[bool, typer.Option("--keep-scratch", help="Keep the scratch folders for inspection.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Prove exact resume: one run 0->M against runs split at N in new processes, compared bit for bit."""
    from .. import verify

    result = verify.verify_resume(state.home, experiment_id, split_at, until, keep_scratch, progress=render.info)
    if as_json:
        render.emit_json(result)
    else:
        rows = []
        for check in result["checks"]:
            worst = max((d["max_abs_diff"] or 0.0 for d in check["differing"]), default=0.0)
            detail = ", ".join(d["name"] for d in check["differing"][:5])
            rows.append((check["check"], check["compared"], check["compared"] - len(check["differing"]),
                         "identical" if not check["differing"] else f"DIFFERS (max |diff| {worst:.3g}) {detail}"))
        title = f"verify-resume {experiment_id}: split at {','.join(map(str, result['split_at']))}, until {result['until']}"
        render.print_table(("check", "compared", "identical", "verdict"), rows, title=title)
        print(f"{experiment_id}: {'PASS' if result['identical'] else 'FAIL'}: {result['summary']}; "
              f"next-batch loss {result['next_loss']:.6f}; (a) {result['seconds']['a']:.1f} s, (b) {result['seconds']['b']:.1f} s")
    if not result["identical"]:
        raise typer.Exit(1)


@app.command()
@handled
def overfit(
    experiment_id: Annotated[str, typer.Argument(metavar="ID", help="The experiment, e.g. EXP-008.")],
    steps: Annotated[Optional[int], typer.Option("--steps", metavar="N", help="Training steps (default: training.steps).", show_default=False)] = None,
    max_loss: Annotated[float, typer.Option("--max-loss", metavar="X", help="Pass when the final loss on the block is at most this.")] = 1.0,
    as_json: JsonOption = False,
    quiet: QuietOption = False,
) -> None:
    """Memorise one block, then greedy-decode it back; exit 0 when the final loss <= --max-loss."""
    from .. import runner
    from .progress import ConsoleReporter

    result = runner.overfit(state.home, experiment_id, steps=steps, max_loss=max_loss, reporter=ConsoleReporter(quiet))
    if as_json:
        render.emit_json(result)
    else:
        render.print_table(
            ("final loss", "perplexity", "bits per byte", "decode matches", "verdict"),
            [(result["final_loss"], result["perplexity"], result["bits_per_byte"],
              f"{result['matched_tokens']}/{result['block_tokens']} tokens", result["verdict"].upper())],
            title=f"overfit {experiment_id}: one block, {result['steps']} steps")
        print("--- block ---")
        print(result["block_text"])
        print("--- greedy decode ---")
        print(result["decoded_text"])
        print(f"{experiment_id}: {result['verdict'].upper()}: {result['summary']}")
    if result["verdict"] != "pass":
        raise typer.Exit(1)


@app.command()
@handled
def sample(
    experiment_id: Annotated[str, typer.Argument(metavar="ID", help="The experiment, e.g. EXP-008.")],
    prompt: Annotated[str, typer.Option("--prompt", metavar="TEXT", help="Text to continue.")] = "",
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", metavar="N", help="Tokens to generate.")] = 200,
    temperature: Annotated[float, typer.Option("--temperature", metavar="T", help="Sampling temperature; 0 = greedy.")] = 1.0,
    top_k: Annotated[Optional[int], typer.Option("--top-k", metavar="K", help="Sample only from the k likeliest tokens.", show_default=False)] = None,
    seed: Annotated[int, typer.Option("--seed", metavar="S", help="Seed of the sampling generator (never the training streams).")] = 0,
    step: Annotated[Optional[int], typer.Option("--step", metavar="N", help="Use the checkpoint at this step (default: the newest).", show_default=False)] = None,
    as_json: JsonOption = False,
) -> None:
    """Generate text from an experiment's newest (or given) checkpoint; prints it on stdout."""
    from .. import runner

    result = runner.sample(state.home, experiment_id, prompt=prompt, max_new_tokens=max_new_tokens,
                           temperature=temperature, top_k=top_k, seed=seed, step=step)
    if as_json:
        render.emit_json(result)
    else:
        print(prompt + result["text"])
