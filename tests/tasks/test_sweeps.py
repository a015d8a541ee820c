"""Sweeps over the durable queue (issue 27): trials made as experiments, workers claiming them in the registry,
a killed worker's trial taken over and ending bit-identical to a straight run, a failing trial recorded with its
log's tail while the others finish, successive halving promoting exactly the best, SIGTERM releasing a claim,
Optuna asking as trials finish. Real processes, real signals, a real registry; tiny configs of a few steps."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import assert_same_training_state, cli, holds, json_out, octlm, write_corpus, write_experiment

from octlm.core import layout
from octlm.train import checkpoint

pytestmark = pytest.mark.slow
TINY = {"steps": 4, "eval_interval": 2, "log_interval": 2, "warmup_steps": 1}


def sweep_home(tmp_path: Path, every: int = 2, **training: object) -> Path:
    home = write_corpus(tmp_path / "home")
    write_experiment(home, training={**TINY, **training}, checkpoint={"interval": every, "keep": 10})
    return home


def rows(home: Path, sql: str, *params: object) -> list[tuple]:
    with sqlite3.connect(home / "registry.db") as conn:
        return conn.execute(sql, params).fetchall()


def start(home: Path, *args: str, **env: str) -> subprocess.Popen:
    """``octlm work ...`` as its own process with the default signal dispositions (the runner may ignore SIGHUP)."""

    def defaults() -> None:
        for signum in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_DFL)

    command = [sys.executable, "-m", "octlm", "--home", str(home), "work", *args]
    environment = {**os.environ, "NO_COLOR": "1", **env}
    return subprocess.Popen(
        command, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=defaults
    )


def final(home: Path, experiment_id: str) -> checkpoint.Record:
    step, path = layout.checkpoints(home / "checkpoints" / experiment_id)[-1]
    return checkpoint.read(path)


def straight(home: Path, experiment_id: str, threads: str = "1") -> checkpoint.Record:
    """The same config trained in one go by ``octlm train``, as a twin experiment of its own."""
    twin = json_out(cli(home, "new", "--from", experiment_id, "--json"))["id"]
    done = octlm(home, "train", twin, "-q", env={"OMP_NUM_THREADS": threads})
    assert done.returncode == 0, done.stderr
    return final(home, twin)


def test_a_grid_of_two_keys_with_two_seeds_on_two_workers_runs_every_trial_once(tmp_path: Path) -> None:
    home = sweep_home(tmp_path)
    made = cli(
        home,
        "sweep",
        "new",
        "grid",
        "--from",
        "EXP-001",
        "--grid",
        "training.learning_rate=1e-3,3e-3",
        "--grid",
        "model.n_layers=1,2",
        "--seeds",
        "2",
        "--json",
    )
    assert made.exit_code == 0, made.stderr
    trials = json_out(made)["trials"]
    assert len(trials) == 8 and len({t["id"] for t in trials}) == 8
    assert {t["seed"] for t in trials} == {1337, 1338}
    tagged = rows(home, "select count(*) from experiments where tags like '%sweep:grid%'")
    assert tagged == [(8,)]
    done = octlm(home, "work", "grid", "--workers", "2", "--until-empty", "-q")
    assert done.returncode == 0, done.stderr
    claims = rows(home, "select experiment_id, outcome, threads, pid from sweep_claims")
    assert sorted(c[0] for c in claims) == sorted(t["id"] for t in trials)  # each trial claimed once
    assert {c[1] for c in claims} == {"done"} and {c[2] for c in claims} == {max(1, len(os.sched_getaffinity(0)) // 2)}
    assert len({c[3] for c in claims}) == 2  # both workers took trials
    runs = rows(home, "select experiment_id, count(*) from runs where kind = 'resume' group by experiment_id")
    assert sorted(runs) == sorted((t["id"], 1) for t in trials)  # and trained each once
    status = json_out(cli(home, "sweep", "status", "grid", "--json"))
    assert status["counts"]["done"] == 8 and status["complete"]
    assert all(t["value"] is not None and t["step"] == 4 for t in status["trials"])


def test_a_killed_workers_trial_is_taken_over_and_ends_bit_identical(tmp_path: Path) -> None:
    home = sweep_home(tmp_path, every=10, steps=80, eval_interval=40, log_interval=10)
    assert cli(home, "sweep", "new", "one", "--from", "EXP-001", "--seeds", "2").exit_code == 0
    first = start(home, "one", "--threads", "1")
    folder = home / "checkpoints" / "EXP-002"
    deadline = time.monotonic() + 120
    while not layout.checkpoints(folder) and time.monotonic() < deadline:
        time.sleep(0.02)
    first.kill()  # SIGKILL mid-trial: its claim stays open, its process is gone
    first.wait(timeout=30)
    (open_claim,) = rows(home, "select experiment_id, pid from sweep_claims where released is null")
    assert open_claim == ("EXP-002", first.pid)
    status = json_out(cli(home, "sweep", "status", "one", "--json"))
    assert status["trials"][0]["status"] == "lost"
    second = octlm(home, "work", "one", "--threads", "1", "--until-empty", "-q")
    assert second.returncode == 0, second.stderr
    claims = rows(home, "select experiment_id, outcome from sweep_claims order by id")
    assert claims == [("EXP-002", "lost"), ("EXP-002", "done"), ("EXP-003", "done")]
    resumed = rows(home, "select resumed_from from runs where experiment_id = 'EXP-002' order by id")
    assert resumed[-1][0] is not None  # the second worker continued from the first one's checkpoint
    assert_same_training_state(final(home, "EXP-002"), straight(home, "EXP-002"))


def test_a_failing_trial_is_marked_failed_with_its_log_tail_and_the_others_finish(tmp_path: Path) -> None:
    home = sweep_home(tmp_path)
    shutil.copytree(home / "corpus", home / "missing")  # there when the sweep is made (issue 45 item 4) ...
    made = cli(
        home, "sweep", "new", "bad", "--from", "EXP-001", "--grid", "data.sources=corpus/*.txt,missing/*.txt", "--json"
    )
    assert made.exit_code == 0, made.stderr
    shutil.rmtree(home / "missing")  # ... and gone when its trial trains
    good, bad = (t["id"] for t in json_out(made)["trials"])
    done = octlm(home, "work", "bad", "--until-empty")
    assert done.returncode == 5, done.stderr  # issue 45 item 1: a trial failed in this call (it was 0)
    assert f"{bad}: failed" in done.stderr
    assert done.stderr.splitlines()[-1] == (
        f"work: 1 trial done, 1 failed: {bad} (why: `octlm sweep status bad`; again: `octlm sweep retry bad`); "
        "the queue is empty"
    )
    status = json_out(cli(home, "sweep", "status", "bad", "--json"))
    by_id = {t["id"]: t for t in status["trials"]}
    assert by_id[good]["status"] == "done" and by_id[bad]["status"] == "failed"
    assert "missing/*.txt" in by_id[bad]["error"] and "failed:" in by_id[bad]["error"]
    assert (
        (home / "runs" / f"{bad}.log").read_text().splitlines()[-1].endswith(by_id[bad]["error"].splitlines()[-1][9:])
    )
    shown = cli(home, "sweep", "status", "bad")
    assert f"{bad} failed; the last lines of runs/{bad}.log" in shown.stdout and "missing/*.txt" in shown.stdout


def test_successive_halving_promotes_the_best_and_a_promoted_trial_equals_a_straight_run(tmp_path: Path) -> None:
    home = sweep_home(tmp_path, steps=6)
    made = cli(
        home,
        "sweep",
        "new",
        "sh",
        "--from",
        "EXP-001",
        "--grid",
        "training.learning_rate=1e-3,3e-3,1e-2,2e-2",
        "--halving",
        "2,4,6",
        "--keep",
        "0.5",
        "--json",
    )
    assert made.exit_code == 0, made.stderr
    ids = [t["id"] for t in json_out(made)["trials"]]
    done = octlm(home, "work", "sh", "--threads", "1", "--until-empty", "-q", env={"OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr
    status = json_out(cli(home, "sweep", "status", "sh", "--json"))
    first, second = status["decisions"]
    at_two = {e: rows(home, "select eval_loss from metrics where experiment_id = ? and step = 2", e)[0][0] for e in ids}
    best_two = sorted(ids, key=at_two.get)[:2]
    assert first["step"] == 2 and sorted(first["promoted"]) == sorted(best_two)
    assert [g["trials"][0] for g in first["ranking"]] == sorted(ids, key=at_two.get)  # the ranking, recorded
    at_four = {
        e: rows(home, "select eval_loss from metrics where experiment_id = ? and step = 4", e)[0][0] for e in best_two
    }
    assert second["step"] == 4 and second["promoted"] == [min(best_two, key=at_four.get)]
    winner = second["promoted"][0]
    by_id = {t["id"]: t for t in status["trials"]}
    assert by_id[winner]["status"] == "done" and by_id[winner]["target_step"] == 6
    assert sorted(e for e in ids if by_id[e]["status"] == "stopped") == sorted(set(ids) - {winner})
    assert [r[0] for r in rows(home, "select end_step from runs where experiment_id = ? order by id", winner)] == [
        2,
        4,
        6,
    ]
    shown = cli(home, "sweep", "status", "sh").stdout
    assert f"rung 1 (step 4): promoted {winner} (" in shown and "rung 0 (step 2): promoted " in shown
    assert_same_training_state(final(home, winner), straight(home, winner))  # three resumes, one trajectory


def test_sigterm_checkpoints_the_running_trial_releases_its_claim_and_exits_143(tmp_path: Path) -> None:
    home = sweep_home(tmp_path, every=100, steps=400, eval_interval=100, log_interval=50)
    assert cli(home, "sweep", "new", "term", "--from", "EXP-001", "--seeds", "2").exit_code == 0
    worker = start(home, "term", "--threads", "1", "--json")
    deadline = time.monotonic() + 120
    while not rows(home, "select 1 from runs where status = 'running'") and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    worker.send_signal(signal.SIGTERM)
    out, err = worker.communicate(timeout=120)
    assert worker.returncode == 143, err
    said = json.loads(out)  # issue 45 item 18e: --json says what was done, a signal's stop too
    holds(said, "octlm work --json")
    assert (said["done"], said["failed"], said["status"], said["workers"]) == ([], [], "interrupted", 1)
    assert "its claim is released" in err
    assert "checkpointed and is queued again: the next `octlm work` on its sweep continues it" in err  # issue 33.9
    assert "octlm resume" not in err
    assert rows(home, "select outcome from sweep_claims") == [("released",)]
    assert rows(home, "select status from sweep_trials order by position") == [("queued",), ("queued",)]
    step = layout.checkpoints(home / "checkpoints" / "EXP-002")[-1][0]
    assert 0 < step < 400
    assert cli(home, "sweep", "new", "empty", "--from", "EXP-001", "--seeds", "2").exit_code == 0
    cli(home, "sweep", "status", "empty")
    rows(home, "update sweep_trials set status = 'stopped' where sweep_id = 2")  # nothing left to claim
    idle = start(home, "empty")  # an idle worker waits for trials, and stops at once on SIGTERM
    assert "waiting for one" in idle.stderr.readline()
    idle.send_signal(signal.SIGTERM)
    assert idle.wait(timeout=60) == 143
    assert rows(home, "select count(*) from sweep_claims") == [(1,)]


def test_sigterm_to_a_pool_reaches_each_worker_once_and_releases_every_claim(tmp_path: Path) -> None:
    home = sweep_home(tmp_path, every=100, steps=400, eval_interval=100, log_interval=50)
    assert cli(home, "sweep", "new", "pool", "--from", "EXP-001", "--seeds", "3").exit_code == 0
    pool = start(home, "pool", "--workers", "2", "--json")
    deadline = time.monotonic() + 120
    while len(rows(home, "select 1 from runs where status = 'running'")) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    pool.send_signal(signal.SIGTERM)
    out, err = pool.communicate(timeout=120)
    assert pool.returncode == 143, err
    said = json.loads(out)  # issue 45 item 18e: one document for the pool, each worker's tally in it
    assert (said["done"], said["failed"], said["status"], said["workers"]) == ([], [], "interrupted", 2)
    assert err.count("its claim is released") == 2
    assert rows(home, "select outcome from sweep_claims") == [("released",), ("released",)]
    assert rows(home, "select status from sweep_trials") == [("queued",)] * 3
    assert {r[0] for r in rows(home, "select status from runs")} == {"interrupted"}


def test_tpe_asks_for_new_trials_as_earlier_ones_finish(tmp_path: Path) -> None:
    home = sweep_home(tmp_path, steps=2, eval_interval=2)
    made = cli(
        home,
        "sweep",
        "new",
        "tpe",
        "--from",
        "EXP-001",
        "--sampler",
        "tpe",
        "--trials",
        "4",
        "--parallel",
        "2",
        "--range",
        "training.learning_rate=1e-4:1e-2:log",
        "--json",
    )
    assert made.exit_code == 0, made.stderr
    assert len(json_out(made)["trials"]) == 2  # asked ahead; the rest as these finish
    done = octlm(home, "work", "tpe", "--until-empty", "-q")
    assert done.returncode == 0, done.stderr
    status = json_out(cli(home, "sweep", "status", "tpe", "--json"))
    assert status["counts"]["done"] == 4 and len(status["trials"]) == 4
    rates = [t["params"]["training.learning_rate"] for t in status["trials"]]
    assert len(set(rates)) == 4 and all(1e-4 <= r <= 1e-2 for r in rates)


def test_a_failed_trial_retried_runs_once_more_and_the_sweep_keeps_why(tmp_path: Path) -> None:
    """Issue 36 item 5: `sweep retry` queues failed trials again (their reason kept in the sweep's history), a worker
    runs each once, and a second retry finds nothing to do. Issue 45 item 6: retry says one line a trial, its ID
    then why it failed, once (its log's `failed:` message, not the whole line with its time, nor every trial's on
    one line), and `sweep status` gives the history in the command's words (`retry --failed`, a trial a line)."""
    home = sweep_home(tmp_path)
    grid = ("--grid", "data.sources=corpus/*.txt,more/*.txt", "--grid", "training.learning_rate=1e-3,3e-3")
    shutil.copytree(home / "corpus", home / "more")  # there when the sweep is made (issue 45 item 4) ...
    made = cli(home, "sweep", "new", "heal", "--from", "EXP-001", *grid, "--json")
    assert made.exit_code == 0, made.stderr
    shutil.rmtree(home / "more")  # ... and gone when its trials train
    ids = [t["id"] for t in json_out(made)["trials"]]
    bad = ids[2:]
    assert octlm(home, "work", "heal", "--until-empty", "-q").returncode == 5  # trials failed
    shutil.copytree(home / "corpus", home / "more")  # what the failed trials lacked
    said = cli(home, "sweep", "retry", "heal")
    assert said.exit_code == 0, said.stderr
    lines = said.stdout.splitlines()
    assert [line.split()[0] for line in lines] == bad and all(line.count("more/*.txt") == 1 for line in lines)
    message = "data.sources: 'more/*.txt' matches no text or data file"
    assert lines == [f"{e} (failed): experiments/{e}.yaml: {message}" for e in bad]
    assert said.stderr == "sweep heal: 2 trials queued again; train them with `octlm work heal`\n"
    status = json_out(cli(home, "sweep", "status", "heal", "--json"))
    (event,) = status["spec"]["history"]
    assert event["asked"] == ["failed"] and event["trials"][bad[0]] == {
        "was": "failed",
        "reason": f"experiments/{bad[0]}.yaml: {message}",
        "target_step": 4,
    }
    assert rows(home, "select status from sweep_trials where experiment_id = ?", bad[0]) == [("queued",)]
    done = octlm(home, "work", "heal", "--until-empty", "-q")
    assert done.returncode == 0, done.stderr
    status = json_out(cli(home, "sweep", "status", "heal", "--json"))
    assert {t["id"]: t["status"] for t in status["trials"]} == dict.fromkeys(ids, "done")
    shown = cli(home, "sweep", "status", "heal").stdout.splitlines()
    at = shown.index(f"{event['at']}: retry --failed")
    assert shown[at + 1 : at + 3] == [f"  {line}" for line in lines]
    again = cli(home, "sweep", "retry", "heal")
    assert again.exit_code == 0 and again.stdout == "" and "no failed trial to retry" in again.stderr
    assert len(rows(home, "select id from sweep_claims where experiment_id = ?", bad[0])) == 2  # ran twice, no more


def test_an_extended_sweep_adds_trials_and_leaves_the_done_ones_as_they_were(tmp_path: Path) -> None:
    """Issue 36 item 5: `sweep extend` adds seeds and grid values as new trials, numbered after the last, in one
    transaction; the trials already done are not trained again and their checkpoints stay bit for bit."""
    home = sweep_home(tmp_path)
    made = cli(
        home, "sweep", "new", "grow", "--from", "EXP-001", "--grid", "training.learning_rate=1e-3,3e-3", "--json"
    )
    assert made.exit_code == 0, made.stderr
    first = [t["id"] for t in json_out(made)["trials"]]
    assert octlm(home, "work", "grow", "--until-empty", "-q").returncode == 0
    before = {e: (home / "checkpoints" / e / "step-000004.pt").read_bytes() for e in first}
    grown = cli(home, "sweep", "extend", "grow", "--seeds", "2", "--grid", "training.learning_rate=1e-2", "--json")
    assert grown.exit_code == 0, grown.stderr
    added = json_out(grown)["trials"]
    assert len(added) == 4 and sorted(added) == added and min(added) > max(first)  # 3 rates x 2 seeds, less the 2
    done = octlm(home, "work", "grow", "--until-empty", "-q")
    assert done.returncode == 0, done.stderr
    status = json_out(cli(home, "sweep", "status", "grow", "--json"))
    assert [t["id"] for t in status["trials"]] == first + added and all(t["status"] == "done" for t in status["trials"])
    assert status["spec"]["seeds"] == 2 and status["spec"]["grid"]["training.learning_rate"] == [1e-3, 3e-3, 1e-2]
    assert {e: (home / "checkpoints" / e / "step-000004.pt").read_bytes() for e in first} == before
    for experiment_id in first:  # each ran once: one claim
        assert len(rows(home, "select id from sweep_claims where experiment_id = ?", experiment_id)) == 1
    assert json_out(cli(home, "sweep", "extend", "grow", "--seeds", "2", "--json"))["trials"] == []
    refused = cli(home, "sweep", "extend", "grow", "--grid", "training.batch_size=8")
    assert refused.exit_code == 2 and "not a key of sweep grow" in refused.stderr


def test_a_worker_killed_while_its_sweep_grows_leaves_a_queue_that_finishes_each_trial_once(tmp_path: Path) -> None:
    """Issue 36 item 5: a SIGKILLed worker, then `sweep extend` and `sweep retry` beside its lost claim: the lost trial
    is taken over (not retried: it did not fail), the added one queued, and one more worker ends each trial once."""
    home = sweep_home(tmp_path, every=10, steps=80, eval_interval=40, log_interval=10)
    assert cli(home, "sweep", "new", "grow", "--from", "EXP-001", "--seeds", "2").exit_code == 0
    first = start(home, "grow", "--threads", "1")
    deadline = time.monotonic() + 120
    while not layout.checkpoints(home / "checkpoints" / "EXP-002") and time.monotonic() < deadline:
        time.sleep(0.02)
    first.kill()
    first.wait(timeout=30)
    grown = cli(home, "sweep", "extend", "grow", "--seeds", "3", "--json")
    assert grown.exit_code == 0 and json_out(grown)["trials"] == ["EXP-004"], grown.stderr
    retried = cli(home, "sweep", "retry", "grow", "--json")
    assert retried.exit_code == 0 and json_out(retried)["trials"] == {}
    done = octlm(home, "work", "grow", "--threads", "1", "--until-empty", "-q")
    assert done.returncode == 0, done.stderr
    claims = rows(home, "select experiment_id, outcome from sweep_claims order by id")
    assert claims == [("EXP-002", "lost"), ("EXP-002", "done"), ("EXP-003", "done"), ("EXP-004", "done")]
    assert rows(home, "select status from sweep_trials order by position") == [("done",)] * 3


def test_work_exits_5_when_a_trial_failed_and_a_pool_says_one_total(tmp_path: Path) -> None:
    """Issue 45 items 1 and 18e: `work --until-empty` exited 0 when every trial failed; a pool's workers each said
    their own total ("1 trials done" twice, read as a trial lost) and `--workers N --json` printed nothing. Now a
    failed trial in this call exits 5, however many workers; the pool says one total line, and with --json writes one
    document that adds up every worker's tally."""
    home = sweep_home(tmp_path)
    shutil.copytree(home / "corpus", home / "missing")  # readable when the sweep is made (new checks it) ...
    made = cli(
        home, "sweep", "new", "mix", "--from", "EXP-001", "--grid", "data.sources=corpus/*.txt,missing/*.txt",
        "--seeds", "2", "--json",
    )  # fmt: skip
    shutil.rmtree(home / "missing")  # ... and gone when its trials train
    trials = {t["id"]: t["params"]["data.sources"] for t in json_out(made)["trials"]}
    good = sorted(i for i, sources in trials.items() if sources == ["corpus/*.txt"])
    bad = sorted(set(trials) - set(good))
    pooled = octlm(home, "work", "mix", "--workers", "2", "--until-empty")
    assert pooled.returncode == 5, pooled.stderr
    totals = [line for line in pooled.stderr.splitlines() if re.match(r"work: \d+ trials? done", line)]
    assert len(totals) == 1 and totals[0].startswith("work: 2 trials done by 2 workers, 2 failed: "), totals
    assert sorted(totals[0].split("failed: ")[1].split(" (why")[0].split(", ")) == bad
    assert cli(home, "sweep", "retry", "mix").exit_code == 0  # the failed ones, again: they fail again
    again = octlm(home, "work", "mix", "--workers", "2", "--until-empty", "--json", "-q")
    assert again.returncode == 5 and again.stderr == "", again.stderr
    said = json.loads(again.stdout)  # one document, nothing else on stdout
    holds(said, "octlm work --json")
    assert (said["done"], sorted(said["failed"]), said["status"], said["workers"]) == ([], bad, "empty", 2)
    assert cli(home, "sweep", "retry", "mix").exit_code == 0
    alone = octlm(home, "work", "mix", "--until-empty")  # every trial of this call failed: one worker, exit 5 too
    assert alone.returncode == 5, alone.stderr
    assert alone.stderr.splitlines()[-1].startswith(f"work: 0 trials done, 2 failed: {', '.join(bad)} (why: ")


def test_a_retried_halving_trial_of_a_decided_rung_is_placed_and_no_worker_dies_on_it(tmp_path: Path) -> None:
    """Issue 45 item 11, with real workers: a configuration whose two replicates fail (their data is missing) is
    ranked last when rung 0 is decided; `sweep retry` queues both once the data is there. Each ends at the rung that
    was decided without it: before, the worker decided the rung again, hit the decisions' unique index, left the
    claim open and exited 3, as did every worker that took it over and every `doctor --repair`. Now the rung keeps
    its one decision, the configuration goes where that decision would have put it (on to the next rung when its
    mean beats the promoted one's, else stopped), and a later worker and doctor find nothing to do."""
    home = sweep_home(tmp_path)
    grid = ("--grid", "data.sources=corpus/*.txt,more/*.txt", "--seeds", "2", "--halving", "2,4", "--keep", "0.5")
    shutil.copytree(home / "corpus", home / "more")  # readable when the sweep is made (new checks it) ...
    made = cli(home, "sweep", "new", "late", "--from", "EXP-001", *grid, "--json")
    assert made.exit_code == 0, made.stderr
    shutil.rmtree(home / "more")  # ... and gone when its trials train
    ids = [t["id"] for t in json_out(made)["trials"]]
    first = octlm(home, "work", "late", "--threads", "1", "--until-empty", "-q")
    assert first.returncode == 5, first.stderr  # two trials failed in this call
    (decision,) = json_out(cli(home, "sweep", "status", "late", "--json"))["decisions"]
    assert decision["promoted"] == ids[:2]  # the replicates of corpus/*.txt; more/*.txt failed
    shutil.copytree(home / "corpus", home / "more")
    assert list(json_out(cli(home, "sweep", "retry", "late", "--json"))["trials"]) == ids[2:]
    again = octlm(home, "work", "late", "--threads", "1", "--until-empty")
    assert again.returncode == 0, again.stderr
    status = json_out(cli(home, "sweep", "status", "late", "--json"))
    (decision,) = status["decisions"]  # amended, not made twice
    late = [g for g in decision["ranking"] if g["trials"] == ids[2:]][0]
    beaten = late["value"] < [g for g in decision["ranking"] if g["trials"] == ids[:2]][0]["value"]
    assert late["late"] and late["promoted"] is beaten
    by_id = {t["id"]: t for t in status["trials"]}
    assert all(by_id[e]["status"] == "done" and by_id[e]["target_step"] == 4 for e in ids[:2])
    going = ("done", 1, 4) if beaten else ("stopped", 0, 2)
    assert [(by_id[e]["status"], by_id[e]["rung"], by_id[e]["target_step"]) for e in ids[2:]] == [going, going]
    assert rows(home, "select count(*) from sweep_claims where released is null") == [(0,)]
    shown = cli(home, "sweep", "status", "late").stdout
    assert f"{', '.join(ids[2:])} ({late['value']:.4f}, placed after a retry)" in shown
    assert octlm(home, "work", "late", "--until-empty", "-q").returncode == 0
    repaired = octlm(home, "doctor", "--repair", "--json")
    assert repaired.returncode == 0 and "claim" not in repaired.stdout, repaired.stdout
    assert rows(home, "select count(*) from sweep_decisions") == [(1,)]


def test_a_settle_the_registry_refuses_fails_that_trial_releases_its_claim_and_the_worker_goes_on(
    tmp_path: Path,
) -> None:
    """Issue 45 item 11: whatever refuses a trial's settle (here a trigger planted in the registry refuses every
    decision), the trial is marked failed with why, its claim released, and the worker goes on to the next trial
    and ends with the queue (before: exit 3, the claim left open for the next worker to die on). Once the registry
    takes decisions again, `sweep retry` finishes the sweep."""
    home = sweep_home(tmp_path)
    grid = ("--grid", "training.learning_rate=1e-3,3e-3", "--halving", "2,4", "--keep", "0.5")
    made = cli(home, "sweep", "new", "refused", "--from", "EXP-001", *grid, "--json")
    assert made.exit_code == 0, made.stderr
    first, second = (t["id"] for t in json_out(made)["trials"])
    planted = "create trigger planted before insert on sweep_decisions begin select raise(abort, 'planted'); end"
    rows(home, planted)
    done = octlm(home, "work", "refused", "--threads", "1", "--until-empty")
    assert done.returncode == 5, done.stderr  # a trial failed in this call
    assert f"{second}: failed: its end (done) could not be recorded: planted" in done.stderr
    assert rows(home, "select status from sweep_trials order by position") == [("done",), ("failed",)]
    assert rows(home, "select experiment_id, outcome from sweep_claims order by id") == [
        (first, "done"),
        (second, "failed"),
    ]
    rows(home, "drop trigger planted")
    assert list(json_out(cli(home, "sweep", "retry", "refused", "--json"))["trials"]) == [second]
    assert octlm(home, "work", "refused", "--threads", "1", "--until-empty", "-q").returncode == 0
    status = json_out(cli(home, "sweep", "status", "refused", "--json"))
    assert len(status["decisions"]) == 1 and status["complete"] and status["counts"]["done"] == 1
