"""Corpus sources: the split by name, paths, globs and their errors, the frozen builtin:docs snapshot."""

from __future__ import annotations

from pathlib import Path

import pytest

from octlm.core.errors import BadInput
from octlm.data import corpus


def test_split_is_deterministic_by_name(tmp_path: Path) -> None:
    docs = [corpus.Document(f"doc{i}", "text") for i in range(50)]
    first = corpus.split(docs, 0.2)
    second = corpus.split(list(reversed(docs)), 0.2)
    assert {d.name for d in first.validation} == {d.name for d in second.validation}
    assert first.validation and first.train


def test_corpus_sources_and_their_errors(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("hello")
    (tmp_path / "b.jsonl").write_text('{"text": "one"}\n{"text": "two"}\n')
    found = corpus.documents(("a.txt", "b.jsonl"), tmp_path)
    assert [d.text for d in found] == ["hello", "one", "two"]
    assert any(d.name.startswith("builtin:docs/") for d in corpus.documents(("builtin:docs",), tmp_path))
    (tmp_path / "bad.jsonl").write_text('{"text": "ok"}\n{"title": "no text"}\n')
    (tmp_path / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    (tmp_path / "empty.txt").write_text("")
    cases = [
        (("missing.txt",), "missing.txt does not exist"),
        (("bad.jsonl",), 'bad.jsonl:2: no "text" field'),
        (("latin1.txt",), "latin1.txt: not UTF-8"),
        (("empty.txt",), "the corpus is empty"),
        (("nothing-*.txt",), "matches no text or data file"),
        (("builtin:web",), "unknown builtin"),
    ]
    for sources, fragment in cases:
        with pytest.raises(BadInput, match=None) as caught:
            corpus.documents(sources, tmp_path)
        assert fragment in str(caught.value), (sources, str(caught.value))


def test_builtin_docs_is_a_frozen_snapshot(tmp_path: Path) -> None:
    """builtin:docs never follows octlm's code: its bytes, names and content hash are pinned."""
    import hashlib

    payload = corpus.BUILTIN_DOCS_FILE.read_bytes()
    assert hashlib.sha256(payload).hexdigest() == corpus.BUILTIN_DOCS_SHA256
    assert corpus.BUILTIN_DOCS_SHA256 == "0df360b04e3854c1a3125905fd5dc60022639f55bc2e250287883772ba65cc04"
    found = corpus.load(("builtin:docs",), tmp_path, 0.1)
    assert found.content_hash == "9c716d3bc64b7355379899ecc74ede04c0ad85e0749864779d44578f14d935cd"
    # The seed's property: the first training block opens with the notebook's title.
    assert found.train[0].text.startswith("# Miniature modern LLM stack from first principles\n")


def test_a_damaged_builtin_snapshot_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from octlm.core.errors import Refused

    damaged = tmp_path / "docs-v1.jsonl"
    damaged.write_bytes(corpus.BUILTIN_DOCS_FILE.read_bytes().replace(b"Miniature", b"Miniscule", 1))
    monkeypatch.setattr(corpus, "BUILTIN_DOCS_FILE", damaged)
    with pytest.raises(Refused, match="does not match its checksum"):
        corpus.documents(("builtin:docs",), tmp_path)
