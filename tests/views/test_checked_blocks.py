"""Issue 46 item 6: a verdict rests only on checked files. A per-block evaluation file whose sums disagree with the
evaluation the run recorded at that step (its run file's ``eval_loss``, ``eval_tokens``, ``bits_per_byte``,
clusters), or whose checksum does not match its arrays, is not used: the comparison falls back to the unpaired
error, with one line saying which file and why. Real run files and blocks files in a home, as a run writes them."""

from __future__ import annotations

import base64
import json
import math
import struct
from pathlib import Path

import pytest

from octlm.core.home import Home
from octlm.store.runs import evalblocks, runfile
from octlm.store.runs.evalblocks import BlockEvaluation
from octlm.views import side_by_side
from octlm.views.compare import versus
from octlm.views.details import run_records
from octlm.views.paired import Unused

TARGETS, BYTES, DOCUMENTS = [16] * 12, [40] * 12, [i // 3 for i in range(12)]


def written(home: Home, experiment_id: str, nats: list[float]) -> BlockEvaluation:
    """A run of one evaluation at step 10: its run file's record and its blocks file, as a run writes them."""
    tokens, total = sum(TARGETS), math.fsum(nats)
    record = {
        "step": 10,
        "tokens": 640,
        "eval_loss": total / tokens,
        "bits_per_byte": total / (math.log(2) * sum(BYTES)),
        "eval_tokens": tokens,
        "eval_clusters": 4,
        "eval_cluster_unit": "chunks",
    }
    runfile.append(home.run_file(experiment_id), record)  # type: ignore[arg-type]
    kept = BlockEvaluation(10, "digest", nats, TARGETS, BYTES, DOCUMENTS, "chunks")
    evalblocks.append(evalblocks.path_for(home.run_file(experiment_id)), kept)
    return kept


@pytest.fixture
def two(tmp_path: Path) -> Home:
    home = Home(tmp_path)
    home.runs.mkdir()
    written(home, "EXP-001", [16 * (5.0 + 0.1 * (i % 3)) for i in range(12)])
    written(home, "EXP-002", [16 * (4.9 + 0.1 * (i % 3) + 0.01 * (i % 2)) for i in range(12)])
    return home


def compared(home: Home) -> tuple[object, str]:
    kept = {e: side_by_side.final_blocks(home, e, run_records(home, e)) for e in ("EXP-001", "EXP-002")}
    return kept["EXP-002"], side_by_side.pairing(kept, "EXP-001", "EXP-002")[1]


def edit(home: Home, change: dict[str, object], checksum: bool = False, first_format: bool = False) -> None:
    """Rewrite EXP-002's blocks file with ``change``; with ``checksum``, its checksum made anew (another tool's edit,
    or a forger's); with ``first_format``, as a file of the first format (no clusters, no checksum)."""
    path = evalblocks.path_for(home.run_file("EXP-002"))
    line = json.loads(path.read_text()) | change
    if first_format:
        line = {k: v for k, v in line.items() if k not in ("clusters", "cluster_unit", "checksum")}
        line["format"] = evalblocks.FORMAT_V1
    if checksum:
        line["checksum"] = evalblocks._checksum(line)
    path.write_text(json.dumps(line) + "\n")


def packed(kind: str, values: list) -> str:
    return base64.b64encode(struct.pack(f"<{len(values)}{kind}", *values)).decode()


def test_checked_files_are_paired(two: Home) -> None:
    found, words = compared(two)
    assert isinstance(found, BlockEvaluation) and found.checked is True and words == "paired"


def test_an_edited_array_is_not_used_and_the_line_says_why(two: Home) -> None:
    """The attack of the issue: a block's nats edited after the run (here one block, by a nat a token), the
    checksum left as it was: the file is not used, and the comparison falls back saying so."""
    nats = [16 * (4.9 + 0.1 * (i % 3) + 0.01 * (i % 2)) for i in range(12)]
    edit(two, {"nats": packed("d", [nats[0] - 16.0, *nats[1:]])})
    found, words = compared(two)
    assert isinstance(found, Unused) and found.step == 10
    assert words == (
        "unpaired: runs/EXP-002-blocks.jsonl is not used, its checksum does not match its arrays: edited or damaged "
        "since the run wrote it"
    )
    sides = [versus.Side(e, run_records(two, e)) for e in ("EXP-001", "EXP-002")]
    shown = versus.settle([versus.measure(*sides, None, words, 0.01)])[0]
    assert shown["test"] == "unpaired" and shown["paired"] is None and "is not used, its checksum" in shown["noise"]


@pytest.mark.parametrize(
    ("change", "said"),
    [
        # a value moved, the checksum made anew: its loss is not the run's
        (
            {"nats": packed("d", [16 * 4.0] + [16 * (4.9 + 0.1 * (i % 3) + 0.01 * (i % 2)) for i in range(1, 12)])},
            "its loss, ",
        ),
        # an array cut short with its count, the checksum made anew: its tokens are not the run's
        (
            {
                "blocks": 11,
                "nats": packed("d", [16 * 5.0] * 11),
                "targets": packed("i", TARGETS[:11]),
                "bytes": packed("i", BYTES[:11]),
                "clusters": packed("i", DOCUMENTS[:11]),
            },
            "its 176 target tokens are not the 192",
        ),
        # the clusters made one per block, the checksum made anew: not the run's 4 chunks
        ({"clusters": packed("i", list(range(12))), "cluster_unit": "documents"}, "its clusters are not the 4 chunks"),
    ],
)
def test_a_file_that_disagrees_with_its_run_is_not_used(two: Home, change: dict[str, object], said: str) -> None:
    edit(two, change, checksum=True)
    found, words = compared(two)
    assert isinstance(found, Unused) and said in found.reason and said in words
    assert words.startswith("unpaired: runs/EXP-002-blocks.jsonl is not used, ")


def test_a_file_of_the_first_format_is_checked_by_its_sums(two: Home) -> None:
    """No checksum to check: its sums still are. As written, it is used (its blocks its units); edited, it is not.
    (Beside a run file that records clusters, it is not that run's file: not used either.)"""
    edit(two, {}, first_format=True)
    assert "its clusters are not the 4 chunks" in compared(two)[1]
    old_run = two.run_file("EXP-002")  # a run of before issue 46: its records say nothing of clusters
    record = {k: v for k, v in json.loads(old_run.read_text()).items() if not k.startswith("eval_cluster")}
    old_run.write_text(json.dumps(record) + "\n")
    found, words = compared(two)
    assert isinstance(found, BlockEvaluation) and found.cluster_unit == "blocks" and words == "paired"
    edit(two, {"nats": packed("d", [16 * 6.0] * 12)}, first_format=True)
    found, words = compared(two)
    assert isinstance(found, Unused) and "its loss, 6.000000, is not the" in words
