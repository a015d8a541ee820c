"""Corpus sources: the split by name, paths, globs and their errors, the frozen builtin:docs snapshot."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import cli

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


def test_a_folder_of_extensionless_text_and_a_glob_of_python_sources_train_as_they_are(home: Path) -> None:
    """Issue 48 item 1: any regular file that decodes as text is read, whatever its name: a folder of license files
    without an extension (its binary file skipped and counted, its hidden file and version-control folder left out)
    and a glob of ``.py`` files each train, and ``new`` accepts them by the same rule (``sources.check_readable``)."""
    licenses = home / "licenses"
    (licenses / ".git" / "objects").mkdir(parents=True)
    (licenses / "LICENSE").write_text("Permission is hereby granted, free of charge, to any person obtaining a copy\n")
    (licenses / "COPYING").write_text("This program is free software: you can redistribute it and/or modify it\n")
    (licenses / "NOTICE.rst").write_text("Notices of the works this folder's works are made from, with é and ü.\n")
    (licenses / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR")
    (licenses / ".DS_Store").write_text("a hidden file, left out\n")
    (licenses / ".git" / "objects" / "HEAD").write_text("ref: refs/heads/main\n")
    (home / "src" / "pkg").mkdir(parents=True)
    (home / "src" / "pkg" / "__init__.py").write_text('"""A package."""\n\nVALUE = 1\n')
    (home / "src" / "pkg" / "tool.py").write_text("def double(x):\n    return 2 * x\n")
    (home / "src" / "pkg" / "tool.pyc").write_bytes(b"\xa7\r\r\n\0\0\0\0compiled")  # not matched by the glob
    found = corpus.load(("licenses",), home, 0.2)
    names = sorted(d.name for d in (*found.train, *found.validation))
    assert names == ["licenses/COPYING", "licenses/LICENSE", "licenses/NOTICE.rst"] and found.skipped == 1
    sources = corpus.documents(("src/**/*.py",), home)
    assert [d.name for d in sources] == ["src/pkg/__init__.py", "src/pkg/tool.py"]
    assert sources[1].text == "def double(x):\n    return 2 * x\n"
    for source, detail in (("licenses", "3 documents, 1 binary file skipped"), ("src/**/*.py", "2 documents")):
        made = cli(home, "new", "--from", "EXP-001", "--set", f"data.sources=[{source}]")
        assert made.exit_code == 0, made.stderr
        experiment = made.stdout.strip()
        trained = cli(home, "train", experiment, "--until", "2")
        assert trained.exit_code == 0, trained.stderr
        assert f"reading corpus: 0.0 MB, {detail}" in trained.stderr, trained.stderr
