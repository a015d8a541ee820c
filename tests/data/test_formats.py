"""Issue 48 item 2: the data formats' one table (``data.formats.FORMATS``, docs/modules.md "Families"). Every test of
the family is parametrized by the table and reads what to expect from the row (its suffixes, its packages, whether
``data.text_field`` names its field), so that a new row is tested without a line added here: it is documented in
``data.sources``' help, a file of it (made by its own ``write``) trains to the same fingerprint twice and resumes
exactly, a damaged one is one line naming it, and without its packages one line names the extra to install.
Then the cases the issue names: a day1-like experiment on a Parquet shard and on a ``.jsonl.zst`` file passes
``verify-resume``, a folder ``datasets`` itself saved (``save_to_disk``) trains and resumes exactly, the bad inputs of
a Parquet file, and memory that stays flat as a Parquet corpus grows."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import CORPUS, REPO, assert_same_training_state, cli, json_out, octlm, write_experiment

from octlm.core import layout
from octlm.core.errors import BadInput
from octlm.data import corpus
from octlm.data.formats import FORMATS, Format
from octlm.train import checkpoint

TEXTS = [CORPUS[i * 1000 : (i + 1) * 1000 + 500] for i in range(10)]  # the tests' corpus, as write_corpus cuts it
NAMED = [name for name, row in FORMATS.items() if row.suffixes]  # recognized by name, so they can be damaged
NEEDING = [name for name, row in FORMATS.items() if row.needs]
# octlm run with some packages made unimportable (``sys.modules[name] = None``), as where they are not installed
HIDING = (
    "import runpy, sys; sys.modules.update(dict.fromkeys(sys.argv.pop(1).split(','))); "
    "runpy.run_module('octlm', run_name='__main__', alter_sys=True)"
)


def field_of(row: Format) -> str:
    """The field a test writes records under: not the default, so that data.text_field is read where it applies."""
    return "body" if row.records else "text"


def home_with(tmp_path: Path, name: str, texts: list[str] = TEXTS, **data: object) -> tuple[Path, Path]:
    """A home whose EXP-001 trains on a file (or folder) of format ``name`` holding ``texts``; (home, what was made)."""
    row, home = FORMATS[name], tmp_path / name.replace(".", "-")
    home.mkdir(parents=True)
    made = row.write(home, texts, field_of(row))
    sources = {"sources": [made.relative_to(home).as_posix()], "text_field": field_of(row)}
    write_experiment(home, data={**sources, "validation_fraction": 0.2, **data})
    return home, made


def final(home: Path) -> checkpoint.Record:
    return checkpoint.read(layout.checkpoints(home / "checkpoints" / "EXP-001")[-1][1])


def test_the_table_is_data_sources_documentation() -> None:
    """Each row's help is in data.sources' documentation (``octlm config keys``, docs/reference/config.md), with its
    name endings; the packages of every row that needs any are the data extra's, in pyproject.toml."""
    from octlm.cli.commands.config import keys_described

    said = next(key["doc"] for key in keys_described() if key["key"] == "data.sources")
    reference = " ".join((REPO / "docs" / "reference" / "config.md").read_text().split())
    pyproject = (REPO / "pyproject.toml").read_text()
    extra = pyproject.split("\ndata = [", 1)[1].split("]", 1)[0]
    for name, row in FORMATS.items():
        entry = f"{', '.join(row.suffixes) or name}: {row.help}"
        assert entry in said and entry in reference, name
        assert all(f'"{package}' in extra for package in row.needs), (name, extra)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(FORMATS))  # every row of the table: a new one is tested without a line here
def test_a_file_of_every_format_trains_to_one_fingerprint_and_resumes_exactly(name: str, tmp_path: Path) -> None:
    """A file of each format holds the texts written to it, read again in any order; it trains to the same data
    fingerprint in two homes, and a run stopped at step 4 and resumed ends bit-identical to one done in one go. Where
    the row reads a field, the field is part of the fingerprint."""
    one, made = home_with(tmp_path / "one", name)
    found = corpus.load(tuple(yaml.safe_load((one / "experiments" / "EXP-001.yaml").read_text())["data"]["sources"]),
                        one, 0.2, 0, field_of(FORMATS[name]))  # fmt: skip
    documents = [*found.train, *found.validation]
    assert sorted(d.text for d in documents) == sorted(TEXTS)
    assert [d.text for d in reversed(documents)] == [d.text for d in documents][::-1]  # read again, backwards
    two = tmp_path / "two" / one.name
    shutil.copytree(one, two)
    assert cli(one, "train", "EXP-001", "--until", "8", "-q").exit_code == 0
    assert cli(two, "train", "EXP-001", "--until", "4", "-q").exit_code == 0
    assert cli(two, "resume", "EXP-001", "--until", "8", "-q").exit_code == 0
    fingerprints = [json_out(cli(home, "show", "EXP-001", "--json"))["fingerprints"]["data"] for home in (one, two)]
    assert fingerprints[0] == fingerprints[1] and len(fingerprints[0]) == 64
    assert_same_training_state(final(one), final(two))
    if FORMATS[name].records:  # the same records read under another name of their field: another fingerprint
        other = corpus.Corpus(found.train, found.validation, "text")
        assert other.content_hash != found.content_hash


@pytest.mark.parametrize("name", list(FORMATS))
def test_the_fingerprint_covers_what_is_read(name: str, tmp_path: Path) -> None:
    """The dataset's content hash is the same for the same texts in another home, and moves when one character of one
    document changes in the file; where the row reads a field, reading the same records under another field's name
    moves it too."""
    row = FORMATS[name]

    def content_hash(where: str, texts: list[str]) -> str:
        home, made = home_with(tmp_path / where, name, texts)
        return corpus.load((made.relative_to(home).as_posix(),), home, 0.2, 0, field_of(row)).content_hash

    edited = [*TEXTS[:3], TEXTS[3].replace("e", "é", 1), *TEXTS[4:]]
    first, again, changed = content_hash("a", TEXTS), content_hash("b", TEXTS), content_hash("c", edited)
    assert first == again != changed
    if row.records:
        home, made = home_with(tmp_path / "d", name)
        found = corpus.load((made.relative_to(home).as_posix(),), home, 0.2, 0, field_of(row))
        assert found.content_hash == first != corpus.Corpus(found.train, found.validation).content_hash


@pytest.mark.parametrize("name", NAMED)
def test_a_damaged_file_of_every_format_is_one_line_naming_it(name: str, tmp_path: Path) -> None:
    """A file of a format told by its name, cut in half or not of that format at all, is refused in one line naming
    the file and what to do; nothing is trained."""
    row = FORMATS[name]
    home, made = home_with(tmp_path, name)
    files = [made] if made.is_file() else sorted(p for p in made.iterdir() if p.name.endswith(row.suffixes))
    payload = files[0].read_bytes()
    for damaged in (payload[: len(payload) // 2], b"\x00\xffnot what its name says\n"):
        files[0].write_bytes(damaged)
        with pytest.raises(BadInput) as caught:
            corpus.load((made.relative_to(home).as_posix(),), home, 0.2, 0, field_of(row))
        message = str(caught.value)
        assert "\n" not in message and str(files[0]) in message, message
        assert "drop" in message, message  # what to do: fetch, fix or write it again, or drop it
    result = cli(home, "train", "EXP-001", "-q")
    assert result.exit_code == 2 and result.stderr.count("\n") == 1 and str(files[0]) in result.stderr
    assert not (home / "checkpoints" / "EXP-001" / "tokenizer.json").exists()


def test_an_arrow_stream_cut_between_two_batches_is_one_line(tmp_path: Path) -> None:
    """An Arrow stream cut exactly after a record batch would read as a shorter stream: it lacks the end-of-stream
    marker every writer closes with (``save_to_disk``'s too), and is refused as cut short."""
    import pyarrow as pa

    home, made = home_with(tmp_path, "arrow")
    arrow = made / "data-00000-of-00001.arrow"
    table = pa.ipc.open_stream(arrow.read_bytes()).read_all()
    with pa.ipc.new_stream(str(arrow), table.schema) as writer:
        writer.write_batch(table.to_batches(max_chunksize=4)[0])
    arrow.write_bytes(arrow.read_bytes()[:-8])  # the end-of-stream marker left out: the first batch alone
    with pytest.raises(BadInput, match="arrow: not a readable Arrow file, damaged or cut short .no end-of-stream"):
        corpus.documents(("saved",), made.parent, field="body")


@pytest.mark.parametrize("name", [name for name, row in FORMATS.items() if row.records])
def test_a_record_without_the_field_is_one_line_naming_the_file_and_the_key(name: str, tmp_path: Path) -> None:
    """A record format read under a field it lacks, or one that is not text (the ``id`` each ``write`` adds), is one
    line naming the file and data.text_field."""
    home, made = home_with(tmp_path, name)
    for field in ("text", "id"):
        with pytest.raises(BadInput) as caught:
            corpus.load((made.relative_to(home).as_posix(),), home, 0.2, 0, field)
        message = str(caught.value)
        assert "\n" not in message and str(made) in message and "data.text_field" in message, message


@pytest.mark.slow  # new processes, one a package hidden: about 4 s each here
@pytest.mark.parametrize("name", NEEDING)
def test_without_its_packages_a_format_is_one_line_naming_the_extra(name: str, tmp_path: Path) -> None:
    """Where a package a row needs is missing (hidden from a new process), ``new`` and ``train`` each say in one line
    which package and which extra to install (exit 2) and write nothing; the other rows' packages missing change
    nothing for it."""
    row = FORMATS[name]
    home, made = home_with(tmp_path, name)
    source = made.relative_to(home).as_posix()
    for package in row.needs:
        for args in (("new", "--set", f"data.sources=[{source}]"), ("train", "EXP-001", "-q")):
            command = [sys.executable, "-c", HIDING, package, "--home", str(home), *args]
            result = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=home)
            assert result.returncode == 2 and result.stderr.count("\n") == 1, (args, result.stderr)
            assert f"needs {package}" in result.stderr and "octlm[data]" in result.stderr, result.stderr
        assert sorted(p.name for p in (home / "experiments").iterdir()) == ["EXP-001.yaml"]
        assert not (home / "checkpoints" / "EXP-001" / "tokenizer.json").exists()
    others = {package for other in FORMATS.values() for package in other.needs} - set(row.needs)
    if others:
        command = [sys.executable, "-c", HIDING, ",".join(others), "--home", str(home), "prepare", "EXP-001", "--json"]
        result = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=home)
        assert result.returncode == 0 and json.loads(result.stdout)["tokens"]["train"] > 0, result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("name", ["parquet", "jsonl.zst"])
def test_a_day1_like_experiment_on_a_parquet_shard_or_a_jsonl_zst_file_passes_verify_resume(
    name: str, tmp_path: Path
) -> None:
    """Done when (issue 48): an experiment of day1's preset, made tiny, trains on a Parquet shard and on a
    ``.jsonl.zst`` file, with a tokenizer file brought along (GPT-2's shape, saved by ``tokenizers``), and
    ``verify-resume`` passes on it (in new processes, as a user runs it)."""
    from test_brought_tokenizer import byte_level

    home, _ = home_with(tmp_path, name)
    (home / "tok").mkdir()
    byte_level(home / "tok" / "tokenizer.json")
    config = yaml.safe_load((home / "experiments" / "EXP-001.yaml").read_text())
    config = {**config, "preset": "day1", "tokenizer": {"file": "tok/tokenizer.json"}}
    (home / "experiments" / "EXP-001.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    result = octlm(home, "verify-resume", "EXP-001", "--split-at", "4", "--until", "8", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["identical"]
    prepared = json_out(cli(home, "prepare", "EXP-001", "--json"))  # the file's tokenizer, none trained
    assert not any("tokenizer" in phase["name"] and "train" in phase["name"] for phase in prepared["phases"])
    assert [p["name"] for p in prepared["phases"]] and prepared["tokens"]["train"] > 0


@pytest.mark.slow
def test_a_folder_datasets_saved_trains_to_one_fingerprint_twice_and_resumes_exactly(tmp_path: Path) -> None:
    """A folder a Hugging Face ``datasets`` object was saved to (``save_to_disk``, in three shards, its text under
    ``content``) is read from its Arrow files as they lie, without ``datasets``: the same texts, the same data
    fingerprint in two homes, and ``verify-resume`` passes. A ``DatasetDict`` folder is one line naming a split."""
    datasets = pytest.importorskip("datasets", reason="the dev extra installs datasets")
    home = tmp_path / "home"
    saved = datasets.Dataset.from_dict({"content": TEXTS, "number": list(range(len(TEXTS)))})
    saved.save_to_disk(str(home / "saved"), num_shards=3)
    write_experiment(home, data={"sources": ["saved"], "text_field": "content", "validation_fraction": 0.2})
    assert [d.text for d in corpus.documents(("saved",), home, field="content")] == TEXTS
    copy = tmp_path / "copy"
    shutil.copytree(home, copy)
    hashes = [json_out(cli(where, "prepare", "EXP-001", "--json"))["data_hash"] for where in (home, copy)]
    assert hashes[0] == hashes[1]
    result = octlm(home, "verify-resume", "EXP-001", "--split-at", "4", "--until", "8", "--json")
    assert result.returncode == 0 and json.loads(result.stdout)["identical"], result.stderr
    datasets.DatasetDict({"train": saved, "test": saved}).save_to_disk(str(home / "both"))
    with pytest.raises(BadInput, match=r"both holds a DatasetDict \(splits: test, train\); name one split's folder"):
        corpus.documents(("both",), home, field="content")


@pytest.mark.parametrize("name", [name for name, row in FORMATS.items() if "pyarrow" in row.needs])
def test_an_empty_shard_is_one_line_naming_it_and_trains_nothing(name: str, tmp_path: Path) -> None:
    """A Parquet or Arrow file of no rows among others is refused in one line naming it (exit 2), not read as
    nothing; its schema's text columns are named where the field is not one of them."""
    home, made = home_with(tmp_path, name)
    empty = FORMATS[name].write(tmp_path, [], "body")
    files = [empty] if empty.is_file() else sorted(p for p in empty.iterdir() if p.suffix == ".arrow")
    shutil.move(files[0], made.parent / f"empty{''.join(files[0].suffixes)}")
    config = yaml.safe_load((home / "experiments" / "EXP-001.yaml").read_text())
    config["data"]["sources"].append(f"empty{''.join(files[0].suffixes)}")
    (home / "experiments" / "EXP-001.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    result = cli(home, "train", "EXP-001", "-q")
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "empty" in result.stderr and "(no rows); drop it from data.sources" in result.stderr
    assert not (home / "checkpoints" / "EXP-001" / "tokenizer.json").exists()
    with pytest.raises(BadInput, match=r"no column 'title' \(its text columns: body\); set data.text_field"):
        corpus.documents((made.relative_to(home).as_posix(),), home, field="title")


MEASURE = """
import sys
from pathlib import Path
from octlm.data import corpus
found = corpus.load((sys.argv[1],), Path(sys.argv[2]), 0.1)
assert len(found.content_hash) == 64  # one pass over every document
for _ in range(2):  # the tokenizer's pass over the training split, then the encoder's over both
    for split in (found.train, found.validation):
        for document in split:
            assert len(document.text.encode()) == document.size
for document in found.train[::-97]:  # the spot checks, out of order
    document.text
print(next(line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:")))  # kB
"""


@pytest.mark.slow
def test_memory_stays_flat_as_a_parquet_corpus_grows_tenfold(tmp_path: Path) -> None:
    """Issue 48: reading a Parquet corpus as preparation reads it (the hash, two passes, the spot checks out of
    order) peaks, for 60 MB of text, within 1.15x of what 6 MB peak: a row group at a time is held, never the file.
    Each in a new process, its peak resident memory as the kernel counts it (``VmHWM``: ``ru_maxrss`` would start
    from this test process's own peak, which a child forked from it inherits)."""
    import random

    import pyarrow as pa
    import pyarrow.parquet as pq

    words = CORPUS.split()
    peaks = []
    for megabytes in (6, 60):
        rows = megabytes * 1_000_000 // 6_000
        texts = [" ".join(random.Random(i).choices(words, k=1000)) for i in range(rows)]  # about 6 KB each
        pq.write_table(pa.table({"text": texts}), tmp_path / f"{megabytes}.parquet", row_group_size=128)
        del texts
        command = [sys.executable, "-c", MEASURE, f"{megabytes}.parquet", str(tmp_path)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=True)
        peaks.append(int(done.stdout))
    assert peaks[1] <= 1.15 * peaks[0], peaks
