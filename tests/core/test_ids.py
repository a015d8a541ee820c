"""Experiment IDs: what is well formed, prefixes, numbers and their order, and the registry reading them alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from octlm.core.errors import BadInput
from octlm.core.home import id_sort_key, split_id, validate_id, validate_prefix
from octlm.store.registry import Registry


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


GOOD = ["EXP-001", "EXP-1", "BOX-001", "B-EXP-001", "gpu7-012", "a-123456789", "A" * 60 + "-001", "EXP-1000"]
BAD = ["EXP", "EXP-", "-EXP-001", "EXP-001-", "EXP--001", "1A-001", "7-001", "EXP-0123456789", "B-001-X-002"]
BAD += ["EXP-001 ", "ÉXP-001", "A" * 61 + "-001", "EXP-1a", "junk"]


def test_the_registry_reads_an_id_s_prefix_and_number_as_split_id_does(tmp_path: Path) -> None:
    """Issue 45 item 5: the registry keeps the highest number given with each prefix (m011's trigger, in SQL); for
    every well-formed ID it reads the prefix and number ``split_id`` reads, and a row that is no ID (one an older
    octlm or a damaged file let in) marks no prefix that an ID could be allocated with."""
    with Registry(tmp_path / "registry.db") as registry:
        for experiment_id in [*GOOD, *BAD]:
            registry.add_experiment(experiment_id)
        marks = registry.id_marks()
    expected: dict[str, int] = {}
    for prefix, number in map(split_id, GOOD):
        expected[prefix] = max(expected.get(prefix, 0), number)
    assert {p: n for p, n in marks.items() if p in expected} == expected
    for prefix in set(marks) - set(expected):  # what a malformed row may leave: never a prefix new accepts
        with pytest.raises(BadInput):
            validate_prefix(prefix)
