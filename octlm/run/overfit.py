"""``overfit``: the seed's second test, a variation of the runner's skeleton. Train on one fixed block (the
first training block), then evaluate it and greedy-decode it back."""

from __future__ import annotations

from pathlib import Path
from typing import TypedDict

from octlm.config import Config
from octlm.core.errors import BadInput
from octlm.core.home import Home
from octlm.core.records import RunRecord
from octlm.core.reporting import Reporter, counted
from octlm.data.pipeline import PreparedData
from octlm.run.runner import Context, Start, run_experiment
from octlm.runtime import machine as runtime
from octlm.store import experiments
from octlm.store.registry import Registry
from octlm.store.runs import runfile
from octlm.train import generate
from octlm.train.evaluation import evaluate
from octlm.train.state import TrainState


class Overfitted(TypedDict):
    """What ``octlm overfit --json`` writes, and what the registry keeps as the verdict's details."""

    id: str
    kind: str  # "overfit"
    steps: int
    verdict: str  # pass | fail
    max_loss: float
    final_loss: float
    perplexity: float
    bits_per_byte: float
    first_logged: RunRecord | None  # the run file's first record
    matched_tokens: int  # how far the greedy decode reproduces the block
    block_tokens: int
    block_text: str
    decoded_text: str
    run_file: str
    summary: str


def overfit(
    home: Home,
    experiment_id: str,
    *,
    steps: int | None = None,
    max_loss: float = 1.0,
    reporter: Reporter | None = None,
    config: Config | None = None,
) -> Overfitted | None:
    """Train on one fixed block (the first training block), then greedy-decode it back. ``config``: the
    experiment's, when the caller has loaded it. None on a rank other than 0 (it reports nothing)."""
    registered = config = config or experiments.load(home, experiment_id)
    if steps is not None:
        if steps <= 0:
            raise BadInput(f"--steps {steps}: must be positive")
        warmup = config.training.warmup_steps if config.training.warmup_steps < steps else steps // 10
        config = config.with_keys({"training.steps": steps, "training.warmup_steps": warmup}, "--steps")

    def plan(context: Context) -> Start:
        runtime.device_for(config)
        return Start(
            context.files.overfit,
            config.training.steps,
            batch_size=context.relay.ranks.world_size * config.training.grad_accum_steps,  # the block, once a part
            checkpoint_interval=config.training.steps,
            select=PreparedData.one_block,
            discard=lambda: context.files.clear_overfit(context.registry),
        )

    outcome = run_experiment(home, experiment_id, reporter, "overfit", plan, config, registered)
    if outcome.follower:  # a rank other than 0 reports nothing
        return None
    assert outcome.session is not None and outcome.state is not None and outcome.prepared is not None
    result = _overfit_verdict(outcome.state, outcome.prepared, max_loss, outcome.session.track.run_file)
    with Registry(home.registry) as registry:
        # the block and its greedy decode too (a few hundred bytes): `octlm report` shows them
        registry.add_verification(experiment_id, "overfit", result["verdict"], result, outcome.session.run_id)
    return result


def _overfit_verdict(state: TrainState, prepared: PreparedData, max_loss: float, run_file: Path) -> Overfitted:
    """Evaluate the block after the last step and decode it back greedily from its first token."""
    block, tokenizer, config = prepared.train_blocks, prepared.tokenizer, prepared.config
    final = evaluate(state.model, block, state.device, config.training.precision, 1)
    target = block.inputs[0].tolist() + [int(block.targets[0, -1])]  # the whole T+1 block
    decoded = generate.greedy(state.model, target[:1], len(target) - 1, state.device)
    matched = next((i for i, (a, b) in enumerate(zip(decoded, target, strict=False)) if a != b), len(target))
    records = runfile.read(run_file)
    return {
        "id": config.id,
        "kind": "overfit",
        "steps": config.training.steps,
        "verdict": "pass" if final["eval_loss"] <= max_loss else "fail",
        "max_loss": max_loss,
        "final_loss": final["eval_loss"],
        "perplexity": final["perplexity"],
        "bits_per_byte": final["bits_per_byte"],
        "first_logged": records[0] if records else None,
        "matched_tokens": matched,
        "block_tokens": len(target),
        "block_text": tokenizer.decode(target),
        "decoded_text": tokenizer.decode(decoded),
        "run_file": str(run_file),
        "summary": f"loss {final['eval_loss']:.4f} after {counted(config.training.steps, 'step')} "
        f"(threshold {max_loss}); "
        f"decode reproduces {matched}/{len(target)} tokens",
    }
