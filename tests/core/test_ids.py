"""Experiment IDs: what is well formed, prefixes, numbers and their order."""

from __future__ import annotations

import pytest

from octlm.core.errors import BadInput
from octlm.core.home import id_sort_key, split_id, validate_id, validate_prefix


@pytest.mark.parametrize(
    "good", ["EXP-001", "EXP-1", "BOX-001", "B-EXP-001", "gpu7-012", "a-123456789", "A" * 60 + "-001"]
)
def test_well_formed_ids(good: str) -> None:
    assert validate_id(good) == good


@pytest.mark.parametrize(
    "bad",
    [
        "EXP",
        "EXP-",
        "-EXP-001",
        "EXP-001-",
        "EXP--001",
        "1A-001",
        "7-001",
        "EXP-0123456789",
        "EXP_1-001",
        "../EXP-001",
        "EXP-001/..",
        "EXP-001@4",
        "B-001-X-002",
        "EXP-001 ",
        "ÉXP-001",
        "A" * 61 + "-001",
    ],
)
def test_malformed_ids(bad: str) -> None:
    with pytest.raises(BadInput, match="malformed experiment ID"):
        validate_id(bad)


def test_prefixes_numbers_and_order() -> None:
    assert validate_prefix("B-EXP-") == "B-EXP-"
    for bad in ("BOX", "", "-", "1-", "BOX--", "A" * 61 + "-"):
        with pytest.raises(BadInput, match="malformed ID prefix"):
            validate_prefix(bad)
    assert split_id("B-EXP-012") == ("B-EXP-", 12)
    ids = ["EXP-1000", "EXP-999", "BOX-002", "B-EXP-001", "EXP-001"]
    assert sorted(ids, key=id_sort_key) == ["B-EXP-001", "BOX-002", "EXP-001", "EXP-999", "EXP-1000"]
