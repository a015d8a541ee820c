"""From a config to training data: corpus, tokenizer (trained once, then reused, or brought along in
``tokenizer.file``), token streams, blocks.

Each long phase (reading, training the tokenizer, encoding, then the first step) is told to the reporter."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from octlm.config import Config, TrainingConfig
from octlm.core.errors import BadInput, InExperimentFile, Refused
from octlm.core.home import Home
from octlm.core.reporting import QuietReporter, Reporter, counted
from octlm.data import apart as apart_process
from octlm.data import blocks as data
from octlm.data import corpus, sources, tokens
from octlm.data.fingerprints import Fingerprints, brought, dataset_hash
from octlm.data.tokenizer import Tokenizer, cache_path, from_cache, load_or_train, to_cache


@dataclass(frozen=True)
class PreparedData:
    """What a training process trains on, and the notes worth telling the user about it."""

    config: Config
    device: torch.device
    tokenizer: Tokenizer
    train_blocks: data.TokenBlocks
    eval_blocks: data.TokenBlocks
    data_hash: str
    notes: tuple[str, ...]
    world_size: int = 1  # the ranks it is trained on: part of the config's fingerprint above 1
    in_memory: bool = False  # the token streams are not the cache's token file (no signing key to trust one)
    eval_split: str = "validation"  # what evaluations read: "training" blocks when there are no validation documents

    @property
    def fingerprints(self) -> Fingerprints:
        return Fingerprints(self.config.fingerprint_at(self.world_size), self.data_hash, self.tokenizer.fingerprint)

    def one_block(self) -> PreparedData:
        """The first training block alone, for training and evaluating on it (``overfit``)."""
        block = self.train_blocks.select(slice(0, 1))  # (1, T)
        return dataclasses.replace(self, train_blocks=block, eval_blocks=block)


def prepare(
    home: Home,
    config: Config,
    tokenizer_path: Path,
    reporter: Reporter | None = None,
    first_step: bool = True,
    apart: bool = True,
    *,
    device: torch.device,
) -> PreparedData:
    """For a process already set up for ``device`` (``runtime.machine.prepare_process``, called by ``run/`` and
    ``tasks/``), read the corpus, load (or take from the cache, or train) the tokenizer and
    cut blocks, telling ``reporter`` each phase; with ``first_step``, the last phase is the first step.

    A newly trained or cached tokenizer is saved only after the whole corpus has encoded with it. With
    ``apart`` (and on Linux), a tokenizer to train or a token file to write is made in a child process
    (``apart.run_apart``), so that the memory they take is not kept for the run; this process then loads
    both, as a warm start does. The tokens are the same either way."""
    report = reporter or QuietReporter()
    found = _read_corpus(home, config, report)
    brought = _bring(home, config, tokenizer_path, report)
    if brought is not None:  # the model's vocabulary is the file's: the checkpoints hold it
        config = config.with_keys({"tokenizer.vocab_size": brought.vocab_size})
        cached = None
    else:
        cached = cache_path(home.cache, (d.text for d in found.train), config.tokenizer.vocab_size)  # reads them all
    where = _Where(home, config, tokenizer_path, cached, brought)
    notes = _apart(where, found, report) if apart and _cold(where, found) else None
    tokenizer, data_hash, streams, more = _tokens(where, found, report if notes is None else None)
    if streams.warning:  # said here, once (never by the child that trained the tokenizer)
        report.warn(streams.warning)
    notes = [*(notes or []), *more]
    train_blocks = data.make_blocks(streams.train, tokenizer, config.model.context_length)
    eval_blocks = _evaluation_set(config, found, streams, (tokenizer, train_blocks), notes)
    if first_step:
        _first_step(config, device, report)
    kept = (config, device, tokenizer, train_blocks, eval_blocks, data_hash, tuple(notes))
    split = "validation" if len(streams.validation) else "training"
    return PreparedData(*kept, in_memory=streams.warning is not None, eval_split=split)


def evaluation_size(training: TrainingConfig, available: int, context_length: int) -> int:
    """How many validation blocks an evaluation reads (the first, or spread: ``training.eval_selection``):
    ``eval_tokens`` worth when set, else ``eval_blocks`` (0: all of them)."""
    if training.eval_tokens:
        wanted = -(-training.eval_tokens // context_length)
    else:
        wanted = training.eval_blocks or available
    return min(wanted, available)


def _evaluation_set(
    config: Config,
    found: corpus.Corpus,
    streams: tokens.Streams,
    trained: tuple[Tokenizer, data.TokenBlocks],
    notes: list[str],
) -> data.TokenBlocks:
    """The blocks every evaluation reads, in a fixed order, each with its document (for the errors' clusters) and
    its data source (when there are several), chosen by ``training.eval_selection`` (``TokenBlocks.choose``: the
    first, or spread across the split by a seed of its tokens); the training blocks when there are no validation
    documents."""
    (tokenizer, train), width, names = trained, config.model.context_length, config.data.sources
    if len(streams.validation):
        split = data.make_blocks(streams.validation, tokenizer, width)
        lengths, documents = streams.lengths[1], found.validation
    else:
        notes.append("no validation documents: evaluating on training blocks (set data.validation_fraction)")
        split, lengths, documents = train, streams.lengths[0], found.train
    if len(lengths) == len(documents) and len(lengths):
        split = split.with_documents(lengths)
        if len(names) > 1:
            split = split.labelled(lengths, [d.source for d in documents], names)
    training = config.training
    return split.choose(evaluation_size(training, len(split), width), training.eval_selection)


@dataclass(frozen=True)
class _Where:
    """Where the data's artefacts are: the home (its ``cache/``), the experiment's tokenizer file and the
    shared cache's tokenizer for this corpus and vocabulary; or the tokenizer brought along (``tokenizer.file``)."""

    home: Home
    config: Config
    tokenizer: Path
    cached: Path | None
    brought: Tokenizer | None = None


def _tokens(
    where: _Where, found: corpus.Corpus, report: Reporter | None
) -> tuple[Tokenizer, str, tokens.Streams, list[str]]:
    """The tokenizer, the dataset hash and the token streams (made, or loaded and verified); the notes.
    ``report`` None: nothing is told (the work was done and told apart)."""
    tell, path, cached = report or QuietReporter(), where.tokenizer, where.cached
    tokenizer, how = _tokenizer(where, found, tell)
    data_hash = dataset_hash(found, tokenizer)
    tell.phase("encoding", f"{_megabytes(found)} MB with {tokenizer.vocab_size:,} tokens")
    streams = tokens.token_streams(found, tokenizer, where.home.cache, data_hash)
    notes = [streams.note] if streams.note else []
    if how != "loaded":
        tokenizer.save(path)
        notes.append(_tokenizer_note(how, tokenizer, path, cached))
    if how == "trained" and cached is not None:
        to_cache(tokenizer, cached)
    return tokenizer, data_hash, streams, notes


def _cold(where: _Where, found: corpus.Corpus) -> bool:
    """Whether a tokenizer is to be trained or a token file written (a warm start has both; without a signing key
    no token file is written: ``tokens.signing_key``)."""
    writes = tokens.signing_key().secret is not None
    if where.brought is not None:
        return writes and not _token_file(where.home, found, where.brought).exists()
    assert where.cached is not None
    if os.path.lexists(where.tokenizer):
        return writes and not _token_file(where.home, found, where.tokenizer).exists()
    return not os.path.lexists(where.cached) or writes and not _token_file(where.home, found, where.cached).exists()


def _token_file(home: Home, found: corpus.Corpus, tokenizer: Path | Tokenizer) -> Path:
    try:
        loaded = tokenizer if isinstance(tokenizer, Tokenizer) else Tokenizer.load(tokenizer)
        return home.cache / f"tokens-{dataset_hash(found, loaded)}.bin"
    except Exception:  # a damaged tokenizer file: the work in this process says what is wrong with it
        return home.cache / "tokens-unreadable.bin"


def _apart(where: _Where, found: corpus.Corpus, report: Reporter) -> list[str] | None:
    """Train the tokenizer and write the token file in a child process; its notes (None: not done there)."""

    def work(child: Reporter) -> list[str]:
        return _tokens(where, found, child)[3]

    return apart_process.run_apart(work, report)


def _megabytes(found: corpus.Corpus) -> str:
    documents = (*found.train, *found.validation)
    return f"{sum(d.size for d in documents) / 1e6:,.1f}"


def _read_corpus(home: Home, config: Config, report: Reporter) -> corpus.Corpus:
    """The corpus; a source that is wrong is one line naming the experiment's file first."""
    report.phase("reading corpus")
    data = config.data
    try:
        found = corpus.load(
            data.sources, sources.data_root(home), data.validation_fraction, data.max_bytes, data.text_field
        )
    except InExperimentFile:
        raise
    except BadInput as error:
        if not config.id:
            raise
        raise InExperimentFile(f"experiments/{config.id}.yaml: {error}") from None
    count = len(found.train) + len(found.validation)
    skipped = f", {counted(found.skipped, 'binary file')} skipped" if found.skipped else ""
    report.phase("reading corpus", f"{_megabytes(found)} MB, {counted(count, 'document')}{skipped}")
    return found


def _tokenizer(where: _Where, found: corpus.Corpus, report: Reporter) -> tuple[Tokenizer, str]:
    """The experiment's tokenizer, the cached one, or a newly trained one (said as a phase of octlm's own display:
    the library's progress bars stay off), or the one brought along; and how it was found."""
    vocab_size, count, path = where.config.tokenizer.vocab_size, len(found.train), where.tokenizer
    if where.brought is not None:  # its copy in the experiment is the same tokenizer (``_bring``)
        return where.brought, "loaded" if os.path.lexists(path) else "brought"
    assert where.cached is not None  # a corpus to train on, without a file
    if not os.path.lexists(path) and from_cache(where.cached) is None:
        detail = f"{counted(vocab_size, 'token')} on {counted(count, 'document')}"
        report.phase("training tokenizer", detail)
    texts = (d.text for d in found.train)  # read again from their files
    return load_or_train(path, texts, vocab_size, where.cached, length=count)


def _tokenizer_note(how: str, tokenizer: Tokenizer, path: Path, cached: Path | None) -> str:
    if how == "cached" and cached is not None:
        return f"reused tokenizer from cache/{cached.name} ({tokenizer.vocab_size} tokens) -> {path}"
    if how == "brought":
        pad = f"{tokenizer.pad} (added: the file has none)" if tokenizer.pad_added else tokenizer.pad
        if tokenizer.pad_id == tokenizer.eos_id:
            pad += ", the eos token: the loss leaves out every pad target, so every eos too"
        named = f"bos {tokenizer.bos}, eos {tokenizer.eos}, pad {pad}"
        return f"tokenizer from tokenizer.file ({tokenizer.vocab_size:,} tokens; {named}) -> {path}"
    return f"trained tokenizer ({tokenizer.vocab_size} tokens) -> {path}"


def _bring(home: Home, config: Config, experiment_tokenizer: Path, report: Reporter) -> Tokenizer | None:
    """The tokenizer brought along in ``tokenizer.file`` (``fingerprints.brought``; None without one), checked
    against the experiment's copy of the one it trained with."""
    if not config.tokenizer.file:
        return None
    report.phase("loading tokenizer", config.tokenizer.file)
    tokenizer = brought(home, config)
    if tokenizer is not None and os.path.lexists(experiment_tokenizer):
        kept = Tokenizer.load(experiment_tokenizer, config.tokenizer.named())
        if kept.fingerprint != tokenizer.fingerprint:
            raise Refused(
                f"tokenizer.file {config.tokenizer.file} is not the tokenizer {config.id} trained with "
                f"({experiment_tokenizer}): restore that file, or start over with `octlm train {config.id} --restart`"
            )
    return tokenizer


def _first_step(config: Config, device: torch.device, report: Reporter) -> None:
    if config.training.compile:
        report.phase("compiling (first step)", f"torch.compile on {device.type}, once per process")
    else:
        report.phase("first step")
