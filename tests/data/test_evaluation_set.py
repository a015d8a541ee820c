"""Issue 46 item 2: the evaluation set drawn across the validation split (``training.eval_selection: spread``),
seeded by the split's tokens and not by ``training.seed``, so that two experiments on the same data evaluate the same
blocks and can still be paired; ``first`` (the default, so EXP-008 and every config without the key) as before."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import cli, tiny_config

from octlm.config import from_dict
from octlm.core.home import Home
from octlm.data import blocks as data
from octlm.data.pipeline import prepare

REPOSITORY = Path(__file__).resolve().parents[2]


def evaluation_set(home: Path, **training) -> data.TokenBlocks:
    raw = tiny_config(data={"validation_fraction": 0.5}, training={"eval_blocks": 12, **training})
    config = from_dict({"id": "EXP-001", **raw})
    found = prepare(
        Home(home), config, home / "tokenizer.json", first_step=False, apart=False, device=torch.device("cpu")
    )
    return found.eval_blocks


def test_spread_is_fixed_by_the_data_not_the_seed_and_first_is_as_before(home: Path) -> None:
    spread = evaluation_set(home, eval_selection="spread", seed=1)
    again = evaluation_set(home, eval_selection="spread", seed=2)  # another experiment, another seed: same blocks
    first = evaluation_set(home, eval_selection="first")
    unsaid = evaluation_set(home)  # a config without the key (EXP-008's kind): the first blocks, as before
    assert spread.rows is not None and again.rows is not None and first.rows is not None and unsaid.rows is not None
    assert np.array_equal(spread.rows, again.rows) and len(spread.rows) == 12
    assert np.array_equal(unsaid.rows, np.arange(12)) and np.array_equal(first.rows, unsaid.rows)
    assert not np.array_equal(spread.rows, first.rows)
    assert list(spread.rows) == sorted(set(spread.rows.tolist()))  # distinct, in stream order
    whole = len(spread.stream) // spread.width
    assert spread.rows[-1] >= whole * 11 // 12  # one in each twelfth of the split: the last near its end
    assert spread.documents is not None and first.documents is not None
    assert len(set(spread.documents)) > len(set(first.documents))  # more of the split's documents read
    # the clusters: spread reads 6 documents, clustered by document; the first 12 blocks are 2 chunks of one
    assert spread.cluster_ids()[1] == "documents" and spread.cluster_ids()[0].max() + 1 == len(set(spread.documents))
    assert first.cluster_ids()[1] == "chunks" and first.cluster_ids()[0].tolist() == [0] * 8 + [1] * 4


def test_the_clusters_rule() -> None:
    """Documents from 4 of them, else chunks of 8 consecutive blocks of the split when two or more, else blocks."""
    ids, unit = data.clusters_of(np.arange(40), np.repeat(np.arange(10), 4))
    assert unit == "documents" and ids.tolist() == np.repeat(np.arange(10), 4).tolist()
    ids, unit = data.clusters_of(np.array([0, 5, 9, 20, 31]), np.array([2, 2, 5, 7, 9]))  # 4 documents: enough
    assert unit == "documents" and ids.tolist() == [0, 0, 1, 2, 3]
    ids, unit = data.clusters_of(np.array([3, 9, 10, 30]), np.array([0, 1, 1, 6]))  # 3 documents: chunks 0, 1, 1, 3
    assert unit == "chunks" and ids.tolist() == [0, 1, 1, 2]
    ids, unit = data.clusters_of(np.arange(16, 20), None)  # 4 blocks of one chunk
    assert unit == "blocks" and ids.tolist() == [0, 1, 2, 3]


def test_spread_draws_one_in_each_stretch_and_each_source_its_share() -> None:
    stream = (np.arange(9 * 100) * 37 + 5) % 300
    blocks = data.TokenBlocks(stream, 9, np.ones(300, dtype=np.int64), pad_id=0)
    chosen = blocks.spread(10)
    assert chosen.rows is not None and [int(r) // 10 for r in chosen.rows] == list(range(10))
    assert np.array_equal(blocks.spread(10).rows, chosen.rows)  # seeded: the same at every call
    other = data.TokenBlocks((stream + 1) % 300, 9, np.ones(300, dtype=np.int64), pad_id=0)
    assert not np.array_equal(other.spread(10).rows, chosen.rows)  # other data, another draw
    labelled = blocks.labelled(np.array([9 * 80, 9 * 20]), [0, 1], ("a", "b"))  # 80 blocks of a, 20 of b
    both = labelled.spread(10)
    assert both.sources is not None and both.sources.tolist().count(1) == 5  # b's share as first gives it
    assert both.rows is not None and all(r >= 80 for r, s in zip(both.rows, both.sources, strict=True) if s == 1)
    with pytest.raises(ValueError, match="unknown evaluation selection"):
        blocks.choose(4, "random")


def test_new_experiments_spread_and_exp_008_keeps_first(home: Path) -> None:
    """``octlm new`` writes spread into a new experiment (as it writes eval_tokens); the key is bookkeeping, so it
    changes no fingerprint; EXP-008 has no key and evaluates the first blocks."""
    from octlm.config import load as load_config
    from octlm.store.experiments import load as load_experiment

    assert cli(home, "new", "--preset", "day1").exit_code == 0
    made = load_experiment(Home(home), "EXP-002")
    assert made.training.eval_selection == "spread"
    assert "eval_selection: spread" in (home / "experiments" / "EXP-002.yaml").read_text()
    shipped = load_config(REPOSITORY / "experiments" / "EXP-008.yaml")
    assert shipped.training.eval_selection == "first"
    moved = from_dict({**shipped.to_dict(), "training": {**shipped.to_dict()["training"], "eval_selection": "spread"}})
    assert moved.fingerprint == shipped.fingerprint
