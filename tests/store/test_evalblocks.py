"""Issue 45 item 18f: ``show A B`` needs one evaluation of a blocks file (``runs/<ID>-blocks.jsonl``), usually its
last, and read the whole file for it (2.4 GB of memory and 20 s for a file near its cap). ``evalblocks.at_step``
reads from the end back to the evaluation wanted: what it reads is counted by the kernel (``rchar`` of
``/proc/self/io``: every byte a read or pread of this process returned), on a real file of many evaluations."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from octlm.store.runs import evalblocks
from octlm.store.runs.evalblocks import BlockEvaluation

EVALUATIONS, BLOCKS = 60, 20_000  # each line about 427 KB: a file of about 26 MB
SLACK = 1 << 20  # what one read backward may take beyond the lines wanted (a megabyte)


def read_bytes() -> int:
    """The bytes this process has read so far, as the kernel counts them."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


def bytes_read_by(call) -> tuple[object, int]:
    before = read_bytes()
    result = call()
    return result, read_bytes() - before - 60  # less what reading /proc/self/io itself counts, at most


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[BlockEvaluation]]:
    """A blocks file of ``EVALUATIONS`` evaluations at steps 10, 20, ..., as a run appends them."""
    if not Path("/proc/self/io").exists():
        pytest.skip("no /proc/self/io to count the bytes read")
    path = evalblocks.path_for(tmp_path_factory.mktemp("runs") / "EXP-001.jsonl")
    draw, kept = random.Random(3), []
    targets = [draw.randint(100, 128) for _ in range(BLOCKS)]
    for number in range(1, EVALUATIONS + 1):
        nats = [t * draw.uniform(3.0, 7.0) for t in targets]
        kept.append(BlockEvaluation(10 * number, "digest", nats, targets, [3 * t for t in targets]))
        evalblocks.append(path, kept[-1])
    return path, kept


def test_the_newest_evaluation_is_read_alone(many: tuple[Path, list[BlockEvaluation]]) -> None:
    path, kept = many
    line = path.stat().st_size // EVALUATIONS
    for step in (None, 10 * EVALUATIONS):
        found, count = bytes_read_by(lambda step=step: evalblocks.at_step(path, step))
        assert found == kept[-1]
        assert count <= line + SLACK, (
            f"{count:,} bytes read for one line of {line:,} in a file of {path.stat().st_size:,}"
        )
    whole, count = bytes_read_by(lambda: evalblocks.read(path))  # the measure: reading it all counts it all
    assert whole == kept and count >= path.stat().st_size


def test_an_older_evaluation_is_read_back_to_it_and_no_further(many: tuple[Path, list[BlockEvaluation]]) -> None:
    path, kept = many
    line = path.stat().st_size // EVALUATIONS
    for back in (1, 5, 20):
        wanted = kept[-1 - back]
        found, count = bytes_read_by(lambda wanted=wanted: evalblocks.at_step(path, wanted.step))
        assert found == wanted and count <= (back + 1) * line + SLACK, (back, count)
    missing, count = bytes_read_by(lambda: evalblocks.at_step(path, kept[-6].step + 5))  # between two evaluations
    assert missing is None and count <= 6 * line + SLACK
    assert evalblocks.at_step(path, 5) is None and evalblocks.at_step(path, 10 * EVALUATIONS + 10) is None


def test_what_at_step_finds_is_what_the_whole_file_says(tmp_path: Path) -> None:
    """Its answers as reading the whole file gives them, also with the lines a crash or a hand leaves: the newest
    well-formed evaluation at the step, a malformed line or one cut short skipped."""
    path = evalblocks.path_for(tmp_path / "EXP-001.jsonl")
    one = BlockEvaluation(10, "d", [1.5, 2.5], [3, 4], [5, 6])
    again = BlockEvaluation(20, "d", [1.0, 2.0], [3, 4], [5, 6])
    for item in (one, again):
        evalblocks.append(path, item)
    with path.open("a") as handle:
        handle.write('{"format": "octlm-eval-blocks-v1", "step": 30, "blocks": 2, "nats": "AAAA"}\n\n{"step": 3')
    assert evalblocks.at_step(path, None) == again and evalblocks.at_step(path, 20) == again
    assert evalblocks.at_step(path, 10) == one and evalblocks.at_step(path, 30) is None
    assert evalblocks.at_step(tmp_path / "none-blocks.jsonl", None) is None
    lone = tmp_path / "lone-blocks.jsonl"
    lone.write_bytes(path.read_bytes().splitlines(keepends=True)[0].rstrip(b"\n"))  # one line, no newline
    assert evalblocks.at_step(lone, None) == one


def test_the_first_format_is_still_read_its_blocks_its_units(tmp_path: Path) -> None:
    """Issue 46 item 1: a blocks file written before clusters (``octlm-eval-blocks-v1``, no clusters, no checksum)
    is still read, its blocks its units (``cluster_unit`` blocks), so old runs' verdicts still work and say so."""
    import base64
    import json
    import struct

    from octlm.views.paired import pair

    def v1(step: int, nats: list[float]) -> str:
        packed = {
            k: base64.b64encode(struct.pack(f"<{len(v)}{f}", *v)).decode()
            for k, f, v in (("nats", "d", nats), ("targets", "i", [16] * 4), ("bytes", "i", [40] * 4))
        }
        return json.dumps({"format": "octlm-eval-blocks-v1", "step": step, "blocks": 4, "digest": "d", **packed})

    path = evalblocks.path_for(tmp_path / "EXP-001.jsonl")
    path.write_text(v1(10, [60.0, 61.0, 59.0, 62.0]) + "\n" + v1(20, [50.0, 52.0, 49.0, 50.5]) + "\n")
    first, other = evalblocks.at_step(path, 10), evalblocks.at_step(path, 20)
    assert first is not None and other is not None and first.nats == [60.0, 61.0, 59.0, 62.0]
    assert (other.clusters, other.cluster_unit, other.checked) == (None, "blocks", None)
    found = pair(first, other)
    assert found is not None and (found["clusters"], found["cluster_unit"], found["df"]) == (4, "blocks", 3.0)


def test_the_current_format_keeps_each_blocks_cluster_and_a_checksum_of_its_arrays(tmp_path: Path) -> None:
    """Issue 46 items 1 and 6: each block's cluster and its unit, and a checksum of the arrays: a line edited after
    the run, even to another valid structure (a value changed, an array cut short with its count), reads unchecked."""
    import json

    path = evalblocks.path_for(tmp_path / "EXP-001.jsonl")
    kept = BlockEvaluation(10, "d", [60.0, 61.0, 59.0, 62.0], [16] * 4, [40] * 4, [0, 0, 1, 1], "chunks")
    evalblocks.append(path, kept)
    line = json.loads(path.read_text())
    assert line["format"] == "octlm-eval-blocks-v2" and len(line["checksum"]) == 64
    found = evalblocks.at_step(path, 10)
    assert found == kept and found is not None and found.checked is True and found.units == [0, 0, 1, 1]
    for change in ("flip", "cut"):
        edited = dict(line)
        if change == "flip":  # one base64 character of the nats: still a valid array of 4 floats
            edited["nats"] = edited["nats"][:5] + ("A" if edited["nats"][5] != "A" else "B") + edited["nats"][6:]
        else:  # every array one block shorter, and the count with them
            edited |= {"blocks": 3} | {
                key: b64_cut(line[key], 3, 8 if key == "nats" else 4)
                for key in ("nats", "targets", "bytes", "clusters")
            }
        path.write_text(json.dumps(edited) + "\n")
        read = evalblocks.at_step(path, 10)
        assert read is not None and read.checked is False, change
        assert read.blocks == (4 if change == "flip" else 3)
    path.write_text(json.dumps(line | {"checksum": "0" * 64}) + "\n")
    assert (read := evalblocks.at_step(path, 10)) is not None and read.checked is False and read == kept


def b64_cut(text: str, count: int, size: int) -> str:
    """A base64 array cut to its first ``count`` items of ``size`` bytes."""
    import base64

    return base64.b64encode(base64.b64decode(text)[: count * size]).decode()
