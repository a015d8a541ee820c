"""``octlm eval``: a checkpoint's held-out evaluation, or its evaluation on another corpus, with standard errors.

The checkpoint is checked as ``sample`` checks it (experiment, track, fingerprints). Without ``on``, it reads the
experiment's own validation split: all of it, or ``tokens`` worth chosen as the experiment's evaluations choose
them (``training.eval_selection``: the first blocks, or spread across the split by a seed of its tokens), so that
``--tokens`` of its budget reads the blocks its training evaluations read. With ``on`` (paths, globs or builtins, as
``data.sources`` takes them), it reads every document of those sources (or ``tokens`` worth, chosen alike),
tokenized with the experiment's tokenizer (kept as a token file in the home's ``cache/``), per source when there
are several. The figures are those of every evaluation during training (``train.evaluation``: mean loss,
perplexity, bits per byte, each with its standard error over clusters of blocks, documents or chunks, and their
count); the result is recorded as a verdict (kind ``eval``), which ``show`` and ``report`` list.
"""

from __future__ import annotations

from octlm.config import Config, from_dict
from octlm.core.errors import BadInput, Refused
from octlm.core.home import Home
from octlm.core.records import EvalResult
from octlm.core.reporting import QuietReporter, Reporter, counted
from octlm.data import corpus, sources, tokens
from octlm.data.blocks import TokenBlocks, make_blocks
from octlm.data.fingerprints import dataset_hash
from octlm.data.tokenizer import Tokenizer
from octlm.store.registry import Registry
from octlm.tasks.sample import load_model
from octlm.train.evaluation import evaluate

VALIDATION = "validation"  # what ``on`` names when no source is given


def run(
    home: Home,
    experiment_id: str,
    *,
    step: int | None = None,
    on: list[str] | None = None,
    tokens_budget: int | None = None,
    reporter: Reporter | None = None,
) -> EvalResult:
    """Evaluate the newest valid checkpoint (or ``step``'s) and record the verdict; the result (``--json``). Each long
    phase (reading and encoding the sources, evaluating) is told to ``reporter``, and its warnings."""
    report = reporter or QuietReporter()
    if tokens_budget is not None and tokens_budget <= 0:
        raise BadInput(f"--tokens {tokens_budget}: must be positive")
    loaded, model, tokenizer, device = load_model(home, experiment_id, step, report.warn)
    config = from_dict(loaded.record.config, loaded.path.name)
    blocks = _blocks(home, config, tokenizer, tuple(on or ()), report)
    width = config.model.context_length
    count = min(len(blocks), -(-tokens_budget // width)) if tokens_budget else len(blocks)
    report.phase("evaluating", f"{counted(count, 'block')} of {counted(width, 'token')} at step {loaded.record.step}")
    chosen = blocks.choose(count, config.training.eval_selection)
    figures = evaluate(model, chosen, device, config.training.precision, config.training.batch_size)
    where = ", ".join(on) if on else f"the {VALIDATION} split"
    error = figures["eval_loss_se"]
    shown = f"{figures['eval_loss']:.4f}" + (f" ± {error:.4f}" if error is not None else "")
    result: EvalResult = {
        "id": experiment_id,
        "step": loaded.record.step,
        "checkpoint": loaded.path.name,
        "on": list(on) if on else [VALIDATION],
        "blocks": count,
        **figures,  # type: ignore[typeddict-item]  # train.evaluation's figures: Figures, eval_seconds, eval_sources
        "summary": f"eval loss {shown} at step {loaded.record.step} on {where} ({counted(count, 'block')}, "
        f"{counted(figures['eval_tokens'], 'token')})",
    }
    try:
        with Registry(home.registry) as registry:
            registry.add_verification(experiment_id, "eval", shown, dict(result))
    except Refused as error:  # a read-only home: the figures are still worth having
        report.warn(f"the evaluation is not recorded as a verdict: {error}")
    return result


def _blocks(home: Home, config: Config, tokenizer: Tokenizer, on: tuple[str, ...], report: Reporter) -> TokenBlocks:
    """The blocks to evaluate: the experiment's validation split (``evaluation_size`` with eval_blocks 0: all of
    it), or every document of ``on``; each with its document, and labelled with its source when there are
    several."""
    data = config.data
    root = sources.data_root(home)
    report.phase("reading", ", ".join(on) if on else "the validation split")
    if on:
        found = corpus.Corpus(tuple(corpus.documents(on, root, field=data.text_field)), (), data.text_field)
        names = on
    else:
        found = corpus.load(data.sources, root, data.validation_fraction, data.max_bytes, data.text_field)
        found, names = corpus.Corpus(found.validation, (), found.field), data.sources
        if not found.train:
            raise BadInput(f"{config.id or 'the experiment'} has no validation documents (data.validation_fraction)")
    size = sum(document.size for document in found.train) / 1e6
    documents, vocabulary = counted(len(found.train), "document"), counted(tokenizer.vocab_size, "token")
    report.phase("encoding", f"{size:,.1f} MB, {documents} with {vocabulary}")
    home.refuse_links(*(folder for folder in home.own_folders() if folder == home.cache))  # as train refuses it
    streams = tokens.token_streams(found, tokenizer, home.cache, dataset_hash(found, tokenizer))
    if streams.warning:
        report.warn(streams.warning)
    blocks = make_blocks(streams.train, tokenizer, config.model.context_length)
    if len(names) > 1:
        return blocks.labelled(streams.lengths[0], [d.source for d in found.train], names)
    return blocks.with_documents(streams.lengths[0])  # each block's document: the errors' clusters
