"""The samplers' one table (tasks/sweeps/planning/samplers.SAMPLERS, issue 34 item 2, issue 47 item 1). Every row is
a choice of ``sweep new --sampler`` with its words (the option's help and docs/reference/commands.md made from the
table), is documented in the sweeps guide, and makes real trials in a real registry through ``sweep new`` exactly as
its own functions say, counted before they are made. What each test expects is read from the row (what it reads,
what it needs, whether it asks, its configurations), never from its name: a new row is tested without a line added.
The options a row reads are used (each changes what it makes; given to a row that does not read it, refused), no code
outside the table makes configurations (an AST scan), and ``sweep extend`` draws with the sweep's own sampler."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest
from conftest import cli, json_out, write_corpus, write_experiment

from octlm.store.sweeps.specs import check_spec
from octlm.tasks.sweeps.planning import samplers
from octlm.tasks.sweeps.planning.samplers import OPTIONS, SAMPLERS

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
GRID = ["--grid", "model.n_layers=1,2"]  # every sampler crosses (or asks among) the grid's values
VALUES = {  # a value of each option a sampler may read, within what the tiny config takes (its floor is 3e-4)
    "ranges": ["--range", "training.learning_rate=1e-3:1e-2:log"],
    "random": ["--random", "3"],
    "trials": ["--trials", "4"],
    "parallel": ["--parallel", "3"],
    "seed": ["--seed", "5"],
}
OTHER = {"ranges": {"training.learning_rate": {"low": 2e-3, "high": 5e-3, "log": False, "int": False}}, "random": 4}
OTHER |= {"trials": 1, "parallel": 2, "seed": 6}  # each a different value of the key, for a spec


def options(sampler: samplers.SweepSampler) -> list[str]:
    return ["--sampler", sampler.name, *GRID, *(word for key in sampler.reads for word in VALUES[key])]


def swept(home: Path, name: str, *args: str) -> dict:
    made = cli(home, "sweep", "new", name, "--from", "EXP-001", *args, "--json")
    assert made.exit_code == 0, made.stderr
    return json_out(made)


def one_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    write_corpus(tmp_path)
    write_experiment(tmp_path, "EXP-001")
    return tmp_path


@pytest.mark.parametrize("name", list(SAMPLERS))
def test_every_sampler_is_a_choice_with_its_words_and_documented(name: str, tmp_path: Path) -> None:
    sampler = SAMPLERS[name]
    helped = cli(tmp_path, "sweep", "new", "--help").stdout
    option = re.search(r"^\s+--sampler (\S+)", helped, re.M)
    assert option is not None and name in option.group(1).split("|")  # the option's metavar lists it
    flat = " ".join(" ".join(line.strip() for line in helped.splitlines()).split())
    assert f"{name}: {sampler.help}" in flat  # its sentence, from its row
    assert f"--sampler {name}" in (DOCS / "guide" / "sweeps.md").read_text()
    assert f"{name}: {sampler.help}" in " ".join((DOCS / "reference" / "commands.md").read_text().split())


@pytest.mark.parametrize("name", list(SAMPLERS))
def test_every_sampler_makes_real_trials_as_its_row_says(name: str, tiny: Path) -> None:
    """Through ``sweep new``, with the options its row reads: the trials' configurations are its row's ``first``
    (order and values), each with its replicates; counted by its row before they were made (all of them made now
    unless it asks); every value within its range or among its grid values."""
    sampler = SAMPLERS[name]
    said = swept(tiny, name, *options(sampler), "--seeds", "2")
    spec = said["spec"]
    assert spec["sampler"] == name
    wanted = sampler.first(check_spec(spec, "test"))
    made = [trial["params"] for trial in said["trials"]]
    assert made == [cell for cell in wanted for _ in range(2)]  # each configuration, then its replicate
    assert [trial["seed"] for trial in said["trials"]] == [1337, 1338] * len(wanted)
    counted = samplers.size(spec)
    assert counted == sampler.configurations(spec) * 2
    assert len(made) == counted if not sampler.asks else 0 < len(made) <= counted
    for params in made:
        for key, value in params.items():
            if key in spec["ranges"]:
                assert spec["ranges"][key]["low"] <= value <= spec["ranges"][key]["high"], (key, value)
            else:
                assert value in spec["grid"][key], (key, value)
    assert len({repr(sorted(p.items())) for p in made}) == len(wanted) > 1  # it varies something


@pytest.mark.parametrize("name", list(SAMPLERS))
def test_every_key_a_sampler_reads_changes_what_it_makes(name: str, tiny: Path) -> None:
    """``reads`` is used, not decorative: each key it lists changes the configurations (or their count); and each
    it does not list is refused by ``sweep new`` in one line naming the option, nothing written."""
    sampler = SAMPLERS[name]
    spec = check_spec(swept(tiny, name, *options(sampler))["spec"], "test")
    made = (sampler.first(spec), sampler.configurations(spec))
    for key in sampler.reads:
        changed = check_spec({**spec, key: OTHER[key]}, "test")
        assert (sampler.first(changed), sampler.configurations(changed)) != made, key
    for key in set(OPTIONS) - set(sampler.reads):
        refused = cli(tiny, "sweep", "new", "x", "--from", "EXP-001", *options(sampler), *VALUES[key])
        assert refused.exit_code == 2 and f"{OPTIONS[key]} goes with --sampler" in one_line(refused), key
    for keys in sampler.needs:
        without = [w for k in sampler.reads if k not in keys for w in VALUES[k]] + ([] if "grid" in keys else GRID)
        refused = cli(tiny, "sweep", "new", "x", "--from", "EXP-001", "--sampler", name, *without, "--seeds", "2")
        assert refused.exit_code == 2 and f"--sampler {name} needs" in one_line(refused), keys
    assert sorted(p.name for p in (tiny / "experiments").iterdir())[-1] == f"EXP-{1 + len(made[0]):03d}.yaml"


def test_a_sampler_not_in_the_table_is_one_line(tiny: Path) -> None:
    made = cli(tiny, "sweep", "new", "x", "--from", "EXP-001", "--sampler", "cmaes", "--seeds", "2")
    assert made.exit_code == 2
    assert f"--sampler cmaes: choose one of {', '.join(SAMPLERS)}" in made.stderr


# ---------------------------------------------------------------- configurations made only through the table

TABLE = ROOT / "octlm" / "tasks" / "sweeps" / "planning" / "samplers.py"
MEMBERS = {TABLE, TABLE.with_name("asking.py")}  # the table and the Optuna members' asking
API = {"SAMPLERS", "SweepSampler", "OPTIONS", "chosen", "of", "check", "size", "readers", "given"}
HELPERS = {"itertools.product", "random.Random", "random.uniform", "asking.ask"}  # what configurations are made with


def makers(path: Path) -> list[str]:
    """Where ``path`` makes sweep configurations itself: a name of the samplers' module beyond its table's API (its
    members' own functions, or a helper of an older octlm such as ``samplers.configurations``), Optuna's asking, a
    product or a seeded draw in a sweep's module."""
    found, tree = [], ast.parse(path.read_text())
    sweeps = "sweeps" in path.parts
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            dotted = f"{node.value.id}.{node.attr}"
            if node.value.id == "samplers" and node.attr not in API or dotted in HELPERS and sweeps:
                found.append(f"{path.name}:{node.lineno} {dotted}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").endswith(("samplers", "asking")):
            found += [f"{path.name}:{node.lineno} {a.name}" for a in node.names if a.name not in API | {"history"}]
        elif isinstance(node, ast.Import | ast.ImportFrom) and sweeps and "optuna" in ast.unparse(node):
            found.append(f"{path.name}:{node.lineno} optuna")
    return found


def test_no_code_outside_the_table_makes_configurations(tmp_path: Path) -> None:
    """Every module of the package but the table and its Optuna members, parsed: none makes a sweep's configurations
    itself (before: ``sweep extend`` drew random ones with ``samplers.configurations`` whatever the sweep's sampler).
    The scan is tried on planted makers too."""
    offenders = [f for path in sorted((ROOT / "octlm").rglob("*.py")) if path not in MEMBERS for f in makers(path)]
    assert offenders == []
    planted = tmp_path / "sweeps" / "mending.py"
    planted.parent.mkdir()
    for source in (
        "from octlm.tasks.sweeps.planning import samplers\ncells = samplers.configurations(g, r, 3, 0)\n",
        "from octlm.tasks.sweeps.planning.samplers import drawn\n",
        "import itertools\nproduct = list(itertools.product(*grid.values()))\n",
        "from octlm.tasks.sweeps.planning import asking\nasked = asking.ask(spec, [], 2)\n",
        "def f():\n    import optuna\n",
    ):
        planted.write_text(source)
        assert makers(planted), source
    planted.write_text("from octlm.tasks.sweeps.planning import samplers\nn = samplers.size(spec)\n")
    assert makers(planted) == []


# ---------------------------------------------------------------- sweep extend draws with the sweep's own sampler


def ladder(spec: dict) -> list[dict]:
    """A sampler that is not random: draw i puts every range key at (i + 1) times its low end (crossed with the
    grid), so each draw is known without a generator."""
    points = [{k: round(b["low"] * (i + 1), 9) for k, b in spec["ranges"].items()} for i in range(spec["random"])]
    return [{**point, **cell} for point in points for cell in samplers.cells(spec)]


@pytest.fixture
def with_ladder(monkeypatch: pytest.MonkeyPatch) -> samplers.SweepSampler:
    """One more row of the table, made as a new member is (its function and its row), for this test's process."""
    row = dataclasses.replace(SAMPLERS["random"], name="ladder", help="the range keys' low ends, times 1, 2, ...")
    row = dataclasses.replace(row, first=ladder)
    monkeypatch.setitem(SAMPLERS, "ladder", row)
    return row


@pytest.mark.parametrize("name", [*(name for name, row in SAMPLERS.items() if not row.asks), "ladder"])
def test_extend_makes_the_new_trials_with_the_sweeps_own_sampler(name: str, tiny: Path, with_ladder) -> None:
    """More seeds, then (a sampler that reads ``random``) more draws: the new trials are the configurations the
    sweep's own row makes for the grown spec that the sweep did not have; the ones it had are untouched. Before,
    ``extend`` drew with ``random``'s generator whatever the sweep's sampler: a ``ladder`` sweep grew random values."""
    sampler = SAMPLERS[name]
    made = swept(tiny, "s", *options(sampler))
    had = [trial["params"] for trial in made["trials"]]
    grown = json_out(cli(tiny, "sweep", "extend", "s", "--seeds", "2", "--json"))
    status = json_out(cli(tiny, "sweep", "status", "s", "--json"))
    spec = check_spec(status["spec"], "test")
    assert spec["seeds"] == 2 and grown["added"] == len(had)
    replicas = {t["id"]: t["params"] for t in status["trials"] if t["id"] in grown["trials"]}
    assert list(replicas.values()) == sampler.first(spec) == had
    if "random" in sampler.reads:
        more = json_out(cli(tiny, "sweep", "extend", "s", "--random", "1", "--json"))
        status = json_out(cli(tiny, "sweep", "status", "s", "--json"))
        spec = check_spec(status["spec"], "test")
        added = [t["params"] for t in status["trials"] if t["id"] in more["trials"]]
        new = sampler.first(spec)[len(had) :]
        assert added == [cell for cell in new for _ in range(2)] and len(new) == len(samplers.cells(spec))
    else:
        refused = cli(tiny, "sweep", "extend", "s", "--random", "1")
        assert refused.exit_code == 2 and "draws no --range keys" in one_line(refused)


def test_a_sweep_whose_sampler_asks_is_not_extended(tiny: Path) -> None:
    for name, sampler in SAMPLERS.items():
        if sampler.asks:
            swept(tiny, name, *options(sampler))
            refused = cli(tiny, "sweep", "extend", name, "--seeds", "2")
            assert refused.exit_code == 2 and f"sweep {name}: extend takes" in one_line(refused)
