"""Issue 45 items 7, 8 and 9: what octlm says matches the state. ``show ID`` opens with the very line ``train`` ended
with (one function writes both); the list keeps a proof's verdict beside a later ``eval --on`` and names the corpus
that evaluation read; ``verify-resume --keep-scratch`` says where it kept its scratch homes; ``show NAME`` says what
it takes when nothing has that name; and a count is said with its noun in the right number."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
from conftest import cli, json_out, octlm, write_corpus, write_experiment

from octlm.core.reporting import counted

PACKAGE = Path(__file__).resolve().parents[2] / "octlm"


@pytest.fixture(scope="module")
def proved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict, dict, str]:
    """EXP-001 trained (its summary line), proved by ``verify-resume --keep-scratch --json`` (its document and
    stderr), then evaluated on one document of the corpus with ``eval --on`` (its document)."""
    home = write_corpus(tmp_path_factory.mktemp("words") / "home")
    write_experiment(home)
    trained = cli(home, "train", "EXP-001")
    assert trained.exit_code == 0, trained.stderr
    summary = [line for line in trained.stderr.splitlines() if line.startswith("EXP-001: completed")]
    scratch = {"TMPDIR": str(home.parent)}  # the kept scratch homes go with the test's folder
    proof = octlm(home, "verify-resume", "EXP-001", "--split-at", "6", "--keep-scratch", "--json", env=scratch)
    assert proof.returncode == 0, proof.stderr
    resumed = json.loads(proof.stdout)
    evaluated = cli(home, "eval", "EXP-001", "--on", "corpus/doc1.txt", "--json")
    assert evaluated.exit_code == 0, evaluated.stderr
    return home, summary[-1], resumed, json_out(evaluated), proof.stderr


@pytest.mark.slow
def test_show_opens_with_the_line_train_ended_with(proved: tuple[Path, str, dict, dict, str]) -> None:
    """The whole summary, tokens/s and what evaluation cost included, and still after a proof and an evaluation
    (neither is a training run)."""
    home, summary, *_ = proved
    for part in (
        "train loss ",
        "eval loss ",
        " ± ",
        "perplexity ",
        "bits per byte",
        "epochs",
        "tokens/s",
        "evaluation ",
    ):
        assert part in summary, (part, summary)
    shown = cli(home, "show", "EXP-001")
    assert shown.exit_code == 0, shown.stderr
    assert shown.stdout.splitlines()[0] == summary


@pytest.mark.slow
def test_the_list_keeps_the_proof_and_names_the_corpus_an_evaluation_read(
    proved: tuple[Path, str, dict, dict, str],
) -> None:
    home, _, resumed, evaluated, _ = proved
    assert resumed["verdict"] == "pass"
    figure = f"{evaluated['eval_loss']:.4f} ± {evaluated['eval_loss_se']:.4f}"
    (row,) = json_out(cli(home, "show", "--json"))["experiments"]
    assert row["last_verdict"] == f"verify-resume: pass; eval on corpus/doc1.txt: {figure}"
    table = cli(home, "show").stdout
    assert "verify-resume: pass" in table and f"eval on corpus/doc1.txt: {figure}" in table, table
    listed = json_out(cli(home, "show", "--json", "--where", "last_verdict~verify-resume: pass"))["experiments"]
    assert [r["id"] for r in listed] == ["EXP-001"]  # a filter on the proof still finds it after the evaluation


@pytest.mark.slow
def test_keep_scratch_says_where_the_scratch_homes_are(proved: tuple[Path, str, dict, dict, str]) -> None:
    _, _, resumed, _, stderr = proved
    scratch = Path(resumed["scratch"])
    assert (scratch / "a" / "registry.db").is_file() and (scratch / "b" / "registry.db").is_file()
    assert f"scratch kept at {scratch}: (a) in a/, (b) in b/" in stderr.splitlines(), stderr


def test_show_of_a_name_that_is_nothing_here_says_what_it_takes(home: Path) -> None:
    result = cli(home, "show", "nosuchsweep")
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.strip() == (
        "octlm: error: show 'nosuchsweep': not an experiment ID, and no sweep has that name: `show` takes an "
        "experiment ID (such as EXP-008) or a sweep's name (this home has no sweeps)"
    )
    assert cli(home, "sweep", "new", "lr", "--from", "EXP-001", "--grid", "training.learning_rate=0.001").exit_code == 0
    assert "a sweep's name (the sweeps here: lr)" in cli(home, "show", "nosuchsweep").stderr


def test_counts_say_their_nouns_in_the_right_number(home: Path) -> None:
    assert [counted(n, "thread") for n in (0, 1, 2, 1234)] == ["0 threads", "1 thread", "2 threads", "1,234 threads"]
    assert counted(1, "process", "processes") == "1 process" and counted(3, "process", "processes") == "3 processes"
    made = cli(home, "sweep", "new", "one", "--from", "EXP-001", "--grid", "training.learning_rate=0.001")
    assert made.exit_code == 0, made.stderr
    assert "sweep one: 1 trial; train it with `octlm work one`" in made.stderr, made.stderr
    exported = cli(home, "registry", "export", "-o", str(home / "out.jsonl"))
    assert exported.exit_code == 0 and exported.stdout.startswith("exported 1 experiment to "), exported.stdout


def test_no_message_spells_a_plural_as_s_in_brackets() -> None:
    """``trial(s)``, ``process(es)``: every count goes through ``counted`` instead (``--split-at``'s help names its
    ``Step(s)`` as a metavar does, and is the one left)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        documented = {id(docstring(node)) for node in ast.walk(tree) if docstring(node) is not None}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Constant) or not isinstance(node.value, str) or id(node) in documented:
                continue
            if re.search(r"\w\((s|es)\)", node.value) and not node.value.startswith("Step(s) where run (b)"):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {node.value[:60]!r}")
    for path in sorted((PACKAGE / "views" / "templates").glob("*.j2")):  # the report's words
        found += [f"{path.name}: {m.group(0)!r}" for m in re.finditer(r".{20}\w\((s|es)\)", path.read_text())]
    assert not found, found


def docstring(node: ast.AST) -> ast.Constant | None:
    """The docstring's node of a module, class or function (words about the code, not messages it says)."""
    if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) or not node.body:
        return None
    first = node.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return first.value
    return None
