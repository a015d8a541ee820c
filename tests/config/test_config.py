from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from octlm import config as cfg
from octlm.config.presets import PRESETS, preset
from octlm.core.errors import ConfigError


def load_text(tmp_path: Path, text: str) -> cfg.Config:
    path = tmp_path / "EXP-001.yaml"
    path.write_text(text)
    return cfg.load(path)


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("training: {steps: 10, warmup_steps: 10}", "training.warmup_steps: must be below training.steps"),
        ("model: {d_model: 30, n_heads: 4}", "model.n_heads: must divide model.d_model"),
        ("training: {learning_rate: 1.0e-4, min_learning_rate: 1.0e-3}", "training.min_learning_rate: must not exceed"),
        ("model: {n_layers: 0}", "model.n_layers: must be positive"),
        ("training: {batch_size: -1}", "training.batch_size: must be positive"),
        ("training: {steps: many}", "training.steps: expected an integer"),
        ("training: {steps: 10.5}", "training.steps: expected an integer"),
        ("training: {learning_rate: fast}", "training.learning_rate: expected a number"),
        ("training: {precision: fp8}", "training.precision: must be one of fp32, bf16, fp16"),
        ("model: {dropout: true}", "model.dropout: expected a number"),
        ("model: {colour: blue}", "model.colour: unknown key"),
        ("optimiser: {lr: 1}", "optimiser: unknown key"),
        ("data: {sources: []}", "data.sources: expected a non-empty list"),
        ("data: {validation_fraction: 1.5}", "data.validation_fraction: must be at least 0 and below 1"),
        ("tokenizer: {vocab_size: 100}", "tokenizer.vocab_size: must be at least 260"),
        ("model: 5", "model: expected a mapping"),
        ("checkpoint: {keep: 0}", "checkpoint.keep: must be positive"),
        ("training: {steps: [1, 2]", "malformed YAML"),
        ("preset: day9", "unknown preset 'day9'"),
    ],
)
def test_bad_values_name_file_and_key(tmp_path: Path, text: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_text(tmp_path, text)
    message = str(caught.value)
    assert message.startswith("EXP-001.yaml"), message
    assert fragment in message
    assert "\n" not in message


def test_yaml_exponent_without_dot_is_a_number(tmp_path: Path) -> None:
    # YAML 1.1 reads 3e-4 as text; a learning rate written that way still means 0.0003.
    config = load_text(tmp_path, "training: {learning_rate: 3e-4, min_learning_rate: 3e-5}")
    assert config.training.learning_rate == pytest.approx(3e-4)


def test_fingerprint_ignores_key_order_and_filled_defaults(tmp_path: Path) -> None:
    a = cfg.from_dict({"model": {"d_model": 64, "n_heads": 4}, "training": {"steps": 50, "warmup_steps": 5}})
    b = cfg.from_dict(
        {"training": {"warmup_steps": 5, "steps": 50}, "model": {"n_heads": 4, "d_model": 64, "n_layers": 4}}
    )
    assert a.fingerprint == b.fingerprint
    assert a.canonical_json() == b.canonical_json()


def test_fingerprint_excludes_bookkeeping_but_not_trajectory() -> None:
    base = cfg.from_dict({})
    cadence = cfg.from_dict(
        {
            "id": "EXP-002",
            "description": "x",
            "training": {"eval_interval": 7, "eval_blocks": 3},
            "checkpoint": {"interval": 9, "keep": 1},
        }
    )
    assert base.fingerprint == cadence.fingerprint
    assert base.canonical_json() != cadence.canonical_json()
    for change in (
        {"training": {"learning_rate": 1e-3}},
        {"training": {"seed": 2}},
        {"model": {"n_layers": 3}},
        {"data": {"sources": ["x.txt"]}},
        {"tokenizer": {"vocab_size": 512}},
    ):
        assert cfg.from_dict(change).fingerprint != base.fingerprint, change


def test_fingerprint_is_stable_across_processes() -> None:
    # A fixed value: any change to what is fingerprinted must be deliberate.
    config = cfg.from_dict(preset("day1"))
    again = cfg.from_dict(yaml.safe_load(cfg.to_yaml(config)))
    assert config.fingerprint == again.fingerprint


def test_overrides_are_typed_and_validated() -> None:
    raw = cfg.apply_overrides(
        preset("day1"), ["training.steps=400", "training.learning_rate=1e-3", "data.sources=[a.txt, b.txt]"]
    )
    config = cfg.from_dict(raw, "--set")
    assert config.training.steps == 400
    assert config.training.learning_rate == 1e-3
    assert config.data.sources == ("a.txt", "b.txt")
    with pytest.raises(ConfigError, match="training.steps: expected an integer"):
        cfg.from_dict(cfg.apply_overrides(preset("day1"), ["training.steps=lots"]), "--set")
    with pytest.raises(ConfigError, match="--set training.nope: unknown key"):
        cfg.apply_overrides(preset("day1"), ["training.nope=1"])
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        cfg.apply_overrides(preset("day1"), ["training.steps"])


def test_presets_follow_the_seed() -> None:
    day1 = cfg.from_dict(preset("day1"))
    t = day1.training
    assert (t.steps, t.warmup_steps, t.learning_rate, t.min_learning_rate, t.batch_size) == (200, 20, 3e-4, 3e-5, 8)
    assert (day1.model.context_length, t.weight_decay, t.grad_clip, t.eval_interval, t.precision) == (
        128,
        0.1,
        1.0,
        20,
        "fp32",
    )
    day4 = cfg.from_dict(preset("day4"))
    assert (day4.training.steps, day4.training.warmup_steps, day4.training.precision) == (24000, 500, "bf16")
    for name in PRESETS:
        training = cfg.from_dict(preset(name)).training
        assert training.min_learning_rate == pytest.approx(0.1 * training.learning_rate), name


def test_diff_names_each_changed_field() -> None:
    a = cfg.from_dict({}).to_dict()
    b = cfg.from_dict({"training": {"learning_rate": 1e-3}}).to_dict()
    assert cfg.diff(a, b) == ["training.learning_rate: 0.0003 -> 0.001"]


# The fingerprint of EXP-008 (preset day1) since the first release; every checkpoint of it records this value.
EXP_008_FINGERPRINT = "659b88c4aea86494e43403d12fe222236d6317071b706ea724beed1566db3401"


def test_fingerprint_of_exp_008_is_pinned() -> None:
    config = cfg.load(Path(__file__).resolve().parents[2] / "experiments" / "EXP-008.yaml")
    assert config.fingerprint == EXP_008_FINGERPRINT
    assert cfg.from_dict(preset("day1")).fingerprint == EXP_008_FINGERPRINT


def test_replace_validates_like_loading() -> None:
    config = cfg.from_dict(preset("day1"))
    with pytest.raises(ConfigError) as caught:
        config.replace(training=dataclasses.replace(config.training, steps=10))
    assert str(caught.value) == "training.warmup_steps: must be below training.steps (10), got 20"
    with pytest.raises(ConfigError, match=r"^training.precision: must be one of fp32, bf16, fp16, got 'fp8'$"):
        dataclasses.replace(config.training, precision="fp8")
    with pytest.raises(ConfigError, match=r"^model.n_heads: must divide model.d_model \(128\), got 3$"):
        cfg.ModelConfig(n_heads=3)
    with pytest.raises(ConfigError, match=r"^training: expected a TrainingConfig"):
        config.replace(training={"steps": 10})
    with pytest.raises(ConfigError, match=r"^preset: unknown preset 'day9'"):
        config.replace(preset="day9")


def test_construction_normalises_like_loading() -> None:
    # Values typed in code land as loading would store them, so the fingerprint cannot tell them apart.
    loaded = cfg.from_dict({"data": {"sources": ["a.txt"]}, "training": {"learning_rate": 1.0e-3}})
    sources: list[str] = ["a.txt"]  # a list, as YAML gives it: stored as a tuple
    built = cfg.Config(data=cfg.DataConfig(sources=sources), training=cfg.TrainingConfig(learning_rate=1e-3))
    assert built.data.sources == ("a.txt",)
    assert cfg.TrainingConfig(learning_rate=1).learning_rate == 1.0
    assert isinstance(cfg.TrainingConfig(learning_rate=1).learning_rate, float)
    assert built.canonical_json() == loaded.canonical_json()
    assert built.fingerprint == loaded.fingerprint


def test_with_keys_changes_dotted_keys_and_validates() -> None:
    config = cfg.from_dict(preset("day1"))
    shorter = config.with_keys({"training.steps": 300, "training.warmup_steps": 30})
    assert (shorter.training.steps, shorter.training.warmup_steps) == (300, 30)
    assert shorter.training.learning_rate == config.training.learning_rate
    assert config.with_keys({"checkpoint.interval": 200}).checkpoint.interval == 200
    assert config.with_keys({"checkpoint.interval": 200}).fingerprint == config.fingerprint
    mixed = config.with_keys({"training.precision": "bf16", "training.compile": False, "id": "EXP-042"})
    assert (mixed.training.precision, mixed.training.compile, mixed.id) == ("bf16", False, "EXP-042")
    assert config.with_keys({}) == config
    # The same messages as `octlm new --set KEY=VALUE`.
    for values, message in [
        ({"training.nope": 1}, "--set training.nope: unknown key; known keys of training: steps, "),
        ({"optimiser.lr": 1}, "--set optimiser.lr: unknown key; use SECTION.KEY with a section of data, "),
        ({"training.steps": "lots"}, "--set: training.steps: expected an integer, got text ('lots')"),
        ({"training.steps": 10}, "--set: training.warmup_steps: must be below training.steps (10), got 20"),
        ({"training.precision": "fp8"}, "--set: training.precision: must be one of fp32, bf16, fp16, got 'fp8'"),
    ]:
        with pytest.raises(ConfigError) as caught:
            config.with_keys(values)
        assert str(caught.value).startswith(message), caught.value
        via_set = [f"{k}={v}" for k, v in values.items()]
        with pytest.raises(ConfigError) as from_set:
            cfg.from_dict(cfg.apply_overrides(preset("day1"), via_set), "--set")
        assert str(from_set.value) == str(caught.value)
    with pytest.raises(ConfigError, match=r"^overfit: training.steps: must be positive, got 0$"):
        config.with_keys({"training.steps": 0, "training.warmup_steps": 0}, origin="overfit")


def test_describe_keys_covers_every_key_in_file_order() -> None:
    rows = cfg.describe_keys()
    assert all(list(row) == ["key", "type", "default", "fingerprinted", "doc"] for row in rows)
    keys = [row["key"] for row in rows]
    assert keys == list(cfg.TOP_LEVEL) + [k for k in cfg.flatten(cfg.Config().to_dict()) if "." in k]
    by_key = {row["key"]: row for row in rows}
    assert by_key["training.steps"] == {
        "key": "training.steps",
        "type": "int",
        "default": 200,
        "fingerprinted": True,
        "doc": "optimizer steps in the run; at most 1,000,000,000",
    }
    assert by_key["data.sources"]["type"] == "list of str"
    assert by_key["data.sources"]["default"] == ["builtin:docs"]
    assert by_key["training.precision"]["doc"] == "fp32, bf16 or fp16 (autocast)"
    assert by_key["training.device"]["doc"] == "auto, cpu, cuda or mps"
    assert by_key["preset"]["doc"].startswith("day1, day2, day3 or day4")
    assert by_key["training.compile"]["fingerprinted"] is True  # fingerprinted once it differs from its default
    assert {k for k, row in by_key.items() if not row["fingerprinted"]} == cfg.BOOKKEEPING
    assert {row["type"] for row in rows} == {"int", "float", "bool", "str", "list of str"}
    assert all(row["doc"] and "{" not in row["doc"] for row in rows)
    json.dumps(rows)  # JSON-friendly throughout
    assert [row["default"] for row in rows if "." in row["key"]] == [
        v for k, v in cfg.flatten(cfg.Config().to_dict()).items() if "." in k
    ]


def test_config_module_does_not_import_torch() -> None:
    code = "import sys, octlm.config as c; c.describe_keys(); print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


@pytest.mark.parametrize(
    "description",
    ["plain", "yes", "null", "1e-3", "a: b # c", "naïve — ünïcode ✓", "x" * 200, "long words " * 30, "tab\t", "'\""],
)
def test_the_config_file_is_the_same_text_from_libyaml_and_pure_python(description: str) -> None:
    """``to_yaml`` writes with libyaml's emitter where there is one: the text is what the pure-Python emitter writes,
    and it reads back as the same config."""
    import yaml

    from octlm import config as cfg
    from octlm.config import files

    config = cfg.from_dict(preset("day1")).replace(description=description)
    written = cfg.to_yaml(config)
    body = config.to_dict()
    ordered = {k: body[k] for k in files.TOP_LEVEL if body.get(k)}
    ordered.update({k: body[k] for k in files.SECTIONS if k != "init" or config.init != files.InitConfig()})
    assert written == yaml.safe_dump(ordered, sort_keys=False, default_flow_style=False)
    assert files.DUMPER is yaml.CSafeDumper  # the wheel has libyaml: the comparison above is between the two
    assert cfg.from_dict(yaml.safe_load(written)).fingerprint == config.fingerprint


def test_to_dict_is_what_asdict_gives_and_a_new_one_each_call() -> None:
    """to_dict is written out by hand for speed (a sweep of 1,000 trials asks it some 7,000 times): it must give what
    ``dataclasses.asdict`` gives (``data.sources`` and ``tokenizer.special_tokens`` as lists), for every preset and for
    a config with every kind of value, and never share a container with the config or with another call."""
    import dataclasses

    from octlm.config.presets import PRESETS, preset

    configs = [cfg.from_dict(preset(name)) for name in PRESETS]
    configs.append(
        cfg.from_dict({"data": {"sources": ["a.txt", "b/*.txt"]}, "training": {"schedule": "wsd", "threads": 2}})
    )
    configs.append(cfg.from_dict({"tokenizer": {"file": "t.json", "special_tokens": {"pad": "<|endoftext|>"}}}))
    for config in configs:
        expected = dataclasses.asdict(config)
        expected["data"]["sources"] = list(config.data.sources)
        expected["tokenizer"]["special_tokens"] = list(config.tokenizer.special_tokens)
        made = config.to_dict()
        assert made == expected and repr(made) == repr(expected)  # the same values, types and key order
        made["data"]["sources"].append("c.txt")
        made["training"]["steps"] = -1
        assert config.to_dict() == expected
