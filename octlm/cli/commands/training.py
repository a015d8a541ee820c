"""Commands that train and use models: ``train``, ``resume``, ``verify-resume``, ``verify-run``, ``overfit``,
``sample``.

Each imports ``runner``, ``verify``, ``audit`` or ``sampling`` inside its body: they import torch, which
``octlm --help``, ``show`` and ``new`` must never load.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from octlm.cli import render
from octlm.cli.common import IdArgument, JsonOption, QuietOption, UntilOption, handled, home_of
from octlm.cli.live.progress import ConsoleReporter
from octlm.cli.live.segments import REPEATED, SegmentsView
from octlm.cli.live.streams import hangup_safe, output_may_vanish
from octlm.cli.profile import pin_experiment
from octlm.cli.ranks import EndpointOption, NnodesOption, NodeRankOption, NprocOption, start_ranks
from octlm.config import Config
from octlm.core.errors import Interrupted, Refused
from octlm.core.records import RunTotals
from octlm.core.reporting import counted
from octlm.runtime import launch

if TYPE_CHECKING:
    from octlm.core.home import Home
    from octlm.run.overfit import Overfitted  # imports torch
    from octlm.run.summary import RunSummary  # loads tokenizers and numpy (data.fingerprints)
    from octlm.tasks.proof.audit import Audited  # imports torch
    from octlm.tasks.proof.verify import Resumed  # imports torch

    Proof = TypeVar("Proof", Resumed, Audited)

RestartOption = Annotated[
    bool, typer.Option("--restart", help="Discard existing checkpoints, tokenizer and run file, and start over.")
]
YesOption = Annotated[
    bool, typer.Option("--yes", "-y", help="With --restart: discard without asking, even on a terminal.")
]
ResumeStepOption = Annotated[
    int | None,
    typer.Option(
        "--step",
        metavar="N",
        help="Resume from the checkpoint at this step (default: the newest valid one).",
        show_default=False,
    ),
]
SplitAtOption = Annotated[
    str,
    typer.Option(
        "--split-at",
        metavar="N[,N2,...]",
        help="Step(s) where run (b) stops and resumes in a new process: N or N1,N2,...",
    ),
]
FinalStepOption = Annotated[
    int | None,
    typer.Option(
        "--until", metavar="N", help="Final step M of both runs (default: training.steps).", show_default=False
    ),
]
ReshardOption = Annotated[
    bool,
    typer.Option(
        "--reshard",
        help="Continue a checkpoint trained on another number of ranks (model, optimizer and sampler kept, "
        "random streams reseeded; not bit-exact from there).",
    ),
]
KeepScratchOption = Annotated[
    bool,
    typer.Option(
        "--keep-scratch",
        help="Keep the scratch homes of (a) and (b) for inspection; where is said on stderr (and as scratch in "
        "--json).",
    ),
]
ReplayNprocOption = Annotated[
    int | None,
    typer.Option(
        "--nproc",
        metavar="N",
        help="Ranks of the replay (default: the run's newest checkpoint's); another world size only with "
        "training.micro_batches, which it must divide.",
        show_default=False,
    ),
]
CheckpointAtOption = Annotated[
    list[int] | None,
    typer.Option(
        "--checkpoint-at",
        metavar="N",
        help="Also write a checkpoint at step N (repeatable), besides every checkpoint.interval steps and the last; "
        "kept as checkpoint.keep says (verify-run's replay writes the audited run's steps with it).",
        show_default=False,
    ),
]
SizesOption = Annotated[
    str,
    typer.Option(
        "--nproc",
        metavar="N[,N2,...]",
        help="Ranks of every segment; a list such as 4,2 runs (a) on the first size and each segment of (b) on the "
        "next, cycling (needs training.micro_batches, which every size must divide).",
    ),
]
StepsOption = Annotated[
    int | None,
    typer.Option("--steps", metavar="N", help="Training steps (default: training.steps).", show_default=False),
]
MaxLossOption = Annotated[
    float,
    typer.Option("--max-loss", metavar="X", help="Pass when the final loss on the block is at most this."),
]
PromptOption = Annotated[str, typer.Option("--prompt", metavar="TEXT", help="Text to continue.")]
MaxNewTokensOption = Annotated[int, typer.Option("--max-new-tokens", metavar="N", help="Tokens to generate.")]
TemperatureOption = Annotated[
    float, typer.Option("--temperature", metavar="T", help="Sampling temperature; 0 = greedy.")
]
TopKOption = Annotated[
    int | None,
    typer.Option("--top-k", metavar="K", help="Sample only from the k likeliest tokens.", show_default=False),
]
SeedOption = Annotated[
    int,
    typer.Option("--seed", metavar="S", help="Seed of the sampling generator (never the training streams)."),
]
SampleStepOption = Annotated[
    int | None,
    typer.Option(
        "--step", metavar="N", help="Use the checkpoint at this step (default: the newest).", show_default=False
    ),
]


def _summary_line(result: RunSummary) -> str:
    """The run's headline, written by the one function that writes ``show ID``'s first line (``views.details``)."""
    from octlm.views import details

    totals: RunTotals = {
        "seconds": result.seconds,
        "tokens_per_second": result.tokens_per_second,
        "eval_seconds": result.eval_seconds,
        "eval_split": result.eval_split,
    }
    return details.headline(
        {
            "id": result.id,
            "status": result.status,
            "step": result.end_step,
            "steps": result.steps,
            "figures": result.metrics,
            "totals": totals,
        }
    )


def repeat_warnings(warnings: list[str]) -> None:
    """After a summary: the warnings that explain why the run was slower than it should be, again (said at the start,
    they may have scrolled away)."""
    with output_may_vanish():
        for message in warnings:
            render.warn(f"{message}{REPEATED}")


def _finish(result: RunSummary, as_json: bool) -> None:
    """The summary of a run that is already recorded: a reader that left cannot turn it into a failure."""
    with output_may_vanish():
        if as_json:
            render.emit_json(result.as_json())
        else:
            render.info(_summary_line(result))


@handled
def train(
    ctx: typer.Context,
    experiment_id: IdArgument,
    restart: RestartOption = False,
    until: UntilOption = None,
    yes: YesOption = False,
    as_json: JsonOption = False,
    quiet: QuietOption = False,
    nproc: NprocOption = 1,
    nnodes: NnodesOption = 1,
    node_rank: NodeRankOption = 0,
    rdzv_endpoint: EndpointOption = "",
    checkpoint_at: CheckpointAtOption = None,
) -> None:
    """Train an experiment from step 0 (refuses existing progress unless --restart)."""
    spec = launch.Launch(nproc, nnodes, node_rank, rdzv_endpoint)
    config = pin_experiment(ctx, experiment_id)  # before torch loads, here and in the ranks
    if restart and not yes and spec.wanted and spec.node_rank == 0 and sys.stdin.isatty():
        ctx.params["yes"] = _confirm_before_ranks(ctx, experiment_id)  # a rank cannot ask: it has no terminal
    start_ranks(ctx, experiment_id, spec, config)
    options: dict[str, Any] = {"restart": restart, "until": until, "checkpoint_at": checkpoint_at or []}
    if restart:
        options["confirm"] = None if yes else "ask"
    _train(ctx, _training, experiment_id, config, as_json, quiet, **options)


@handled
def resume(
    ctx: typer.Context,
    experiment_id: IdArgument,
    step: ResumeStepOption = None,
    until: UntilOption = None,
    reshard: ReshardOption = False,
    as_json: JsonOption = False,
    quiet: QuietOption = False,
    nproc: NprocOption = 1,
    nnodes: NnodesOption = 1,
    node_rank: NodeRankOption = 0,
    rdzv_endpoint: EndpointOption = "",
) -> None:
    """Continue from the newest valid checkpoint (or start at 0); exits 0 at once when complete."""
    config = pin_experiment(ctx, experiment_id)  # before torch loads, here and in the ranks
    start_ranks(ctx, experiment_id, launch.Launch(nproc, nnodes, node_rank, rdzv_endpoint), config)
    _train(ctx, _resuming, experiment_id, config, as_json, quiet, step=step, until=until, reshard=reshard)


def _training(home: Home, experiment_id: str, **options: Any) -> RunSummary | None:
    """The ``train`` use case (``run.runner.train``, imported here: it imports torch)."""
    from octlm.run import runner

    return runner.train(home, experiment_id, **options)


def _resuming(home: Home, experiment_id: str, **options: Any) -> RunSummary | None:
    """The ``resume`` use case (``run.runner.resume``)."""
    from octlm.run import runner

    return runner.resume(home, experiment_id, **options)


def _train(
    ctx: typer.Context,
    use_case: Callable[..., RunSummary | None],
    experiment_id: str,
    config: Config | None,
    as_json: bool,
    quiet: bool,
    **options: Any,
) -> None:
    """``train`` or ``resume`` with a progress reporter; a hung-up terminal never fails the run. ``config``: the
    experiment's, loaded once by the command (None on a box without it)."""
    from octlm.views import estimate

    home, leader = home_of(ctx), launch.rank() == 0  # only rank 0 of several speaks
    with hangup_safe():
        expected = (lambda start, until: estimate.expected(home, config, start, until)) if config else None
        reporter = ConsoleReporter(quiet or not leader, expected)
        if options.get("confirm") == "ask":
            interactive = leader and reporter.interactive and sys.stdin.isatty()
            options["confirm"] = _asker(reporter) if interactive else None
        try:
            result = use_case(home, experiment_id, reporter=reporter, config=config, **options)
        except Interrupted as stop:  # a signal: the run is recorded, and --json says how it ended all the same
            from octlm.run.summary import Stopped  # loaded already: the use case imported it

            if leader and as_json and isinstance(stop, Stopped):
                _finish(stop.summary, as_json)
            raise
        finally:
            reporter.close()
        if not leader or result is None:
            return
        _finish(result, as_json)
        repeat_warnings(reporter.repeated)


def _confirm_before_ranks(ctx: typer.Context, experiment_id: str) -> bool:
    """``--restart`` on several ranks asks here, before they start (``Refused`` when declined)."""
    from octlm.run.files import ExperimentFiles  # imports torch, as the ranks will

    listed = ExperimentFiles(home_of(ctx), experiment_id).discardable()
    if listed:
        render.info("--restart discards:\n" + "\n".join(f"  {render.plain(item)}" for item in listed))
        if not typer.confirm("Discard them and start over?", default=False, err=True):
            raise Refused("--restart cancelled: nothing was discarded")
    return True


def _asker(reporter: ConsoleReporter) -> Callable[[list[str]], bool]:
    """On a terminal, ``--restart`` shows what it would discard and asks first."""

    def confirm(items: list[str]) -> bool:
        with reporter.suspended():
            render.info("--restart discards:\n" + "\n".join(f"  {render.plain(item)}" for item in items))
            return typer.confirm("Discard them and start over?", default=False, err=True)

    return confirm


@handled
def verify_resume(
    ctx: typer.Context,
    experiment_id: IdArgument,
    split_at: SplitAtOption,
    until: FinalStepOption = None,
    keep_scratch: KeepScratchOption = False,
    as_json: JsonOption = False,
    nproc: SizesOption = "1",
) -> None:
    """Prove exact resume: one run 0->M against runs split at N in new processes, compared bit for bit."""
    config = pin_experiment(ctx, experiment_id)  # before torch loads, here and in the segments
    from octlm.tasks.proof import verify  # imports torch

    sizes = verify.parse_sizes(nproc)
    run = functools.partial(verify.verify_resume, home_of(ctx), experiment_id, split_at, until, keep_scratch)
    result = _prove(functools.partial(run, config=config, nproc=sizes), as_json)
    splits = ",".join(map(str, result["split_at"]))
    _verdict(result, as_json, f"verify-resume {experiment_id}: split at {splits}, until {result['until']}")


@handled
def verify_run(
    ctx: typer.Context,
    experiment_id: IdArgument,
    nproc: ReplayNprocOption = None,
    keep_scratch: KeepScratchOption = False,
    as_json: JsonOption = False,
) -> None:
    """Audit the run itself: replay it straight and compare each of its own checkpoints with the replay's, bit for
    bit (exit 3, one line, where its history cannot be replayed here)."""
    pin_experiment(ctx, experiment_id)  # before torch loads, here and in the replay
    from octlm.tasks.proof import audit  # imports torch

    result = _prove(functools.partial(audit.verify_run, home_of(ctx), experiment_id, nproc, keep_scratch), as_json)
    at = ", ".join(map(str, result["steps"]))
    _verdict(result, as_json, f"verify-run {experiment_id}: the run's checkpoints at steps {at} against its replay")


def _prove(proof: Callable[..., Proof], as_json: bool) -> Proof:
    """A proof (``verify-resume``'s, ``verify-run``'s) with its children's lines and bars, and the warnings they
    said, kept with the result."""
    with hangup_safe():
        reporter = ConsoleReporter()
        segments = SegmentsView(before=reporter.close)
        try:
            result = proof(progress=render.info, reporter=reporter, segments=segments)
        finally:
            reporter.close()
            segments.close()
    result["warnings"] = [{"segments": labels, "message": message} for message, labels in segments.warnings.items()]
    return result


def _verdict(result: Resumed | Audited, as_json: bool, title: str) -> None:
    """The proof's table (or ``--json``), its one-line verdict, the children's warnings again; exit 1 on FAIL."""
    if as_json:
        render.emit_json(result)
    else:
        rows = []
        for check in result["checks"]:
            differing = check["differing"]
            worst = max((d["max_abs_diff"] or 0.0 for d in differing), default=0.0)
            names = ", ".join(d["name"] for d in differing[:5])
            verdict = "identical" if not differing else f"DIFFERS (max |diff| {worst:.3g}) {names}"
            rows.append((check["check"], check["compared"], check["compared"] - len(differing), verdict))
        render.print_table(("check", "compared", "identical", "verdict"), rows, title=title)
        timed = ", ".join(f"({name}) {seconds:.1f} s" for name, seconds in result["seconds"].items())
        render.say(
            f"{result['id']}: {'PASS' if result['identical'] else 'FAIL'}: {result['summary']}; "
            f"next-batch loss {result['next_loss']:.6f}; {timed}; {result['threads']['said']}"
        )
    for warning in result.get("warnings", []):
        render.warn(f"{', '.join(warning['segments'])}: {warning['message']} (said by the segment, and again here)")
    if not result["identical"]:
        raise typer.Exit(1)


@handled
def overfit(
    ctx: typer.Context,
    experiment_id: IdArgument,
    steps: StepsOption = None,
    max_loss: MaxLossOption = 1.0,
    as_json: JsonOption = False,
    quiet: QuietOption = False,
    nproc: NprocOption = 1,
    nnodes: NnodesOption = 1,
    node_rank: NodeRankOption = 0,
    rdzv_endpoint: EndpointOption = "",
) -> None:
    """Memorise one block, then greedy-decode it back; exit 0 when the final loss <= --max-loss."""
    config = pin_experiment(ctx, experiment_id)
    start_ranks(ctx, experiment_id, launch.Launch(nproc, nnodes, node_rank, rdzv_endpoint), config)
    from octlm.run import overfit as overfit_runs  # imports torch

    leader = launch.rank() == 0  # only rank 0 of several speaks
    with hangup_safe():
        reporter = ConsoleReporter(quiet or not leader)
        try:
            result = overfit_runs.overfit(
                home_of(ctx), experiment_id, steps=steps, max_loss=max_loss, reporter=reporter, config=config
            )
        finally:
            reporter.close()
    if not leader or result is None:
        return
    if as_json:
        render.emit_json(result)
    else:
        _print_overfit(experiment_id, result)
    if result["verdict"] != "pass":
        raise typer.Exit(1)


def _print_overfit(experiment_id: str, result: Overfitted) -> None:
    matches = f"{result['matched_tokens']}/{result['block_tokens']} tokens"
    render.print_table(
        ("final loss", "perplexity", "bits per byte", "decode matches", "verdict"),
        [(result["final_loss"], result["perplexity"], result["bits_per_byte"], matches, result["verdict"].upper())],
        title=f"overfit {experiment_id}: one block, {counted(result['steps'], 'step')}",
    )
    print("--- block ---")
    print(render.plain(result["block_text"], multiline=True))
    print("--- greedy decode ---")
    print(render.plain(result["decoded_text"], multiline=True))
    render.say(f"{experiment_id}: {result['verdict'].upper()}: {result['summary']}")


@handled
def sample(
    ctx: typer.Context,
    experiment_id: IdArgument,
    prompt: PromptOption = "",
    max_new_tokens: MaxNewTokensOption = 200,
    temperature: TemperatureOption = 1.0,
    top_k: TopKOption = None,
    seed: SeedOption = 0,
    step: SampleStepOption = None,
    as_json: JsonOption = False,
) -> None:
    """Generate text from an experiment's newest (or given) checkpoint; prints it on stdout."""
    from octlm.tasks import sample as sampling  # imports torch

    home = home_of(ctx)
    result = sampling.sample(
        home,
        experiment_id,
        prompt=prompt,
        max_new_tokens=max_new_tokens,
        temperature=temperature,
        top_k=top_k,
        seed=seed,
        step=step,
        warn=render.warn,
    )
    if result.get("special_tokens") and not result["completion"]:
        counts = ", ".join(f"{name} x{count}" for name, count in result["special_tokens"].items())
        render.info(f"{counted(result['tokens'], 'token')} generated, all special ({counts})")
    if as_json:
        render.emit_json(result)
    else:
        print(render.plain(result["text"], multiline=True))
