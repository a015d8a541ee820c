"""``octlm export tensorboard|csv NAME... -o DIR`` (torch-free): the runs named (experiment IDs, or a sweep's trials
by the sweep's name), each as a tracker is given it (``trackers.RunOut``: its run file's records, its config, its
fingerprints as ``show ID`` says them, when it began), the folder its seed replicates share (``groups``), and DIR
written whole by the tracker's writer (``core.fsutil.folder``: built beside, renamed into place).

Groups: experiments whose fingerprinted configs are the same but for ``training.seed`` are replicates of one
configuration (as ``views/sweeps/replicates`` groups them), and land in one folder, named by the keys that set it
apart from the other groups exported (``training.learning_rate=0.001``), so that a tracker shows ``<group>/<ID>``
and a filter on the group finds its seeds; one group alone (or a name past ``MAX_GROUP`` characters) is named by its
configuration's digest (``config-1a2b3c4d``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
from datetime import datetime
from pathlib import Path

from octlm.config import BOOKKEEPING, canonical, flatten
from octlm.core.errors import BadInput
from octlm.core.fsutil.folder import check_folder, publish
from octlm.core.home import ID_PATTERN, Home, validate_id
from octlm.core.records import ShownFingerprints
from octlm.core.records.freeform import ConfigTree
from octlm.exchange.results import TrackerExported, TrackerRun
from octlm.exchange.trackers import TRACKERS, RunOut
from octlm.store import experiments
from octlm.store.registry import TRAINING_KINDS, Registry, RunRow
from octlm.store.runs import runfile

SEED = "training.seed"
MAX_GROUP = 120  # characters of a group's folder name made of its keys
UNSAFE = re.compile(r"[^A-Za-z0-9._=,+-]")  # what a folder name keeps of a value; the rest becomes "_"


def check_extra(tracker: str) -> None:
    """BadInput naming the extra to install when a package the tracker's writer needs is missing."""
    missing = [name for name in TRACKERS[tracker].needs if importlib.util.find_spec(name) is None]
    if missing:
        raise BadInput(
            f"export {tracker} needs {' and '.join(missing)}: install the trackers extra, "
            "pip install 'octlm[trackers]' (or pip install -e '.[trackers]' in a clone)"
        )


def export_runs(home: Home, tracker: str, names: list[str], output: Path, force: bool = False) -> TrackerExported:
    """Write the runs ``names`` say (IDs and sweeps, in order, each once) for ``tracker`` into the folder ``output``."""
    check_extra(tracker)
    target = Path(os.path.abspath(output))
    check_folder(home.root, target, force)
    ids, skipped = runs_named(home, names)
    runs = gathered(home, ids)
    written: list[TrackerRun] = []

    def build(folder: Path) -> list[str]:
        for run in runs:
            files = TRACKERS[tracker].write(folder, run)
            written.append({"id": run.experiment_id, "group": run.group, "records": len(run.records), "files": files})
        return [name for item in written for name in item["files"]]

    publish(target, force, build)
    return {"tracker": tracker, "dir": str(target), "runs": written, "skipped": skipped}


def runs_named(home: Home, names: list[str]) -> tuple[list[str], list[str]]:
    """(the IDs to export, a sweep's trials left out as they have no records yet); BadInput for a name that is
    neither, or an ID named that has no run file."""
    ids: list[str] = []
    skipped: list[str] = []
    with Registry(home.registry, create=False) as registry:
        for name in names:
            sweep = None if ID_PATTERN.fullmatch(name) else registry.sweep(name)
            if sweep is None and not ID_PATTERN.fullmatch(name):
                sweeps = ", ".join(row["name"] for row in registry.sweeps()) or "none yet"
                raise BadInput(f"{name!r} is neither an experiment ID nor a sweep (sweeps: {sweeps})")
            named = [trial["experiment_id"] for trial in registry.trials(sweep["id"])] if sweep else [name]
            recorded = [i for i in named if runfile.read(home.run_file(validate_id(i)))]
            if sweep is None and not recorded:
                if registry.experiment(name) is None and not home.config_path(name).exists():
                    raise BadInput(
                        f"unknown experiment {name}: not in {home.registry.name} and no {home.config_path(name)}"
                    )
                raise BadInput(f"{name} has no records yet ({home.run_file(name)}): train it first, or leave it out")
            ids += recorded
            skipped += [i for i in named if i not in recorded]
    return list(dict.fromkeys(ids)), [i for i in dict.fromkeys(skipped) if i not in ids]


def gathered(home: Home, ids: list[str]) -> list[RunOut]:
    """Each run as a tracker is given it, with its group."""
    with Registry(home.registry, create=False) as registry:
        kept = registry.configs()
        found = {i: _known(home, i, kept, [r for r in registry.runs(i) if r["kind"] in TRAINING_KINDS]) for i in ids}
    named = groups({i: config for i, (config, _, _) in found.items()})
    records = {i: [r for r in runfile.read(home.run_file(i)) if isinstance(r.get("step"), int)] for i in ids}
    return [RunOut(i, named[i], records[i], *found[i]) for i in ids]


def _known(
    home: Home, experiment_id: str, kept: dict[str, ConfigTree], rows: list[RunRow]
) -> tuple[ConfigTree, ShownFingerprints, float]:
    """An experiment's config, fingerprints (as ``show ID`` says them) and when its first training run began."""
    fingerprint: str | None
    if home.config_path(experiment_id).exists():
        config = experiments.load(home, experiment_id)
        tree, fingerprint = config.to_dict(), config.fingerprint
    else:  # known to the registry without its YAML here (imported records): the registry's copy
        tree = kept.get(experiment_id, {})
        fingerprint = next((row["config_hash"] for row in reversed(rows) if row["config_hash"]), None)
    data = next((row["data_hash"] for row in reversed(rows) if row["data_hash"]), None)
    tokenizer = next((row["tokenizer_hash"] for row in reversed(rows) if row["tokenizer_hash"]), None)
    started = next((_seconds(row["started"]) for row in rows if row["started"]), 0.0)
    return tree, {"config": fingerprint, "data": data, "tokenizer": tokenizer}, started


def _seconds(stamp: str) -> float:
    try:
        return datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return 0.0


def groups(configs: dict[str, ConfigTree]) -> dict[str, str]:
    """{ID: the folder of its configuration's replicates}: named by the keys whose values set the groups apart."""
    keys = {i: _replicate_key(config) for i, config in configs.items()}
    firsts = {key: configs[i] for i, key in reversed(keys.items())}  # a configuration of each group
    flats = {key: _fingerprinted(config) for key, config in firsts.items()}
    varying = sorted(
        {k for flat in flats.values() for k in flat if len({canonical(f.get(k)) for f in flats.values()}) > 1}
    )
    names = {key: _name(flats[key], varying, key) for key in flats}
    return {i: names[key] for i, key in keys.items()}


def _fingerprinted(config: ConfigTree) -> ConfigTree:
    return {k: v for k, v in flatten(dict(config)).items() if k not in BOOKKEEPING and k != SEED}


def _replicate_key(config: ConfigTree) -> str:
    """What replicates share: the fingerprinted keys but the seed (``views.sweeps.replicates.key``)."""
    return canonical(_fingerprinted(config))


def _name(flat: ConfigTree, varying: list[str], key: str) -> str:
    digest = "config-" + hashlib.sha256(key.encode()).hexdigest()[:8]
    parts = [f"{k}={v if isinstance(v, str) else canonical(v)}" for k, v in flat.items() if k in varying]
    name = UNSAFE.sub("_", ",".join(sorted(parts)))
    return name if name and len(name) <= MAX_GROUP else digest
