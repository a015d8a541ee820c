"""The list's columns as one spec (issue 47 item 2): the family test of ``views.listing.columns.COLUMNS``, parametrized
by the spec, so a column added there is held to the table, ``--json``, ``--csv``, ``--columns``, ``--where`` and
``--sort`` without a line here; and the figures of a run's newest record reach the list whole, from its run row, so
that showing one more needs no registry column and no migration.
"""

from __future__ import annotations

import csv
import io
import shutil
import sqlite3
import typing
from pathlib import Path
from typing import Any

import pytest
from conftest import cli, json_out, write_experiment

from octlm.cli import formats
from octlm.core.home import Home
from octlm.core.records import NESTED_FIELDS, RunRecord
from octlm.store.experiments import load, register
from octlm.store.registry import Registry
from octlm.views.listing import columns as column_spec

HINTS = typing.get_type_hints(RunRecord)


def planted(shift: float) -> dict[str, Any]:
    """A record with a value in every field (nested ones aside), each distinct, of its field's type: a figure column
    that shows another field's value, or none, is caught."""
    record: dict[str, Any] = {}
    for index, (name, hint) in enumerate(HINTS.items()):
        if name in NESTED_FIELDS:
            continue
        if hint is str:
            record[name] = f"{name}-{shift:g}"
        elif hint is int:
            record[name] = 100_000 + 7 * index + int(shift)
        else:  # a float, or a float that may be None
            record[name] = 1000 + index + 0.456789 + shift
    return record


@pytest.fixture(scope="module")
def listed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict[str, Any]]]:
    """EXP-001 (completed at step 12 of 12, tagged, verified) and EXP-002 (interrupted at 8 of 20, archived), each
    run's newest record holding a distinct value in every field; what each experiment's row must say."""
    home = tmp_path_factory.mktemp("columns")
    expected = {}
    made = (("EXP-001", 12, 12, "completed", 0.0), ("EXP-002", 20, 8, "interrupted", 3.0))
    for experiment_id, steps, end, status, shift in made:
        write_experiment(home, experiment_id, training={"steps": steps})
        record = planted(shift)
        with Registry(home / "registry.db") as registry:
            register(Home(home), registry, load(Home(home), experiment_id))
            run = registry.start_run(experiment_id, "train", start_step=0)
            registry.finish_run(run, status, end_step=end, latest_metrics=record)
            if experiment_id == "EXP-001":
                registry.add_verification(experiment_id, "verify-resume", "pass", {"summary": "identical"}, run)
                registry.retag(experiment_id, ["baseline"], [])
            else:
                registry.set_archived(experiment_id, True)
            updated = next(row["updated"] for row in registry.summary_rows() if row["id"] == experiment_id)
        own = {  # what the list makes of the experiment's own rows; every other column is its record's
            "id": experiment_id,
            "description": "tiny test experiment",
            "tags": ["baseline"] if experiment_id == "EXP-001" else [],
            "archived": experiment_id == "EXP-002",
            "status": status,
            "step": end,  # the run's end step, not the record's
            "steps": steps,
            "last_verdict": "verify-resume: pass" if experiment_id == "EXP-001" else None,
            "updated": updated,
        }
        expected[experiment_id] = {key: own[key] if key in own else record[key] for key in column_spec.KEYS}
    return home, expected


def table_cells(text: str) -> dict[str, dict[str, str]]:
    """{ID: {header: cell}} of a plain table: each column starts where its header does."""
    lines = text.splitlines()
    starts = [lines[0].index(column.header or "") for column in column_spec.TABLE]
    assert starts == sorted(starts), lines[0]  # the headers in the spec's order
    ends = [*starts[1:], None]
    cells = [
        {c.header or "": line[a:b].strip() for c, a, b in zip(column_spec.TABLE, starts, ends, strict=True)}
        for line in lines[1:]
    ]
    return {row["ID"]: row for row in cells}


def csv_text(value: Any) -> str:
    if isinstance(value, list):
        return " ".join(value)
    return "" if value is None else str(value)


def where_text(value: Any) -> str:
    """A value as ``--where`` is given it (a list by one of its items, a flag as YAML writes it)."""
    if isinstance(value, list):
        return value[0]
    return str(value).lower() if isinstance(value, bool) else str(value)


def ids(home: Path, *args: str) -> list[str]:
    result = cli(home, "show", "--all", "--json", *args)
    assert result.exit_code == 0, result.stderr
    return [row["id"] for row in json_out(result)["experiments"]]


def test_json_and_csv_carry_the_spec_s_keys_in_its_order(listed: tuple[Path, dict]) -> None:
    home, expected = listed
    rows = json_out(cli(home, "show", "--all", "--json"))["experiments"]
    assert [list(row) for row in rows] == [list(column_spec.KEYS)] * 2
    assert rows == [expected["EXP-001"], expected["EXP-002"]]
    written = list(csv.reader(io.StringIO(cli(home, "show", "--all", "--csv").stdout)))
    assert written[0] == list(column_spec.KEYS)


@pytest.mark.parametrize("column", column_spec.COLUMNS, ids=lambda column: column.key)
def test_each_column_is_written_as_its_row_says(listed: tuple[Path, dict], column: column_spec.Column) -> None:
    home, expected = listed
    shown = csv.DictReader(io.StringIO(cli(home, "show", "--all", "--csv").stdout))
    assert {row["id"]: row[column.key] for row in shown} == {i: csv_text(e[column.key]) for i, e in expected.items()}
    if column.header is not None:  # the table: its header, its cell written in its format
        table = table_cells(cli(home, "show", "--all").stdout)
        for experiment_id, row in expected.items():
            value = column.cell(row) if column.cell else row[column.key]
            assert table[experiment_id][column.header] == formats.format_cell(column.format, value), experiment_id
    picked = json_out(cli(home, "show", "--all", "--json", "--columns", column.key))["experiments"]
    assert [row[column.key] for row in picked] == [expected[i][column.key] for i in ("EXP-001", "EXP-002")]


@pytest.mark.parametrize("column", column_spec.COLUMNS, ids=lambda column: column.key)
def test_each_column_filters_and_sorts(listed: tuple[Path, dict], column: column_spec.Column) -> None:
    home, expected = listed
    value = where_text(expected["EXP-001"][column.key])
    assert "EXP-001" in ids(home, "--where", f"{column.key}=={value}")
    assert "EXP-001" not in ids(home, "--where", f"{column.key}!={value}")
    assert sorted(ids(home, "--sort", f"-{column.key}")) == ["EXP-001", "EXP-002"]
    refused = cli(home, "show", "--where", f"{column.key}<abc")
    assert (refused.exit_code == 2) is column.numeric and ("is a number" in refused.stderr) is column.numeric


def test_a_narrow_terminal_leaves_columns_out_in_the_spec_s_drop_order(
    listed: tuple[Path, dict], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from octlm.cli import render, show_view
    from octlm.views import show as shows

    home, _ = listed
    left: list[list[str]] = []
    for width in (200, 120, 100, 80, 70):
        buffer = io.StringIO()
        console = render.PlainConsole(width=width, file=buffer, force_terminal=True, color_system=None)
        monkeypatch.setattr(render, "terminal", lambda: True)
        monkeypatch.setattr(render, "out_console", lambda console=console: console)
        request = shows.ShowRequest(include_archived=True)
        show_view.write(shows.run(Home(home), request), request)
        note = capsys.readouterr().err
        left.append(note.split("left out ", 1)[1].split(" (widen")[0].split(", ") if "left out" in note else [])
        assert max(len(line) for line in buffer.getvalue().splitlines()) <= width
    assert left[0] == [] and left[-1] == list(
        column_spec.DROP_ORDER
    )  # at 70 columns, every column that may go has gone
    assert all(names == list(column_spec.DROP_ORDER[: len(names)]) for names in left), left


def test_any_field_of_the_newest_record_is_a_key_of_the_list(listed: tuple[Path, dict]) -> None:
    """No line of the spec is needed to list, filter or sort by a figure the run file's records carry: every field of
    the record that is not a column (``FIGURES``) is listed, filtered and sorted by from the record itself."""
    home, _ = listed
    fields = list(column_spec.FIGURES)
    assert fields and not set(fields) & set(column_spec.KEYS)
    picked = json_out(cli(home, "show", "--all", "--json", "--columns", ",".join(fields)))["experiments"]
    assert picked == [
        {"id": i, **{f: planted(shift)[f] for f in fields}} for i, shift in (("EXP-001", 0), ("EXP-002", 3))
    ]
    number = next(f for f in fields if HINTS[f] is float)
    text = next(f for f in fields if HINTS[f] is str)
    assert ids(home, "--where", f"{number}>={planted(3.0)[number]}") == ["EXP-002"]
    assert ids(home, "--sort", f"-{number}") == ["EXP-002", "EXP-001"]
    assert ids(home, "--where", f"{text}~-3") == ["EXP-002"]
    refused = cli(home, "show", "--where", f"{number}<fast")
    assert refused.exit_code == 2 and f"{number} is a number" in refused.stderr
    table = cli(home, "show", "--all", "--columns", number).stdout.splitlines()
    assert table[1].split() == ["EXP-001", formats.format_cell(formats.kind_of(number), planted(0.0)[number])]
    unknown = cli(home, "show", "--columns", "tokens_per_joule")
    assert unknown.exit_code == 2 and "--columns tokens_per_joule: unknown column" in unknown.stderr
    assert number in unknown.stderr and len(unknown.stderr.splitlines()) == 1


def test_a_figure_no_registry_column_holds_reaches_the_list(tmp_path: Path, listed: tuple[Path, dict]) -> None:
    """The list reads a run's newest record whole, never the summary view's columns: a registry whose view has not
    the figure (``eval_loss_se`` came to the view with a migration, m010) still lists it, as the record holds it."""
    source, expected = listed
    home = tmp_path / "home"
    shutil.copytree(source, home)
    with sqlite3.connect(home / "registry.db") as conn:
        sql = conn.execute("select sql from sqlite_master where name = 'experiment_summary'").fetchone()[0]
        without = sql.replace(
            ",\ncase when json_valid(r.latest_metrics) then json_extract(r.latest_metrics, "
            "'$.eval_loss_se') end as eval_loss_se",
            "",
        )
        assert without != sql and "eval_loss_se" not in without
        conn.execute("drop view experiment_summary")
        conn.execute(without)
    rows = json_out(cli(home, "show", "--all", "--json"))["experiments"]
    assert [row["eval_loss_se"] for row in rows] == [expected[i]["eval_loss_se"] for i in ("EXP-001", "EXP-002")]
