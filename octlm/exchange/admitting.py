"""Whether an experiment from another home may come in (torch-free), checked by ``importing.plan`` before anything
is written: one known here by its UUID only under the same config fingerprint and trained on the same data and
tokenizer (a copy changed and retrained is another experiment: exit 3); a new one only under an ID free here (no
row, no files), with its YAML loading under that ID, and data sources inside this home and ``OCTLM_DATA_ROOT``
(unless ``--allow-outside-sources``: training would read them here).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import yaml

from octlm import config as cfg
from octlm.core.errors import BadInput, Refused
from octlm.core.home import Home
from octlm.exchange.records import TRACKS, ExportedExperiment, ExportedRun
from octlm.store.merge import ExchangeRegistry


def same_config(registry: ExchangeRegistry, item: ExportedExperiment, target: str) -> None:
    """An experiment known here by its UUID is merged only under the same config fingerprint: a copied home,
    changed and retrained, holds another experiment under the same UUID."""
    row = registry.experiment(target)
    here = row["config_hash"] if row else None
    theirs = item.get("config_hash")
    if isinstance(here, str) and isinstance(theirs, str) and here != theirs:
        raise Refused(
            f"{item['id']} is experiment {item['uuid']}, here as {target} with config fingerprint {here[:12]}, but the "
            f"file's has config fingerprint {theirs[:12]}: a copy changed and retrained is another experiment; nothing "
            f"was written (in its home, fork it with `octlm new --from {item['id']}` and move the fork)"
        )


def same_data(registry: ExchangeRegistry, item: ExportedExperiment, target: str, runs: list[ExportedRun]) -> None:
    """An experiment known here is merged only when its runs there trained on the data and tokenizer its runs here
    trained on: a copy retrained on changed data is another experiment (its hashes would read as this one's). A
    run's hashes are optional fields of its record (a run that failed before reading its data has none): one left
    out says nothing either way, as one written null does."""
    mine = [run for run in runs if run["experiment_uuid"] == item["uuid"]]
    local = registry.runs(target)
    for what, here, theirs in (
        ("data", {str(r["data_hash"]) for r in local if r.get("data_hash")}, {str(r.get("data_hash")) for r in mine}),
        (
            "tokenizer",
            {str(r["tokenizer_hash"]) for r in local if r.get("tokenizer_hash")},
            {str(r.get("tokenizer_hash")) for r in mine},
        ),
    ):
        theirs -= {"None", ""}
        if here and theirs - here:
            raise Refused(
                f"{item['id']} is experiment {item['uuid']}, here as {target}, but the file's runs trained on other "
                f"{what} ({sorted(theirs - here)[0][:12]}, here {sorted(here)[0][:12]}): a copy retrained on changed "
                f"{what} is another experiment; nothing was written (in its home, fork it with "
                f"`octlm new --from {item['id']}` and move the fork)"
            )


def taken(home: Home, registry: ExchangeRegistry, experiment_id: str) -> bool:
    paths = (
        home.config_path(experiment_id),
        home.checkpoint_dir(experiment_id),
        home.run_file(experiment_id),
        home.run_file(experiment_id, TRACKS["overfit"]),
    )
    return registry.experiment(experiment_id) is not None or any(path.exists() for path in paths)


def renamed_yaml(item: ExportedExperiment, target: str) -> tuple[str, tuple[str, ...]]:
    """The experiment's YAML as exported, with its ``id`` set to ``target`` when renamed, checked to load; and its
    data.sources."""
    text, origin = item["yaml"], f"{item['id']}.yaml (imported)"
    raw = cfg.parse_yaml(text, origin)
    if not isinstance(raw, dict):
        raise BadInput(f"{origin}: not a config (a mapping of sections)")
    if raw.get("id") != target:
        raw["id"] = target
        dumped: str = yaml.safe_dump(raw, sort_keys=False, default_flow_style=False)
        text = dumped
    return text, cfg.from_dict(cfg.resolve_preset(raw, origin), origin).data.sources


def refuse_outside(home: Home, sources: Sequence[str], experiment_id: str) -> None:
    """Refused when a data source names files outside the home and OCTLM_DATA_ROOT (relative ones resolve as
    training resolves them: against OCTLM_DATA_ROOT when set, else the home)."""
    roots = [Path(os.path.realpath(home.root))]
    if os.environ.get("OCTLM_DATA_ROOT"):
        roots.append(Path(os.path.realpath(os.environ["OCTLM_DATA_ROOT"])))
    for source in sources:
        if source.startswith("builtin:"):
            continue
        where = Path(os.path.realpath(roots[-1] / os.path.expanduser(source)))
        if not any(where.is_relative_to(root) for root in roots):
            raise Refused(
                f"{experiment_id}: data.sources {source[:200]!r} names files outside this home and OCTLM_DATA_ROOT: "
                "training would read them here; nothing was written (pass --allow-outside-sources if you mean it)"
            )
