"""``octlm doctor``'s checkup: check the registry against the files, and rebuild what it lost.

The files are the truth: ``experiments/*.yaml`` hold the configs, and every checkpoint
carries its config, fingerprints, step and metrics. So deleting ``registry.db`` loses
nothing that matters; ``doctor --repair`` rebuilds experiments, checkpoints and a run per
experiment from them (verdict history is the one thing only the registry held).

Checking opens the registry read-only. Beyond missing rows it reports: registry cells that are
not valid JSON (``--repair`` writes the config again from its YAML, or clears the cell); runs
left ``running`` by a process that is gone (pid and start time) or by another host, which cannot
be checked from here (``--repair --other-hosts`` marks those crashed); a checkpoint whose
``.sha256`` file and registry row disagree (the file's bytes say which one is stale, and
``--repair`` rewrites that one); and a checkpoint in ``checkpoints/<ID>/`` that records another
experiment or another track (``overfit``): foreign, never used to rebuild rows. Rows of an experiment
whose YAML is gone are removed by ``--repair`` (as ``octlm rm --keep-files``). A run rebuilt from
checkpoints reads ``completed`` at ``training.steps`` and ``stopped`` before it. The staging folders
(``.unpack-*``) of an ``unpack`` that was killed are listed, and removed by ``--repair``; so are those (``.new-*``) of
a killed command that made many experiments at once, with the files it had placed in ``experiments/`` before it
could register them (no experiments of their own). Each problem says whether ``--repair`` can fix it, and
``advice`` recommends it only then. ``--repair`` also gives the registry the highest ID numbers ever given that
``.octlm/ids.json`` keeps (and the file the registry's), so a rebuilt registry never gives again the ID of an
experiment removed before its loss.
"""

from __future__ import annotations

import shutil
import socket
from typing import Any

from octlm.core import layout
from octlm.core.errors import OctlmError
from octlm.core.home import Home
from octlm.core.liveness import alive, is_other_host
from octlm.core.records import Checkup, Problem
from octlm.core.reporting import counted
from octlm.store import experiments, kept
from octlm.store.registry import Registry
from octlm.store.sweeps.rows import claim_is_dead
from octlm.tasks.doctor.files import checkpoints, locked, problem


def run(home: Home, repair: bool = False, other_hosts: bool = False) -> Checkup:
    """The report; its ``advice`` is the closing line, which recommends ``--repair`` only when it would fix something
    still listed."""
    with Registry(home.registry, create=repair) as registry:  # checking never creates or writes a registry
        staging, staged = _staging(home, registry, repair)  # first: files a killed process staged are no experiments
        problems = _damaged_cells(home, registry, repair) + _shared_identities(home, registry, repair)
        problems += _experiments(home, registry, repair, staged) + _stuck_runs(registry, repair, other_hosts)
        problems += _open_claims(registry, repair, other_hosts) + _lost_sweeps(home, registry, repair) + staging
        if repair:  # the IDs given before, from .octlm/ids.json (a rebuilt registry), and back: never given again
            kept.keep_marks(home, registry)
    unrepaired = [p for p in problems if not p["repaired"]]
    return {
        "home": str(home.root),
        "repair": repair,
        "problems": problems,
        "healthy": not unrepaired,
        "advice": advice(problems),
    }


def advice(problems: list[Problem]) -> str:
    """The closing line: healthy, or what to do about the problems left (the repair that fixes some, or none)."""
    left = [p for p in problems if not p["repaired"]]
    if not left:
        return "healthy"
    fixable = [p for p in left if p["repairable"]]
    if not fixable:
        return f"problems found ({len(left)}) that --repair cannot fix: see the detail of each"
    hosts = (
        " --other-hosts" if any(p["kind"] in ("run on another host", "claim on another host") for p in fixable) else ""
    )
    share = "" if len(fixable) == len(left) else f" ({len(fixable)} of {len(left)} it can fix)"
    return f"problems found: run `octlm doctor --repair{hosts}`{share}"


def _damaged_cells(home: Home, registry: Registry, repair: bool) -> list[Problem]:
    """Cells that are not valid JSON: ``show`` reads them as empty; repairing writes them again or clears them."""
    problems = []
    for table, row_id, column in registry.malformed_cells():
        if repair:
            _repair_cell(home, registry, table, row_id, column)
        detail = f"{column} is not valid JSON; show reads it as empty"
        problems.append(problem("malformed registry cell", f"{table} row {row_id}", detail, repair))
    return problems


def _repair_cell(home: Home, registry: Registry, table: str, row_id: Any, column: str) -> None:
    if (table, column) == ("experiments", "config_json"):  # the YAML file holds the config: register it again
        try:
            experiments.register(home, registry, experiments.load(home, str(row_id)))
            return
        except OctlmError:
            pass
    registry.clear_cell(table, row_id, column)


def _shared_identities(home: Home, registry: Registry, repair: bool) -> list[Problem]:
    """Two experiments' identities kept with one UUID (``.octlm/identities/`` copied by hand): the first keeps it,
    and ``--repair`` gives each other one its own (before, registering it broke the registry's unique UUIDs)."""
    return [
        problem(
            "shared identity",
            f".octlm/identities/{other}",
            f"{keeper}'s UUID too; {keeper} keeps it, "
            + (f"{other} was given its own" if repair else f"--repair gives {other} its own"),
            repair,
        )
        for other, keeper in kept.shared_identities(home, registry, repair)
    ]


def _experiments(home: Home, registry: Registry, repair: bool, staged: set[str]) -> list[Problem]:
    problems, registered = [], set(registry.experiment_ids())
    ids = [experiment_id for experiment_id in experiments.ids_on_disk(home) if experiment_id not in staged]
    for experiment_id in ids:
        try:
            config = experiments.load(home, experiment_id)
        except OctlmError as error:
            problems.append(problem("invalid config", f"experiments/{experiment_id}.yaml", str(error)))
            continue
        if experiment_id not in registered:
            if repair:
                experiments.register(home, registry, config)
            detail = "in experiments/ but not in the registry"
            problems.append(problem("experiment without row", experiment_id, detail, repair))
        problems += checkpoints(home, registry, experiment_id, repair)
    for experiment_id in sorted(registered - set(ids)):
        problems.append(_row_without_config(home, registry, experiment_id, repair))
    return problems


def _row_without_config(home: Home, registry: Registry, experiment_id: str, repair: bool) -> Problem:
    """Rows of an experiment whose config is gone: repairing removes them all, as ``octlm rm --keep-files``."""
    fixed = repair and locked(home, experiment_id, lambda: registry.remove_experiment(experiment_id))
    if fixed:
        detail = f"no experiments/{experiment_id}.yaml; its rows were removed (files, if any, kept)"
    elif repair:
        detail = f"no experiments/{experiment_id}.yaml; left alone: the experiment is locked by a running process"
    else:
        detail = f"no experiments/{experiment_id}.yaml; --repair removes its rows (as `octlm rm --keep-files`)"
    return problem("row without config", experiment_id, detail, fixed)


def _staging(home: Home, registry: Registry, repair: bool) -> tuple[list[Problem], set[str]]:
    """Staging folders of a process that is gone (killed before it could clean up): an ``unpack``'s, or one that
    made many experiments at once (``sweep new``, ``sweep extend``, ``new --seeds``) and placed their files, never
    registered; ``--repair`` removes each with those files. A live process's is left alone. The problems, and the
    IDs of the files staged and never registered (a live process's too), which are no experiments of their own."""
    problems, staged, registered = [], set[str](), set(registry.experiment_ids())
    for path, pid, start in layout.staging_folders(home.root):
        unpacking = path.name.startswith(".unpack-")
        placed = [] if unpacking else [i for i in experiments.placed_from(home, path) if i not in registered]
        staged.update(placed)
        if pid is not None and start is not None and alive(pid, start):
            continue
        size = sum(p.lstat().st_size for p in path.rglob("*"))
        if repair:
            for experiment_id in placed:
                home.config_path(experiment_id).unlink(missing_ok=True)
            shutil.rmtree(path, ignore_errors=True)
        what = "an unpack" if unpacking else "a command making many experiments (sweep new or extend, new --seeds)"
        unregistered = (
            f"; {len(placed)} files it placed ({placed[0]} to {placed[-1]}) were never registered" if placed else ""
        )
        detail = f"left by {what} that is gone ({size:,} bytes){unregistered}; --repair removes "
        kind = "stale unpack staging folder" if unpacking else "stale staging of new experiments"
        problems.append(problem(kind, path.name, detail + ("them and it" if placed else "it"), repair))
    return problems, staged


def _stuck_runs(registry: Registry, repair: bool, other_hosts: bool) -> list[Problem]:
    problems = []
    for row in registry.running_runs():
        where = f"run {row['id']} of {row['experiment_id']}"
        if row["status"] == "crashed":
            if repair:
                registry.finish_run(row["id"], "crashed", error="process gone; marked by octlm doctor")
            detail = f"pid {row['pid']} on {row['host']} is gone"
            problems.append(problem("run stuck in running", where, detail, repair))
        elif is_other_host(row):
            fixed = repair and other_hosts
            if fixed:
                error = (
                    f"not checked on its host; marked by octlm doctor --repair --other-hosts on {socket.gethostname()}"
                )
                registry.finish_run(row["id"], "crashed", error=error)
            hint = "" if fixed else "; if it runs no more, `octlm doctor --repair --other-hosts` marks it crashed"
            detail = f"{row['status']}: pid {row['pid']} cannot be checked from this host{hint}"
            problems.append(problem("run on another host", where, detail, fixed))
    return problems


def _open_claims(registry: Registry, repair: bool, other_hosts: bool) -> list[Problem]:
    """Claims on the sweeps' queue that no worker here will ever release: a dead worker's on this host (the next
    worker takes it over; ``--repair`` releases it now) and any on another host (a copied home, a container renamed;
    ``--repair --other-hosts`` releases it): released, the trial is queued again and resumes from its checkpoint."""
    problems, here = [], socket.gethostname()
    for claim in registry.claims_held():
        where = f"claim {claim['id']} of {claim['experiment_id']}"
        if claim["host"] == here:
            if not claim_is_dead(claim):
                continue
            if repair:
                registry.settle_claim(claim["id"], "lost")
            detail = f"its worker (pid {claim['pid']}) is gone; --repair queues the trial again"
            problems.append(problem("lost claim", where, detail, repair))
            continue
        fixed = repair and other_hosts
        if fixed:
            registry.settle_claim(claim["id"], "lost")
        hint = "" if fixed else "; no worker here takes it: `octlm doctor --repair --other-hosts` queues it again"
        detail = f"held by pid {claim['pid']} on host {claim['host']} since {claim['claimed']}{hint}"
        problems.append(problem("claim on another host", where, detail, fixed))
    return problems


def _lost_sweeps(home: Home, registry: Registry, repair: bool) -> list[Problem]:
    """Sweeps the registry lost (``registry.db`` gone or replaced) but their records beside it keep
    (``.octlm/sweeps/<name>.json``): ``--repair`` rebuilds each, its queue, halving's decisions and its trials'
    ``sweep:`` tags (a trial running then is queued again). A record checked and found not to be one (damaged, or
    made by hand: ``kept.kept_sweeps``) is said in one line naming its key, and nothing is rebuilt from it."""
    records, damaged = kept.kept_sweeps(home)
    problems = [problem("invalid sweep record", where, f"{why}; not rebuilt from") for where, why in damaged.items()]
    here = {row["uuid"] for row in registry.sweeps()}
    for name, record in records.items():
        if record["sweep"]["uuid"] in here:
            continue
        trials = [t for t in record["trials"] if registry.experiment(str(t["experiment_id"])) is not None]
        gone = len(record["trials"]) - len(trials)
        detail = f"kept in .octlm/sweeps/{name}.json with {counted(len(trials), 'trial')}, not in the registry"
        detail += f" ({gone} of its trials' experiments are gone)" if gone else ""
        fixed = repair
        try:
            if repair:
                kept.rebuild_sweep(registry, record, trials)
        except OctlmError as error:  # its name is another sweep's here: said, and the rest repaired
            detail, fixed = f"{detail}; not rebuilt: {error}", False
        problems.append(problem("sweep without rows", f"sweep {name}", detail + "; rebuilt" * fixed, fixed))
    return problems
