"""octlm: train miniature decoder-only language models with a loop that resumes exactly, and prove it.

The command line (``octlm --help``) is the main interface. From Python, a notebook say, octlm's face is small:

    import octlm

    model, tokenizer, config = octlm.load("EXP-008", step=200, home="~/octlm")
    ids = tokenizer.encode("# Miniature", add_special_tokens=False)
    records = octlm.runs("EXP-008", home="~/octlm")  # the run file: one record per logged step

``load`` takes the newest valid checkpoint (or the one at ``step``) after the checks ``octlm sample`` makes (its
experiment, its track, its fingerprints against the experiment's YAML as it is now) and returns the model in eval
mode on the configured device, the tokenizer and the config it was trained under. ``runs`` returns the run file's
records (``RunRecord``: step, tokens, lr, train_loss, eval_loss, perplexity, bits_per_byte, gradient_norm,
elapsed_seconds, tokens_per_second), each number finite or None. ``home`` is a folder, else ``OCTLM_HOME``, else
the home holding the current folder, as on the command line. Errors are ``octlm.OctlmError`` (``BadInput`` for
an unknown experiment, ``Refused`` for a checkpoint that must not be used), each with a one-line message.

Importing ``octlm`` loads no torch: ``load`` does, when called. Everything else in the package is octlm's own.
"""

from __future__ import annotations

import os
import warnings
from typing import TYPE_CHECKING, cast

from octlm.core.errors import BadInput, OctlmError, Refused
from octlm.core.provenance import __version__
from octlm.core.records import RunRecord

if TYPE_CHECKING:
    from octlm.config import Config
    from octlm.data.tokenizer import Tokenizer
    from octlm.train.model.decoder import Decoder

__all__ = ["BadInput", "OctlmError", "Refused", "RunRecord", "__version__", "load", "runs"]


def load(
    experiment_id: str, step: int | None = None, home: str | os.PathLike[str] | None = None
) -> tuple[Decoder, Tokenizer, Config]:
    """(model, tokenizer, config) of an experiment's newest valid checkpoint, or of the one at ``step``."""
    from octlm.config import from_dict
    from octlm.core.home import Home
    from octlm.tasks.sample import load_model

    def warn(message: str) -> None:
        warnings.warn(message, stacklevel=3)

    loaded, model, tokenizer, _ = load_model(Home.locate(home), experiment_id, step, warn)
    return model.eval(), tokenizer, from_dict(loaded.record.config, loaded.path.name)


def runs(experiment_id: str, home: str | os.PathLike[str] | None = None, track: str = "train") -> list[RunRecord]:
    """The records of an experiment's run file (``track``: ``train``, or ``overfit`` for ``octlm overfit``'s)."""
    from octlm.core.home import Home, validate_id
    from octlm.views.details import run_records

    if track not in ("train", "overfit"):
        raise BadInput(f"track {track!r}: train or overfit")
    return cast(list[RunRecord], run_records(Home.locate(home), validate_id(experiment_id), track))
