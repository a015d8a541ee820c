"""The seed's sampler: its state round trip, and ranks and micro-batches slicing one global batch."""

from __future__ import annotations

import torch

from octlm.data.sampler import ReplacementSampler


def test_sampler_state_round_trip() -> None:
    a = ReplacementSampler(100, 4, seed=1)
    a.next()
    saved = a.state_dict()
    expected = a.next()
    b = ReplacementSampler(100, 4, seed=1)
    b.load_state_dict(saved)
    assert torch.equal(b.next(), expected)
    assert not torch.equal(ReplacementSampler(100, 4, seed=2).next(), ReplacementSampler(100, 4, seed=1).next())


def test_ranks_and_micro_batches_slice_the_same_global_batch() -> None:
    """N ranks with 1 micro-batch and 1 rank with N micro-batches cut the global batch into the same parts."""
    from octlm.runtime.distributed import Ranks

    index = ReplacementSampler(1000, 12, seed=3).next()
    by_ranks = [part for rank in range(4) for part in Ranks(4, rank).slices(index, 1)]
    by_micro = Ranks().slices(index, 4)
    assert [p.tolist() for p in by_ranks] == [p.tolist() for p in by_micro]
    assert torch.equal(torch.cat(by_micro), index)
    two_by_two = [part for rank in range(2) for part in Ranks(2, rank).slices(index, 2)]
    assert [p.tolist() for p in two_by_two] == [p.tolist() for p in by_micro]
