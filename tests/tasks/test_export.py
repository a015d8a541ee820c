"""``octlm export``: a tiny trained experiment exported in Hugging Face's format loads with ``transformers``
and computes what octlm's model computes (logits within 1e-5, the same 20 greedy tokens); the safetensors
format holds octlm's tensors under octlm's names; every format of the table is a documented choice that writes what
it says and needs its own packages alone; refusals leave nothing behind."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any, get_args

import pytest
import torch
from conftest import cli, json_out, write_corpus, write_experiment
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from octlm.cli.commands.report import FormatOption
from octlm.config import from_dict
from octlm.data.tokenizer import Tokenizer
from octlm.tasks.export import EXPORT_FORMATS
from octlm.train import checkpoint, generate
from octlm.train.model.decoder import Decoder

PROMPT = "The quick"


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """EXP-001 trained for 12 steps, with a context long enough for a prompt and 20 new tokens."""
    home = tmp_path_factory.mktemp("export") / "home"
    write_corpus(home)
    write_experiment(home, "EXP-001", model={"context_length": 32, "n_heads": 4}, training={"batch_size": 2})
    assert cli(home, "train", "EXP-001", "-q").exit_code == 0
    return home


def octlm_model(home: Path, step: int = 12) -> tuple[Decoder, Tokenizer, Any]:
    """octlm's own model and tokenizer at ``step``, read from the checkpoint directly."""
    record = checkpoint.read(home / "checkpoints" / "EXP-001" / f"step-{step:06d}.pt")
    model = Decoder(from_dict(record.config))
    model.load_state_dict(record.model)
    return model.eval(), Tokenizer.load(home / "checkpoints" / "EXP-001" / "tokenizer.json"), record


@pytest.mark.slow
def test_hf_export_computes_what_octlm_computes(trained: Path, tmp_path: Path) -> None:
    out = tmp_path / "hf"
    result = cli(trained, "export", "EXP-001", "-o", str(out), "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["files"] == [
        "README.md",
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    model, tokenizer, record = octlm_model(trained)
    hf = AutoModelForCausalLM.from_pretrained(out).eval()
    hf_tokenizer = AutoTokenizer.from_pretrained(out)
    ids = hf_tokenizer(PROMPT).input_ids
    assert ids == [tokenizer.bos_id, *tokenizer.encode(PROMPT, add_special_tokens=False)]  # <|bos|> first
    with torch.no_grad():
        difference = (model(torch.tensor([ids])) - hf(torch.tensor([ids])).logits).abs().max().item()
    assert difference < 1e-5
    assert len(ids) + 20 <= 32  # within octlm's context, where it sees what transformers sees
    ours = generate.greedy(model, ids, 20, torch.device("cpu"), stop_id=tokenizer.eos_id)
    theirs = hf.generate(torch.tensor([ids]), max_new_tokens=20, do_sample=False)[0].tolist()
    assert theirs == ours
    assert hf_tokenizer.decode(theirs, skip_special_tokens=True) == PROMPT + tokenizer.decode(ours[len(ids) :])
    config = json.loads((out / "config.json").read_text())
    assert config["rms_norm_eps"] == torch.finfo(torch.float32).eps and config["tie_word_embeddings"] is True
    card = (out / "README.md").read_text()
    assert record.fingerprints.config in card and "tiny test experiment" in card and "eval_loss" in card


def test_safetensors_holds_octlm_tensors(trained: Path, tmp_path: Path) -> None:
    out = tmp_path / "weights"
    assert cli(trained, "export", "EXP-001", "--step", "8", "--format", "safetensors", "-o", str(out)).exit_code == 0
    assert sorted(p.name for p in out.iterdir()) == ["model.safetensors"]
    tensors = load_file(out / "model.safetensors")
    _, _, record = octlm_model(trained, step=8)
    assert tensors.keys() == record.model.keys()
    assert all(torch.equal(tensors[name], record.model[name]) for name in tensors)


def test_refusals_say_one_line_and_leave_nothing(trained: Path, tmp_path: Path, monkeypatch) -> None:
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    cases = [
        (("EXP-404", "-o", str(tmp_path / "a")), 2, "unknown experiment EXP-404"),
        (("EXP-001", "--step", "5", "-o", str(tmp_path / "a")), 3, "no checkpoint at step 5"),
        (("EXP-001", "-o", str(full)), 3, "not empty: give --force"),
        (("EXP-001", "-o", str(full / "keep.txt")), 3, "not a folder"),
        (("EXP-001", "--format", "onnx", "-o", str(tmp_path / "a")), 2, "--format onnx"),
        (("EXP-001", "-o", str(trained / "checkpoints" / "EXP-001"), "--force"), 3, "inside the home's checkpoints/"),
    ]
    for args, code, message in cases:
        result = cli(trained, "export", *args)
        assert (result.exit_code, result.stderr.count("\n")) == (code, 1) and message in result.stderr, args
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "transformers" else real(name, *a)
    )
    result = cli(trained, "export", "EXP-001", "-o", str(tmp_path / "a"))
    assert result.exit_code == 2 and "octlm[hf]" in result.stderr
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["full"] and (full / "keep.txt").read_text() == "mine"
    assert cli(trained, "export", "EXP-001", "-o", str(full), "--force").exit_code == 0
    assert "keep.txt" not in {p.name for p in full.iterdir()} and sorted(p.name for p in tmp_path.iterdir()) == ["full"]


@pytest.mark.parametrize(
    "name", list(EXPORT_FORMATS)
)  # every member of the table: a new one is tested without a line here
def test_every_format_of_the_table_is_a_documented_choice_that_needs_its_own_packages_alone(
    name: str, trained: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 47 item 1: each row of the export formats' one table (export.EXPORT_FORMATS) is a choice of ``--format``
    whose help carries the row's own (``export --help``, docs/reference/commands.md); exported with it, the folder
    holds exactly the files ``--json`` names; without one of the packages its row ``needs``, one line names it (exit
    2) and nothing is written, while another format's packages missing change nothing."""
    row, option = EXPORT_FORMATS[name], get_args(FormatOption)[1]
    assert name in option.metavar.split("|") and f"{name}: {row.help}" in option.help
    reference = (Path(__file__).resolve().parents[2] / "docs" / "reference" / "commands.md").read_text()
    assert f"{name}: {row.help}" in " ".join(reference.split())
    real = importlib.util.find_spec
    for package in row.needs:
        monkeypatch.setattr(
            importlib.util,
            "find_spec",
            lambda wanted, *a, hidden=package: None if wanted == hidden else real(wanted, *a),
        )
        result = cli(trained, "export", "EXP-001", "--format", name, "-o", str(tmp_path / "refused"))
        assert (result.exit_code, result.stderr.count("\n")) == (2, 1), result.stderr
        assert f"needs {package}" in result.stderr and "octlm[hf]" in result.stderr
        assert not (tmp_path / "refused").exists()
    others = {package for other in EXPORT_FORMATS.values() for package in other.needs} - set(row.needs)
    monkeypatch.setattr(importlib.util, "find_spec", lambda wanted, *a: None if wanted in others else real(wanted, *a))
    result = cli(trained, "export", "EXP-001", "--format", name, "-o", str(tmp_path / name), "--json")
    assert result.exit_code == 0, result.stderr
    said = json_out(result)
    assert (
        said["format"] == name
        and said["files"]
        and said["files"] == sorted(p.name for p in (tmp_path / name).iterdir())
    )
