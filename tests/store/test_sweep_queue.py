"""The sweeps' queue in the registry (issue 27): m009's tables as their row types say, claims taken atomically
(16 processes on one registry lose no claim and take no trial twice), a dead claimant's trial taken over by
liveness, another host's claim left alone, a rung decided once, a removed trial leaving its sweep."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import cli

from octlm.store import migrations
from octlm.store.registry import Registry
from octlm.store.sweeps import records as sweeps
from octlm.tasks.sweeps.working import halving

WORKER = {"host": None, "pid": None, "pid_start": None, "threads": 1, "device": "cpu"}


def queue(path: Path, trials: int, name: str = "q", rungs: list[int] | None = None) -> int:
    """A sweep of ``trials`` trials whose experiments are rows only (the queue never reads their files)."""
    spec = {"halving": rungs or [], "keep": 0.5, "metric": "eval_loss"}
    members = [
        (
            {"id": f"EXP-{n:03d}", "description": f"trial {n}"},
            {"params": {"n": n}, "group_key": str(n), "seed": 1, "target_step": 4},
        )
        for n in range(1, trials + 1)
    ]
    with Registry(path) as registry:
        return registry.add_sweep({"name": name, "base": "EXP-000", "spec": spec}, members)


def worker(**fields: object) -> dict:
    import os
    import socket

    from octlm.core.liveness import start_time

    return {**WORKER, "host": socket.gethostname(), "pid": os.getpid(), "pid_start": start_time(os.getpid()), **fields}


def test_the_sweep_tables_are_what_their_row_types_say(tmp_path: Path) -> None:
    path = tmp_path / "registry.db"
    queue(path, 1)
    with sqlite3.connect(path) as conn:
        for table, row in (
            ("sweeps", sweeps.SweepRow),
            ("sweep_trials", sweeps.TrialRow),
            ("sweep_claims", sweeps.ClaimRow),
            ("sweep_decisions", sweeps.DecisionRow),
        ):
            columns = tuple(r[1] for r in conn.execute(f"pragma table_info({table})"))
            assert migrations.TABLE_COLUMNS[table] == columns == tuple(row.__annotations__), table
        names = [name for (name,) in conn.execute("select name from _sqlite_migrations order by id")]
        assert "m009_sweeps" in names and names == migrations.NAMES


def test_a_claim_takes_the_first_queued_trial_once_and_settles(tmp_path: Path) -> None:
    path = tmp_path / "registry.db"
    sweep_id = queue(path, 2)
    with Registry(path) as registry:
        first, second = registry.claim([sweep_id], worker()), registry.claim([sweep_id], worker())
        assert (first["experiment_id"], second["experiment_id"]) == ("EXP-001", "EXP-002")
        assert registry.claim([sweep_id], worker()) is None  # both running, their claimant alive
        with pytest.raises(sqlite3.IntegrityError):  # at most one open claim per trial, whatever the caller does
            with registry._transaction() as conn:
                conn.execute(
                    "insert into sweep_claims (trial_id, sweep_id, experiment_id) values (?, ?, 'EXP-001')",
                    (first["id"], sweep_id),
                )
        registry.settle_claim(first["claim_id"], "done", value=4.5)
        registry.settle_claim(second["claim_id"], "queued")  # released by a signal: queued again
        assert registry.settle_claim(first["claim_id"], "failed") == []  # a closed claim changes nothing
        statuses = [(t["experiment_id"], t["status"], t["value"]) for t in registry.trials(sweep_id)]
        assert statuses == [("EXP-001", "done", 4.5), ("EXP-002", "queued", None)]
        assert [c["outcome"] for c in registry.claims(sweep_id)] == ["done", "released"]


def test_a_dead_claimants_trial_is_taken_over_and_another_hosts_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "registry.db"
    sweep_id = queue(path, 2)
    code = (
        "import sys, os, socket; from pathlib import Path; from octlm.store.registry import Registry; "
        "from octlm.core.liveness import start_time; r = Registry(Path(sys.argv[1])); "
        "w = {'host': socket.gethostname(), 'pid': os.getpid(), 'pid_start': start_time(os.getpid())}; "
        "print(r.claim(None, w)['experiment_id'])"
    )
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "EXP-001"  # claimed, then the process ended without settling
    with Registry(path) as registry:
        assert [t["lost"] for t in registry.trials(sweep_id)] == [True, False]
        taken = registry.claim([sweep_id], worker())
        assert taken is not None and taken["experiment_id"] == "EXP-001"
        elsewhere = registry.claim([sweep_id], worker(host="elsewhere", pid=1))  # a claim this box cannot check
        assert elsewhere is not None and elsewhere["experiment_id"] == "EXP-002"
        assert [t["lost"] for t in registry.trials(sweep_id)] == [False, False]
        assert registry.claim([sweep_id], worker()) is None  # neither is taken from its claimant
        outcomes = [(c["experiment_id"], c["outcome"]) for c in registry.claims(sweep_id)]
    assert outcomes == [("EXP-001", "lost"), ("EXP-001", None), ("EXP-002", None)]


CLAIMER = """
import os, socket, sys, time
from pathlib import Path
from octlm.core.liveness import start_time
from octlm.store.registry import Registry
worker = {"host": socket.gethostname(), "pid": os.getpid(), "pid_start": start_time(os.getpid()), "threads": 1}
path = Path(sys.argv[1])
(path.parent / f"ready-{os.getpid()}").touch()  # all 16 start claiming together, however slow their start
deadline = time.monotonic() + 120
while len(list(path.parent.glob("ready-*"))) < 16 and time.monotonic() < deadline:
    time.sleep(0.01)
with Registry(path) as registry:
    while (trial := registry.claim(None, worker)) is not None:
        time.sleep(0.005)  # a trial takes a while
        registry.settle_claim(trial["claim_id"], "done", value=float(trial["position"]))
"""


@pytest.mark.slow
def test_sixteen_processes_on_one_registry_lose_no_claim_and_take_no_trial_twice(tmp_path: Path) -> None:
    path = tmp_path / "registry.db"
    sweep_id = queue(path, 96)
    command = [sys.executable, "-c", CLAIMER, str(path)]
    with ThreadPoolExecutor(max_workers=16) as pool:
        results = list(
            pool.map(lambda _: subprocess.run(command, capture_output=True, text=True, timeout=300), range(16))
        )
    assert all(r.returncode == 0 for r in results), [r.stderr for r in results if r.returncode]
    with Registry(path) as registry:
        claims = registry.claims(sweep_id)
        trials = registry.trials(sweep_id)
    assert sorted(c["experiment_id"] for c in claims) == [f"EXP-{n:03d}" for n in range(1, 97)]  # each once
    assert {c["outcome"] for c in claims} == {"done"} and all(c["released"] for c in claims)
    assert all(t["status"] == "done" and t["value"] == t["position"] for t in trials)
    assert len({c["pid"] for c in claims}) > 1  # the processes shared the work


def test_a_rung_is_decided_once_by_whoever_ends_it(tmp_path: Path) -> None:
    path = tmp_path / "registry.db"
    sweep_id = queue(path, 4, rungs=[4, 8])
    values = {"EXP-001": 5.0, "EXP-002": 4.0, "EXP-003": 6.0, "EXP-004": 4.5}
    with Registry(path) as registry:
        claims = [registry.claim([sweep_id], worker()) for _ in range(4)]
        taken = [
            registry.settle_claim(c["claim_id"], "done", halving.decide, value=values[c["experiment_id"]])
            for c in claims
        ]
        assert [len(t) for t in taken] == [0, 0, 0, 1]  # the last one to end the rung decides it
        (decision,) = registry.decisions(sweep_id)
        assert decision["promoted"] == ["EXP-002", "EXP-004"] and decision["step"] == 4
        assert [g["trials"] for g in decision["ranking"]] == [["EXP-002"], ["EXP-004"], ["EXP-001"], ["EXP-003"]]
        trials = {t["experiment_id"]: (t["status"], t["rung"], t["target_step"]) for t in registry.trials(sweep_id)}
    assert trials == {
        "EXP-001": ("stopped", 0, 4),
        "EXP-002": ("queued", 1, 8),
        "EXP-003": ("stopped", 0, 4),
        "EXP-004": ("queued", 1, 8),
    }


def test_halving_ranks_configurations_by_their_replicates_mean_and_passes_over_a_failed_one() -> None:
    def trial(experiment_id: str, group: str, value: float | None, status: str = "done") -> dict:
        return {
            "experiment_id": experiment_id,
            "group_key": group,
            "params": {},
            "value": value,
            "status": status,
            "rung": 0,
            "position": int(experiment_id[-1]),
        }

    trials = [
        trial("EXP-001", "a", 5.0),
        trial("EXP-002", "a", 4.0),
        trial("EXP-003", "b", 4.4),
        trial("EXP-004", "b", 4.4),
        trial("EXP-005", "c", 3.0),
        trial("EXP-006", "c", None, "failed"),
    ]
    decision = halving.decide({"spec": {"halving": [2, 4], "keep": 0.5}}, trials)
    assert decision is not None and decision.promoted == ["EXP-003", "EXP-004"]  # 4.4 beats 4.5; c lost a replicate
    assert [g["value"] for g in decision.ranking] == [4.4, 4.5, None]
    waiting = [*trials[:5], trial("EXP-006", "c", None, "running")]
    assert halving.decide({"spec": {"halving": [2, 4], "keep": 0.5}}, waiting) is None  # the rung is not over


def test_removing_a_trial_takes_its_trial_and_claim_rows(home: Path) -> None:
    assert cli(home, "sweep", "new", "s", "--from", "EXP-001", "--seeds", "2").exit_code == 0
    with Registry(home / "registry.db") as registry:
        sweep = registry.sweep("s")
        assert sweep is not None
        registry.claim([sweep["id"]], worker())
    removed = cli(home, "rm", "EXP-002", "--yes", "--json")
    assert removed.exit_code == 0, removed.stderr
    with Registry(home / "registry.db") as registry:
        assert [t["experiment_id"] for t in registry.trials(sweep["id"])] == ["EXP-003"]
        assert registry.claims(sweep["id"]) == []


def test_a_signal_between_a_claim_and_its_trial_releases_only_that_workers_claim(tmp_path: Path) -> None:
    from octlm.core.errors import Interrupted
    from octlm.core.home import Home
    from octlm.core.liveness import start_time
    from octlm.tasks.sweeps.working.stopping import releasing

    path = tmp_path / "registry.db"
    sweep_id, me = queue(path, 2), worker()
    with Registry(path) as registry:
        other = registry.claim([sweep_id], worker(pid=1, pid_start=start_time(1)))  # another live process's
    assert other is not None
    with pytest.raises(Interrupted), releasing(Home(tmp_path), me):
        with Registry(path) as registry:
            assert registry.claim([sweep_id], me) is not None
        raise Interrupted("stopped by SIGTERM", 143)  # before the trial's session took the signals over
    with Registry(path) as registry:
        assert [(c["pid"], c["outcome"]) for c in registry.claims(sweep_id)] == [(1, None), (me["pid"], "released")]
        assert [t["status"] for t in registry.trials(sweep_id)] == ["running", "queued"]


def grouped(path: Path, name: str = "g") -> int:
    """Two configurations (a, b) of two replicates each, halving at steps 4, 8 and 12."""
    spec = {"halving": [4, 8, 12], "keep": 0.5, "metric": "eval_loss"}
    members = [
        (
            {"id": f"EXP-{n:03d}", "description": f"trial {n}"},
            {"params": {"g": group}, "group_key": group, "replicate": n % 2, "seed": n, "target_step": 4},
        )
        for n, group in ((1, "a"), (2, "a"), (3, "b"), (4, "b"))
    ]
    with Registry(path) as registry:
        return registry.add_sweep({"name": name, "base": "EXP-000", "spec": spec}, members)


def decided_with_a_failed_replicate(path: Path) -> int:
    """b's second replicate fails, so rung 0 is decided without b: a promoted, b's done replicate stopped."""
    sweep_id = grouped(path)
    ends = {"EXP-001": ("done", 5.0), "EXP-002": ("done", 5.2), "EXP-003": ("done", 4.0), "EXP-004": ("failed", None)}
    with Registry(path) as registry:
        for _ in range(4):
            claim = registry.claim([sweep_id], worker())
            assert claim is not None
            status, value = ends[claim["experiment_id"]]
            registry.settle_claim(claim["claim_id"], status, halving.decide, value=value, error=None)
        (decision,) = registry.decisions(sweep_id)
        assert decision["promoted"] == ["EXP-001", "EXP-002"]
        retried = registry.requeue("g", ("failed",), lambda t: (t["target_step"], t["rung"]))
        assert list(retried["trials"]) == ["EXP-004"]
    return sweep_id


def state(path: Path, sweep_id: int) -> dict[str, tuple[str, int, int]]:
    with Registry(path) as registry:
        return {t["experiment_id"]: (t["status"], t["rung"], t["target_step"]) for t in registry.trials(sweep_id)}


@pytest.mark.parametrize(("value", "promoted"), [(4.2, True), (7.0, False)])
def test_a_retried_trial_ending_at_a_decided_rung_is_placed_where_the_decision_would_have_put_it(
    tmp_path: Path, value: float, promoted: bool
) -> None:
    """Issue 45 item 11: the retried replicate ends at rung 0, decided before it. The rung is not decided again (the
    decisions' unique index refused that, and the claim stayed open for every worker to die on): its configuration,
    b, is ranked among the decision's by its replicates' mean. A mean of 4.1 beats a's 5.1: b continues to the next
    rung with both replicates (the stopped one too); 5.5 is past the best half: b's replicates stay stopped. The
    claim is released, the decision's row amended, and the next rung decided once, over whoever reached it."""
    path = tmp_path / "registry.db"
    sweep_id = decided_with_a_failed_replicate(path)
    with Registry(path) as registry:
        claim = registry.claim([sweep_id], worker(), skip={1, 2})  # before a's replicates end the next rung
        assert claim is not None and claim["experiment_id"] == "EXP-004"
        taken = registry.settle_claim(claim["claim_id"], "done", halving.decide, value=value)
        assert [(d.rung, d.late) for d in taken] == [(0, True)]
        (decision,) = registry.decisions(sweep_id)  # amended, not made again
        assert registry.claims_held() == []
    b = [g for g in decision["ranking"] if g["group"] == "b"][0]
    assert b["late"] and b["promoted"] is promoted and b["value"] == pytest.approx((4.0 + value) / 2)
    assert decision["promoted"] == ["EXP-001", "EXP-002", *(["EXP-003", "EXP-004"] if promoted else [])]
    going = ("queued", 1, 8) if promoted else ("stopped", 0, 4)
    assert state(path, sweep_id) == {
        "EXP-001": ("queued", 1, 8),
        "EXP-002": ("queued", 1, 8),
        "EXP-003": going,
        "EXP-004": going,
    }
    with Registry(path) as registry:
        while claim := registry.claim([sweep_id], worker()):
            registry.settle_claim(claim["claim_id"], "done", halving.decide, value=1.0)
        first, second = registry.decisions(sweep_id)  # the last rung is never decided
    assert [g["group"] for g in second["ranking"]] == (["a", "b"] if promoted else ["a"])
    assert {status for status, _, _ in state(path, sweep_id).values()} == {"done", "stopped"}  # none left waiting


def test_a_retried_trial_keeps_why_it_failed_on_one_short_line(tmp_path: Path) -> None:
    """Issue 45 item 6: the reason `sweep retry` keeps (and says) is the worker's `failed:` message of the log tail
    the trial's row holds: its first line, without the time, shortened; not the tail's last line (a message of
    several lines ends elsewhere) nor all of it."""
    path = tmp_path / "registry.db"
    sweep_id = queue(path, 2)
    message = "CUDA error: device-side assert triggered " + "x" * 400
    tail = f"12:00:00 resume EXP-001: steps 0 -> 4 on cpu\n12:00:01 failed: {message}\nCompile with TORCH_USE_CUDA_DSA"
    with Registry(path) as registry:
        for error in (tail, None):
            claim = registry.claim([sweep_id], worker())
            assert claim is not None
            registry.settle_claim(claim["claim_id"], "failed", error=error)
        event = registry.requeue("q", ("failed",), lambda t: (t["target_step"], t["rung"]))
    first, second = event["trials"]["EXP-001"]["reason"], event["trials"]["EXP-002"]["reason"]
    assert first.startswith("CUDA error: device-side assert triggered xxx") and first.endswith("...")
    assert len(first) == 160 and "\n" not in first and "12:00" not in first
    assert second == "failed"  # no error kept: its status


def test_the_checks_of_a_sweeps_rows_cover_every_field_that_moves_with_it() -> None:
    """Issue 45 item 15: what a pack or a kept record carries (``rows.*_FIELDS``) is what ``specs`` checks."""
    from octlm.store.sweeps import rows, specs

    assert set(specs.SWEEP_ROW) == set(rows.SWEEP_FIELDS)
    assert set(specs.TRIAL_ROW) == set(rows.TRIAL_FIELDS)
    assert set(specs.DECISION_ROW) == set(rows.DECISION_FIELDS)
    assert set(specs.SPEC) == set(sweeps.SweepSpec.__annotations__)  # every key of a spec, checked
