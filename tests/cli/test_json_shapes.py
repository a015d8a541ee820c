"""Issue 33 items 10 and 11: ``--json`` shapes agree and are written down. ``train --json`` names its figures as
``eval --json`` and ``show --json`` do; the list carries ``eval_loss_se``; every typed document's keys are the ones
``docs/reference/json.md`` (generated from the code) lists, checked against what each command writes. And what a
person sees: ``eval`` says its phases on stderr with ``--json`` too, ``show ID`` opens with a headline, text values
are not quoted, and a sweep's report draws a key swept over 10x on a log axis."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import cli, holds, json_out, octlm, write_experiment


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    from conftest import write_corpus

    home = write_corpus(tmp_path_factory.mktemp("shapes") / "home")
    write_experiment(home, training={"spike_guard": "off"})
    result = cli(home, "train", "EXP-001", "--json")
    assert result.exit_code == 0, result.stderr
    return home, json_out(result)


def test_train_names_its_figures_as_eval_and_show_do(trained: tuple[Path, dict]) -> None:
    home, train = trained
    holds(train, "octlm train ID --json, octlm resume ID --json")
    evaluated = json_out(cli(home, "eval", "EXP-001", "--json"))
    holds(evaluated, "octlm eval ID --json")
    shown = json_out(cli(home, "show", "EXP-001", "--json"))
    holds(shown, "octlm show ID --json")
    holds(shown["fingerprints"], "octlm show ID --json: its fingerprints")
    for part in ("runs", "checkpoints", "verifications"):  # the registry's rows as the store reads them
        assert shown[part], part  # the eval above left its verdict
        for row in shown[part]:
            holds(row, f"octlm show ID --json: each of {part}")
    for name in ("eval_loss", "eval_loss_se", "perplexity", "bits_per_byte"):
        assert train[name] == train["metrics"][name] == shown[name], name
    assert train["step"] == shown["step"] == evaluated["step"] == 12
    listed = json_out(cli(home, "show", "--json"))
    holds(listed, "octlm show --json")
    (row,) = listed["experiments"]
    holds(row, "octlm show --json: each of experiments")
    assert row["eval_loss_se"] == train["eval_loss_se"] is not None


def test_the_other_shapes_hold(trained: tuple[Path, dict]) -> None:
    home, _ = trained
    write_experiment(home, "EXP-002", training={"learning_rate": 1e-3, "spike_guard": "off"})
    assert cli(home, "train", "EXP-002", "-q").exit_code == 0  # evaluated on EXP-001's blocks: a paired comparison
    compared = json_out(cli(home, "show", "EXP-001", "EXP-002", "--json"))
    holds(compared, "octlm show A B --json")
    holds(compared["versus"][0], "octlm show A B --json: each of versus")
    holds(compared["versus"][0]["paired"], "octlm show A B --json: a versus's paired")
    holds(json_out(cli(home, "show", "EXP-001", "--plot", "--json")), "octlm show ID --plot --json")
    assert cli(home, "sweep", "new", "pair", "--from", "EXP-001", "--seeds", "2").exit_code == 0
    holds(json_out(cli(home, "show", "pair", "--json")), "octlm show SWEEP --json")


def test_show_opens_with_a_headline_and_quotes_no_text(trained: tuple[Path, dict]) -> None:
    home, train = trained
    lines = cli(home, "show", "EXP-001").stdout.splitlines()
    assert lines[0].startswith(
        f"EXP-001: completed at step 12/12; train loss {train['train_loss']:.4f}, eval loss {train['eval_loss']:.4f} "
        f"± {train['eval_loss_se']:.4f}, perplexity {train['perplexity']:.2f}, {train['bits_per_byte']:.4f} bits per "
        f"byte; {train['epochs']:.2f} epochs; {train['tokens_per_second']:,.0f} tokens/s; evaluation "
    )
    assert any(line.strip() == "training.spike_guard: off" for line in lines), lines
    assert '"off"' not in "\n".join(lines)


def test_eval_says_its_phases_on_stderr_with_json(trained: tuple[Path, dict]) -> None:
    home, _ = trained
    done = octlm(home, "eval", "EXP-001", "--on", "corpus/*.txt", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["on"] == ["corpus/*.txt"]  # stdout stays JSON
    for phase in ("reading: corpus/*.txt", "encoding: ", "evaluating: "):
        assert phase in done.stderr, done.stderr


def test_a_key_swept_over_ten_times_is_drawn_on_a_log_axis() -> None:
    from octlm.views.report.sweep import _logarithmic

    assert _logarithmic({"grid": {"training.learning_rate": [1e-4, 3e-4, 1e-3]}}, "training.learning_rate")
    assert not _logarithmic({"grid": {"training.learning_rate": [1e-3, 3e-3]}}, "training.learning_rate")
    assert _logarithmic(
        {"ranges": {"training.learning_rate": {"low": 1e-4, "high": 1e-2, "log": False}}}, "training.learning_rate"
    )
    assert not _logarithmic({"grid": {"model.n_layers": [2, 4]}}, "model.n_layers")


def test_archive_tag_and_rm_write_what_the_reference_says(home: Path) -> None:
    """The lifecycle commands' documents (tasks/lifecycle's Archived, Retagged, Removal), from real runs."""
    from conftest import write_experiment as write

    write(home, "EXP-002")
    assert cli(home, "new", "--from", "EXP-002").exit_code == 0  # registered: EXP-003
    holds(json_out(cli(home, "archive", "EXP-002", "--json")), "octlm archive ID --json, octlm unarchive ID --json")
    holds(json_out(cli(home, "unarchive", "EXP-002", "--json")), "octlm archive ID --json, octlm unarchive ID --json")
    holds(json_out(cli(home, "tag", "EXP-002", "+baseline", "--json")), "octlm tag ID --json")
    removed = json_out(cli(home, "rm", "EXP-002", "--yes", "--json"))
    holds(removed, "octlm rm ID --json")
    assert removed["id"] == "EXP-002" and removed["rows"] and removed["kept_files"] is False


def test_the_commands_that_move_and_mend_write_what_the_reference_says(
    trained: tuple[Path, dict], tmp_path: Path
) -> None:
    """sample, export, pack, unpack, registry export and import, doctor, prepare and the sweep commands, each run
    for real on a copy of the trained home and held to docs/reference/json.md."""
    import shutil

    home = tmp_path / "home"
    shutil.copytree(trained[0], home)

    def ran(title: str, *args: str, into: Path = home) -> dict:
        result = cli(into, *args, "--json")
        assert result.exit_code == 0, (args, result.stderr)
        document = json_out(result)
        holds(document, title)
        return document

    ran("octlm sample ID --json", "sample", "EXP-001", "--max-new-tokens", "4")
    ran("octlm export ID DIR --json", "export", "EXP-001", "-o", str(tmp_path / "out"), "--format", "safetensors")
    ran("octlm pack ID FILE --json", "pack", "EXP-001", "-o", str(tmp_path / "one.tar"))
    other = tmp_path / "other"  # a home of its own: this one holds EXP-001 already
    ran("octlm unpack FILE --json", "unpack", str(tmp_path / "one.tar"), into=other)
    ran("octlm registry export -o FILE --json", "registry", "export", "EXP-001", "-o", str(tmp_path / "r.jsonl"))
    imported = ran(
        "octlm registry import FILE --json", "registry", "import", str(tmp_path / "r.jsonl"), "--prefix", "B-"
    )
    for arrival in imported["experiments"]:
        holds(arrival, "octlm registry import FILE --json: each of experiments")
    prepared = ran("octlm prepare ID --json", "prepare", "EXP-001")
    for phase in prepared["phases"]:
        holds(phase, "octlm prepare ID --json: each of phases")
    made = ran("octlm sweep new NAME --json", "sweep", "new", "moved", "--from", "EXP-001", "--seeds", "2")
    holds(made["trials"][0], "octlm sweep new NAME --json: each of trials")
    assert ran("octlm sweep extend NAME --json", "sweep", "extend", "moved", "--seeds", "3")["added"] == 1
    assert ran("octlm sweep retry NAME --json", "sweep", "retry", "moved", "--failed")["trials"] == {}
    ran("octlm sweep pack NAME DIR --json", "sweep", "pack", "moved", "-o", str(tmp_path / "shipped"))
    ran("octlm sweep unpack DIR --json", "sweep", "unpack", str(tmp_path / "shipped"))
    checkup = ran("octlm doctor --json", "doctor")
    for problem in checkup["problems"]:
        holds(problem, "octlm doctor --json: each of problems")
