from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import cli, json_out, octlm, write_experiment

from octlm.core import layout


def test_new_writes_yaml_registers_and_prints_the_id(tmp_path: Path) -> None:
    result = cli(tmp_path, "new", "--preset", "day1", "--description", "first try")
    assert result.exit_code == 0
    assert result.stdout.strip() == "EXP-001"
    assert (tmp_path / "experiments" / "EXP-001.yaml").exists()
    listed = json_out(cli(tmp_path, "show", "--json"))
    assert listed["schema_version"] == 1
    assert [(e["id"], e["description"], e["status"]) for e in listed["experiments"]] == [
        ("EXP-001", "first try", "new")
    ]


def test_new_json_and_from_and_overrides(tmp_path: Path) -> None:
    first = json_out(cli(tmp_path, "new", "EXP-010", "--set", "training.steps=300", "--json"))
    assert first["id"] == "EXP-010" and first["config"]["training"]["steps"] == 300
    second = json_out(cli(tmp_path, "new", "--from", "EXP-010", "--set", "training.learning_rate=0.001", "--json"))
    assert second["id"] == "EXP-011"
    assert second["config"]["training"]["steps"] == 300
    assert second["config"]["training"]["learning_rate"] == 0.001
    assert second["config_hash"] != first["config_hash"]


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["new", "EXP-001"], "already exists"),
        (["new", "../x"], "malformed experiment ID"),
        (["new", "/etc"], "malformed experiment ID"),
        (["new", "EXP-1/.."], "malformed experiment ID"),
        (["new", "EXP-\x00"], "malformed experiment ID"),
        (["new", "--preset", "day9"], "unknown preset 'day9'"),
        (["new", "--set", "training.warmup_steps=999"], "training.warmup_steps: must be below"),
        (["new", "--set", "nonsense"], "expected KEY=VALUE"),
        (["new", "--set", "preset=day9"], "unknown preset 'day9'"),
        (["new", "--from", "EXP-404"], "unknown experiment EXP-404"),
        (["show", "EXP-404"], "unknown experiment EXP-404"),
        (["show", "EXP-abc"], "show 'EXP-abc': not an experiment ID, and no sweep has that name"),
        (
            ["show", "nosuchsweep"],
            "takes an experiment ID (such as EXP-008) or a sweep's name (this home has no sweeps)",
        ),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path: Path, args: list[str], fragment: str) -> None:
    assert cli(tmp_path, "new").exit_code == 0  # EXP-001 exists
    before = sorted(p.name for p in (tmp_path / "experiments").iterdir())
    result = cli(tmp_path, *args)
    assert result.exit_code == 2, result.stderr
    assert fragment in result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert sorted(p.name for p in (tmp_path / "experiments").iterdir()) == before


def test_show_detail_lists_config_and_fingerprint(tmp_path: Path) -> None:
    cli(tmp_path, "new", "--preset", "day1")
    detail = json_out(cli(tmp_path, "show", "EXP-001", "--json"))
    assert detail["id"] == "EXP-001"
    assert detail["config"]["training"]["steps"] == 200
    assert len(detail["fingerprints"]["config"]) == 64
    assert detail["runs"] == [] and detail["checkpoints"] == []
    text = cli(tmp_path, "show", "EXP-001")
    assert text.exit_code == 0 and "training.learning_rate" in text.stdout


def test_shell_script_flow_from_any_subfolder(tmp_path: Path) -> None:
    script = (
        "set -e\nid=$(octlm new --preset day1)\nmkdir -p deep/er && cd deep/er\n"
        "octlm show --json > ../../listing.json\necho $id\n"
    )
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    env.pop("OCTLM_HOME", None)
    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "EXP-001"
    listing = json.loads((tmp_path / "listing.json").read_text())
    assert listing["home"] == str(tmp_path.resolve())
    assert [e["id"] for e in listing["experiments"]] == ["EXP-001"]


@pytest.mark.parametrize(
    "args", [["--help"], ["show"], ["new", "--preset", "day1"], ["show", "EXP-001"], ["config", "keys", "--json"]]
)
def test_light_commands_never_import_torch_or_tokenizers(tmp_path: Path, args: list[str]) -> None:
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "EXP-001.yaml").write_text("preset: day1\n")
    code = (
        "import sys, runpy\n"
        f"sys.argv = ['octlm', '--home', {str(tmp_path)!r}, *{args!r}]\n"
        "try:\n    runpy.run_module('octlm', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "sys.stderr.write('IMPORTED:' + ','.join(m for m in ('torch', 'tokenizers') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stderr.strip().endswith("IMPORTED:"), done.stderr


def test_home_from_environment_and_flag(tmp_path: Path) -> None:
    done = octlm(None, "new", env={"OCTLM_HOME": str(tmp_path / "h")}, cwd=tmp_path)
    assert done.returncode == 0 and (tmp_path / "h" / "experiments" / "EXP-001.yaml").exists()


def test_config_keys_lists_every_key_with_type_default_and_fingerprint(tmp_path: Path) -> None:
    result = cli(tmp_path, "config", "keys", "--json")
    assert result.exit_code == 0, result.stderr
    described = json_out(result)
    assert described["schema_version"] == 1
    keys = {item["key"]: item for item in described["keys"]}
    assert all(set(item) == {"key", "type", "default", "fingerprinted", "doc"} for item in keys.values())
    assert keys["training.steps"] == {**keys["training.steps"], "type": "int", "default": 200, "fingerprinted": True}
    assert keys["training.eval_interval"]["fingerprinted"] is False  # bookkeeping never blocks a resume
    assert keys["training.steps"]["doc"]
    text = cli(tmp_path, "config", "keys")
    assert text.exit_code == 0 and not (tmp_path / "registry.db").exists()
    header, *lines = text.stdout.splitlines()
    assert header.split() == ["key", "type", "default", "fingerprinted", "help"]
    assert len(lines) == len(keys)
    steps = next(line for line in lines if line.startswith("training.steps "))
    assert steps.split()[:4] == ["training.steps", "int", "200", "yes"]


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["show", "--json", "--csv"], "--json and --csv cannot be used together"),
        (["show", "--columns", "colour"], "--columns colour: unknown column"),
        (["show", "--sort", "colour"], "--sort colour: unknown column"),
        (["show", "--limit", "-1"], "--limit -1: must not be negative"),
        (["show", "EXP-001", "EXP-404", "--plot", "--json"], "unknown experiment EXP-404"),
    ],
)
def test_show_option_errors_are_exit_2(tmp_path: Path, args: list[str], fragment: str) -> None:
    assert cli(tmp_path, "new").exit_code == 0
    result = cli(tmp_path, *args)
    assert result.exit_code == 2 and fragment in result.stderr and result.stdout == ""


def test_show_without_a_registry_lists_the_files_and_creates_nothing(tmp_path: Path) -> None:
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "EXP-007.yaml").write_text("preset: day1\n")
    listed = json_out(cli(tmp_path, "show", "--json"))
    assert [(e["id"], e["status"]) for e in listed["experiments"]] == [("EXP-007", "new")]
    detail = json_out(cli(tmp_path, "show", "EXP-007", "--json"))
    assert detail["status"] == "new" and detail["runs"] == [] and detail["verifications"] == []
    assert not (tmp_path / "registry.db").exists()


def snapshot(home: Path) -> list[tuple[str, int]]:
    """Every path under the home with its modification time: what "nothing was written" compares."""
    return sorted((str(p.relative_to(home)), p.lstat().st_mtime_ns) for p in home.rglob("*"))


def fake_checkpoint(home: Path, experiment_id: str, step: int) -> None:
    """A checkpoint file with its checksum file, enough for ``new --init-from`` (which reads only those, torch-free)."""
    path = layout.checkpoint_path(home / "checkpoints" / experiment_id, step)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"weights")
    layout.write_sidecar(path, hashlib.sha256(b"weights").hexdigest())


GRID = ("--grid", "training.learning_rate=1e-3,3e-4")
NOTHING = "nothing holds no text or data file (2 binary files skipped)"


def write_nothing_readable(home: Path) -> None:
    """A folder of files none of which is read: two binary ones (skipped and counted), a hidden text file and a
    version-control folder's (left out)."""
    (home / "nothing" / "deeper").mkdir(parents=True)
    (home / "nothing" / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR")
    (home / "nothing" / "deeper" / "weights.bin").write_bytes(bytes(range(256)))
    (home / "nothing" / ".notes.txt").write_text("a hidden file\n")
    (home / "nothing" / ".git").mkdir()
    (home / "nothing" / ".git" / "HEAD").write_text("ref: refs/heads/main\n")


@pytest.mark.parametrize(
    "args, named",
    [
        (["new", "--set", "data.sources=[nothing]"], NOTHING),  # a folder of binary, hidden and VCS files
        (["new", "--set", "data.sources=nothing"], NOTHING),  # as one string
        (["new", "--set", "data.sources=[nothing/*]"], "'nothing/*' matches no text or data file (1 binary file"),
        (["new", "--set", "data.sources=[notes/*.md]"], "'notes/*.md' matches no text or data file"),  # nothing
        (["new", "--set", "data.sources=[corpus/*.txt, gone.txt]"], "gone.txt does not exist"),  # one of two
        (["new", "--set", "data.sources=[nothing/image.png]"], "image.png: not UTF-8 text (a NUL byte at offset 8)"),
        (["new", "EXP-002", "--from", "EXP-001", "--set", "data.sources=[nothing]"], NOTHING),
        (["new", "--from", "EXP-003"], "gone/*.txt' matches no text"),  # copied from one whose data went away
        (["new", "--seeds", "2", "--set", "data.sources=[nothing]"], NOTHING),
        (["new", "--init-from", "EXP-001@4", "--set", "data.sources=[nothing]"], NOTHING),
        (["sweep", "new", "s", "--from", "EXP-001", *GRID, "--set", "data.sources=[nothing]"], "nothing holds no"),
        (
            ["sweep", "new", "s", "--from", "EXP-001", "--grid", "data.sources=corpus,nothing"],
            "data.sources=['nothing']",
        ),
        (["sweep", "new", "s", "--from", "EXP-003", *GRID], "gone/*.txt' matches no text"),
    ],
)
def test_new_refuses_data_sources_that_hold_nothing_readable_and_writes_nothing(
    home: Path, args: list[str], named: str
) -> None:
    """Issue 45 item 4: ``new`` (with ``--set``, ``--from``, ``--seeds``, ``--init-from``) and ``sweep new`` (with
    ``--set`` or ``--grid``) refuse sources that hold nothing ``train`` could read: one line naming the source, exit 2,
    and nothing written (no YAML, no registry, no identity, no fork reference), no ID consumed; not a warning and a
    failure at ``train``."""
    write_nothing_readable(home)
    write_experiment(home, "EXP-003", data={"sources": ["gone/*.txt"]})
    fake_checkpoint(home, "EXP-001", 4)
    before = snapshot(home)
    refused = cli(home, *args)
    assert refused.exit_code == 2, refused.stdout + refused.stderr
    line = refused.stderr.strip()
    assert line.count("\n") == 0 and line.startswith("octlm: error: ") and "Traceback" not in line
    assert named in line and "data.sources" in line and "nothing was written" in line, line
    assert snapshot(home) == before
    assert cli(home, "new").stdout.strip() == "EXP-004"  # the next ID, as if nothing had been asked


def test_an_id_freed_by_rm_is_never_given_again(tmp_path: Path) -> None:
    """Issue 45 item 5: ``rm`` of the newest experiments frees their numbers no more: the next ``new``, ``new
    --seeds``, a sweep's trials and another prefix each take a number never given in this home, so a note or a
    script that named a removed experiment never names another. A name asked for (``new EXP-003``) is the user's."""
    assert [cli(tmp_path, "new").stdout.strip() for _ in range(3)] == ["EXP-001", "EXP-002", "EXP-003"]
    for experiment_id in ("EXP-003", "EXP-002"):
        assert cli(tmp_path, "rm", experiment_id, "--yes").exit_code == 0
    assert cli(tmp_path, "new").stdout.strip() == "EXP-004"
    assert cli(tmp_path, "rm", "EXP-004", "--yes").exit_code == 0
    replicates = cli(tmp_path, "new", "--seeds", "2", "--json")
    assert json_out(replicates)["ids"] == ["EXP-005", "EXP-006"], replicates.stdout
    for experiment_id in ("EXP-005", "EXP-006"):
        assert cli(tmp_path, "rm", experiment_id, "--yes").exit_code == 0
    swept = cli(tmp_path, "sweep", "new", "s", "--from", "EXP-001", "--grid", "training.learning_rate=1e-3,3e-4")
    assert swept.exit_code == 0, swept.stderr
    trials = [t["id"] for t in json_out(cli(tmp_path, "sweep", "status", "s", "--json"))["trials"]]
    assert sorted(trials) == ["EXP-007", "EXP-008"]
    assert cli(tmp_path, "new", "--id-prefix", "BOX-").stdout.strip() == "BOX-001"
    assert cli(tmp_path, "rm", "BOX-001", "--yes").exit_code == 0
    assert cli(tmp_path, "new", "--id-prefix", "BOX-").stdout.strip() == "BOX-002"
    for experiment_id in ("EXP-001", *trials):  # an empty home keeps its numbers too
        assert cli(tmp_path, "rm", experiment_id, "--yes").exit_code == 0, experiment_id
    assert cli(tmp_path, "new").stdout.strip() == "EXP-009"
    assert cli(tmp_path, "new", "EXP-003").stdout.strip() == "EXP-003"  # asked for by name: given, as asked
    assert cli(tmp_path, "new").stdout.strip() == "EXP-010"


def test_sweep_extend_refuses_a_source_that_holds_nothing_and_writes_nothing(home: Path) -> None:
    """Issue 45 item 4, on ``sweep extend``: a grid value added for ``data.sources`` is checked as ``sweep new``
    checks it, before any trial's file is written."""
    made = cli(home, "sweep", "new", "s", "--from", "EXP-001", "--grid", "data.sources=corpus")
    assert made.exit_code == 0, made.stderr
    write_nothing_readable(home)
    before = snapshot(home)
    refused = cli(home, "sweep", "extend", "s", "--grid", "data.sources=nothing")
    assert refused.exit_code == 2, refused.stdout + refused.stderr
    line = refused.stderr.strip()
    assert line.count("\n") == 0 and NOTHING in line and "nothing was written" in line, line
    assert snapshot(home) == before
