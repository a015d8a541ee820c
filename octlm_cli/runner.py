"""Use cases: train, resume, overfit and sample, each composed from the modules below it.

CLI commands call exactly one of these and render what comes back.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from . import allocator, checkpoint, corpus, data, experiments, rng, runfile
from .config import Config
from .errors import BadInput, Refused
from .home import Home
from .locking import ExperimentLock
from .loop import TrainState, evaluate, require_compile
from .registry import Registry
from .session import QuietReporter, Reporter, Session, Track, argv as current_argv
from .tokenizer import Tokenizer, load_or_train


def select_device(name: str) -> torch.device:
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise BadInput("training.device: cuda was asked for but no CUDA device is available; use auto or cpu")
    if name == "mps" and not (getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()):
        raise BadInput("training.device: mps was asked for but is not available; use auto or cpu")
    return torch.device(name)


def data_root(home: Home) -> Path:
    """Relative ``data.sources`` resolve here: ``OCTLM_DATA_ROOT`` if set, else the home."""
    root = os.environ.get("OCTLM_DATA_ROOT")
    return Path(root).resolve() if root else home.root


@dataclass(frozen=True)
class Prepared:
    config: Config
    device: torch.device
    tokenizer: Tokenizer
    train_blocks: data.TokenBlocks
    eval_blocks: data.TokenBlocks
    data_hash: str
    notes: tuple[str, ...]


def device_for(config: Config) -> torch.device:
    """The device a run will use; refuses what cannot run here before anything is changed."""
    device = select_device(config.training.device)
    if config.training.compile:
        require_compile(device)
    return device


def prepare(home: Home, config: Config, tokenizer_path: Path | None = None) -> Prepared:
    """Corpus, tokenizer (trained once, then reused), cached token streams and blocks."""
    device = device_for(config)
    rng.configure_determinism(device)
    allocator.keep_freed_memory()
    found = corpus.load(config.data.sources, data_root(home), config.data.validation_fraction, config.data.max_bytes)
    path = tokenizer_path or home.checkpoint_dir(config.id) / "tokenizer.json"
    tokenizer, trained = load_or_train(path, [d.text for d in found.train], config.tokenizer.vocab_size)
    notes = [f"trained tokenizer ({tokenizer.vocab_size} tokens) -> {path}"] if trained else []
    data_hash = data.dataset_hash(found, tokenizer)
    train_stream, validation_stream = data.token_streams(found, tokenizer, home.cache, data_hash)
    train_blocks = data.make_blocks(train_stream, tokenizer, config.model.context_length)
    if len(validation_stream):
        validation = data.make_blocks(validation_stream, tokenizer, config.model.context_length)
    else:
        notes.append("no validation documents: evaluating on training blocks (set data.validation_fraction)")
        validation = train_blocks
    eval_blocks = validation.select(slice(0, config.training.eval_blocks))
    return Prepared(config, device, tokenizer, train_blocks, eval_blocks, data_hash, tuple(notes))


def _open(home: Home, experiment_id: str) -> tuple[Config, Registry]:
    config = experiments.load(home, experiment_id)
    home.ensure_writable()
    registry = Registry(home.registry)
    experiments.register(home, registry, config)
    return config, registry


def _main_track(home: Home, experiment_id: str) -> Track:
    return Track(home.checkpoint_dir(experiment_id), home.run_file(experiment_id))


def _session(home: Home, registry: Registry, prepared: Prepared, kind: str, track: Track, reporter: Reporter) -> Session:
    for note in prepared.notes:
        reporter.note(note)
    return Session(home=home, registry=registry, config=prepared.config, kind=kind, track=track,
                   data_hash=prepared.data_hash, tokenizer_hash=prepared.tokenizer.fingerprint,
                   reporter=reporter, argv=current_argv())


def _check_until(until: int | None, config: Config, start: int = 0) -> int:
    if until is None:
        return config.training.steps
    if not start < until <= config.training.steps:
        raise BadInput(f"--until {until}: must be above the current step {start} and at most training.steps ({config.training.steps})")
    return until


def train(home: Home, experiment_id: str, *, restart: bool = False, until: int | None = None,
          reporter: Reporter | None = None) -> dict[str, Any]:
    reporter = reporter or QuietReporter()
    config, registry = _open(home, experiment_id)
    track = _main_track(home, experiment_id)
    try:
        with ExperimentLock(track.folder, experiment_id):
            existing = checkpoint.listing(track.folder)
            if existing and not restart:
                raise Refused(
                    f"{experiment_id} already has checkpoints (newest: step {existing[-1][0]}): continue with "
                    f"`octlm resume {experiment_id}` or discard them with `octlm train {experiment_id} --restart`"
                )
            until = _check_until(until, config)  # bad input must not cost the user their checkpoints
            device_for(config)
            if restart:
                _discard(home, registry, experiment_id, track)
            prepared = prepare(home, config)
            session = _session(home, registry, prepared, "train", track, reporter)
            state = TrainState.fresh(config, prepared.device, len(prepared.train_blocks))
            session.drive(state, until=until, train_blocks=prepared.train_blocks, eval_blocks=prepared.eval_blocks,
                          pad_id=prepared.tokenizer.pad_id, resumed_from=None)
            return session.summary(state)
    finally:
        registry.close()


def _discard(home: Home, registry: Registry, experiment_id: str, track: Track) -> None:
    """``--restart``: checkpoints, tokenizer and run file go; registry rows of old runs stay as history."""
    for _, path in checkpoint.listing(track.folder):
        registry.remove_checkpoint(str(path.relative_to(home.root)))
        checkpoint.remove(path)
    overfit = str((track.folder / "overfit").relative_to(home.root)) + "/"
    for row in registry.checkpoints(experiment_id):
        if row["path"].startswith(overfit):
            registry.remove_checkpoint(row["path"])
    checkpoint.clean_leftovers(track.folder)
    (track.folder / "tokenizer.json").unlink(missing_ok=True)
    shutil.rmtree(track.folder / "overfit", ignore_errors=True)
    track.run_file.unlink(missing_ok=True)


def restore(prepared: Prepared, loaded: checkpoint.Loaded, reporter: Reporter) -> TrainState:
    """Rebuild the training state from a verified checkpoint, refusing one from another setup."""
    checkpoint.check_fingerprints(loaded.state, config=prepared.config, data_hash=prepared.data_hash,
                                  tokenizer_hash=prepared.tokenizer.fingerprint, path=loaded.path)
    state = TrainState.fresh(prepared.config, prepared.device, len(prepared.train_blocks))
    for message in checkpoint.environment_warnings(
            loaded.state.get("environment", {}),
            checkpoint.environment(state.device, prepared.config.training.precision, state.impl)):
        reporter.warn(message)
    state.load_state_dict(loaded.state)
    return state


def resume(home: Home, experiment_id: str, *, step: int | None = None, until: int | None = None,
           reporter: Reporter | None = None) -> dict[str, Any]:
    reporter = reporter or QuietReporter()
    config, registry = _open(home, experiment_id)
    track = _main_track(home, experiment_id)
    try:
        with ExperimentLock(track.folder, experiment_id):
            for leftover in checkpoint.clean_leftovers(track.folder):
                reporter.note(f"removed leftover {leftover.name}")
            loaded = checkpoint.newest_valid(track.folder, registry.digests(home.root, experiment_id), step)
            if loaded is not None:
                for reason in loaded.skipped:
                    reporter.warn(f"skipped an invalid checkpoint: {reason}; falling back to {loaded.path.name}")
                if loaded.state["step"] >= config.training.steps and until is None:
                    reporter.note(f"{experiment_id} is already complete at step {loaded.state['step']}: nothing to do")
                    return {"id": experiment_id, "kind": "resume", "status": "complete", "start_step": loaded.state["step"],
                            "end_step": loaded.state["step"], "steps": config.training.steps,
                            "checkpoint": str(loaded.path), "metrics": loaded.state.get("metrics") or {}}
            until = _check_until(until, config, loaded.state["step"] if loaded else 0)  # before any slow work
            prepared = prepare(home, config)
            session = _session(home, registry, prepared, "resume", track, reporter)
            if loaded is None:
                reporter.note(f"{experiment_id} has no checkpoint: starting from step 0")
                state = TrainState.fresh(config, prepared.device, len(prepared.train_blocks))
            else:
                state = restore(prepared, loaded, reporter)
                session.latest = loaded.state.get("metrics") or {}
            session.drive(state, until=until, train_blocks=prepared.train_blocks, eval_blocks=prepared.eval_blocks,
                          pad_id=prepared.tokenizer.pad_id, resumed_from=loaded.path if loaded else None)
            return session.summary(state)
    finally:
        registry.close()


def overfit(home: Home, experiment_id: str, *, steps: int | None = None, max_loss: float = 1.0,
            reporter: Reporter | None = None) -> dict[str, Any]:
    """Train on one fixed block (the first training block), then greedy-decode it back."""
    from . import generate

    reporter = reporter or QuietReporter()
    config, registry = _open(home, experiment_id)
    if steps is not None:
        if steps <= 0:
            raise BadInput(f"--steps {steps}: must be positive")
        warmup = config.training.warmup_steps if config.training.warmup_steps < steps else steps // 10
        config = config.replace(training=dataclasses.replace(config.training, steps=steps, warmup_steps=warmup))
    track = Track(home.checkpoint_dir(experiment_id) / "overfit", home.run_file(experiment_id, "-overfit"))
    try:
        with ExperimentLock(home.checkpoint_dir(experiment_id), experiment_id):
            shutil.rmtree(track.folder, ignore_errors=True)  # overfit always starts from step 0
            track.run_file.unlink(missing_ok=True)
            prepared = prepare(home, config)
            block = prepared.train_blocks.select(slice(0, 1))  # (1, T)
            one = Prepared(config, prepared.device, prepared.tokenizer, block, block, prepared.data_hash, prepared.notes)
            session = _session(home, registry, one, "overfit", track, reporter)
            state = TrainState.fresh(config, prepared.device, num_blocks=1, batch_size=1)
            session.drive(state, until=config.training.steps, train_blocks=block, eval_blocks=block,
                          pad_id=prepared.tokenizer.pad_id, resumed_from=None,
                          checkpoint_interval=config.training.steps)
            tokenizer = prepared.tokenizer
            final = evaluate(state.model, block, tokenizer.pad_id, state.device, config.training.precision, 1)
            target = block.inputs[0].tolist() + [int(block.targets[0, -1])]  # the whole T+1 block
            decoded = generate.greedy(state.model, target[:1], len(target) - 1, state.device)
            matched = next((i for i, (a, b) in enumerate(zip(decoded, target)) if a != b), len(target))
            passed = final["eval_loss"] <= max_loss
            records = runfile.read(track.run_file)
            result = {
                "id": experiment_id, "kind": "overfit", "steps": config.training.steps,
                "verdict": "pass" if passed else "fail", "max_loss": max_loss,
                "final_loss": final["eval_loss"], "perplexity": final["perplexity"],
                "bits_per_byte": final["bits_per_byte"],
                "first_logged": records[0] if records else None,
                "matched_tokens": matched, "block_tokens": len(target),
                "block_text": tokenizer.decode(target), "decoded_text": tokenizer.decode(decoded),
                "run_file": str(track.run_file),
            }
            result["summary"] = (f"loss {final['eval_loss']:.4f} after {config.training.steps} steps "
                                 f"(threshold {max_loss}); decode reproduces {matched}/{len(target)} tokens")
            registry.add_verification(experiment_id, "overfit", result["verdict"],
                                      {k: v for k, v in result.items() if not k.endswith("_text")}, session.run_id)
            return result
    finally:
        registry.close()


def sample(home: Home, experiment_id: str, *, prompt: str = "", max_new_tokens: int = 200,
           temperature: float = 1.0, top_k: int | None = None, seed: int = 0, step: int | None = None) -> dict[str, Any]:
    from . import generate
    from .model import Decoder
    from .config import from_dict

    if max_new_tokens <= 0:
        raise BadInput(f"--max-new-tokens {max_new_tokens}: must be positive")
    if temperature < 0:
        raise BadInput(f"--temperature {temperature}: must not be negative (0 means greedy)")
    if top_k is not None and top_k <= 0:
        raise BadInput(f"--top-k {top_k}: must be positive")
    experiments.load(home, experiment_id)  # a clear error for an unknown experiment
    folder = home.checkpoint_dir(experiment_id)
    registry = Registry(home.registry, create=False)
    try:
        known = registry.digests(home.root, experiment_id)
    finally:
        registry.close()
    loaded = checkpoint.newest_valid(folder, known, step)
    if loaded is None:
        raise Refused(f"{experiment_id} has no checkpoint to sample from: train it first with `octlm train {experiment_id}`")
    tokenizer = Tokenizer.load(folder / "tokenizer.json")
    if tokenizer.fingerprint != loaded.state["tokenizer_hash"]:
        raise Refused(f"{folder / 'tokenizer.json'} is not the tokenizer {loaded.path.name} was trained with")
    config = from_dict(loaded.state["config"], loaded.path.name)
    device = select_device(config.training.device)
    model = Decoder(config)
    model.load_state_dict(loaded.state["model"])
    model.to(device)
    ids = tokenizer.encode(prompt, add_special_tokens=False)
    context = [tokenizer.bos_id, *ids]
    if temperature == 0:
        produced = generate.greedy(model, context, max_new_tokens, device, stop_id=tokenizer.eos_id)
    else:
        produced = generate.sample(model, context, max_new_tokens, device, temperature=temperature, top_k=top_k,
                                   seed=seed, stop_id=tokenizer.eos_id)
    return {"id": experiment_id, "step": loaded.state["step"], "checkpoint": str(loaded.path), "prompt": prompt,
            "text": tokenizer.decode(produced[1:]), "tokens": len(produced) - len(context), "seed": seed}

