"""An experiment against the first of ``show A B ...``: the verdicts on their final eval losses, in the order a
reviewer reads them (torch-free).

When both have seed replicates, the configuration-level verdict leads (``seeds``: the two configurations over their
seeds, paired by seed where they share their seeds); the run-level one follows, phrased as what it is (on these
blocks, this model's loss against that one's, ``noise.run_words``) and always saying that seed noise is not in its
error. Runs that may not be compared (other data, other tokenizers: ``comparable``) get no verdict on noise, only the
commands that would compare them. With several experiments after the first, each family of verdicts (the
configurations', the runs') is adjusted by Holm's method over its comparisons (``settle``), and the words are made
last, from the adjusted numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

from octlm.core.records import RunRecord
from octlm.core.records.freeform import ConfigTree
from octlm.views.compare import comparable, noise, seeds, student
from octlm.views.compare.noise import Error, Size, Verdict
from octlm.views.paired import Paired
from octlm.views.sweeps import replicates
from octlm.views.sweeps.replicates import Group


class SeedNoise(TypedDict):
    """Two experiments' replicate groups: whether their means differ within the seeds' (and the evaluation's) noise,
    and that in words."""

    within_seed_noise: bool | None
    seed_noise: str


class Versus(SeedNoise):
    """An experiment against the first one. ``configuration``: the two replicate groups' mean eval losses over their
    seeds (when both have replicates; it leads). ``run``: the two final evaluations, judged by the paired error over
    clusters of blocks when both read the same blocks (``paired``), else by the two errors combined (``combined_se``,
    ``test`` says which); seed noise is never in its error. ``comparable`` false (other data or tokenizers): no verdict,
    ``noise`` says why and what would compare them. ``within_noise``/``noise`` are the run-level verdict's,
    ``within_seed_noise``/``seed_noise`` the configuration-level one's; ``same_data_order`` whether the two trained on
    the same blocks in the same order (their receipts, at the most blocks both logged)."""

    id: str
    comparable: bool
    configuration: Verdict | None
    run: Verdict | None
    eval_loss_difference: float | None
    combined_se: float | None
    test: Literal["paired", "unpaired"]
    paired: Paired | None
    within_noise: bool | None
    noise: str
    same_data_order: bool | None
    data_order: str


@dataclass(frozen=True)
class Side:
    """One experiment as the verdicts need it: its run file's records, its replicate group and that group's members
    (each seed's final eval loss and evaluation block by block), its fingerprints and config."""

    id: str
    records: Sequence[RunRecord]
    group: Group | None = None
    members: list[seeds.Member] = field(default_factory=list)
    prints: Mapping[str, str | None] = field(default_factory=dict)
    config: ConfigTree = field(default_factory=dict)


@dataclass
class Pending:
    """A ``Versus`` whose words wait for Holm's adjustment, with what they are made from."""

    versus: Versus
    first: str
    unpaired: str
    compared: seeds.Compared | None = None
    scored_all: bool | None = None


def measure(first: Side, other: Side, paired: Paired | None, unpaired: str, min_effect: float) -> Pending:
    """``other`` against ``first``: every number of both verdicts, no words yet (``settle``)."""
    loss_a, loss_b = latest(first.records, "eval_loss"), latest(other.records, "eval_loss")
    se_a, se_b = latest(first.records, "eval_loss_se"), latest(other.records, "eval_loss_se")
    combined = math.hypot(se_a, se_b) if se_a is not None and se_b is not None else None
    why = comparable.reason(
        first.id, other.id, (first.prints, other.prints), paired is not None, _sources(other.config)
    )
    size = Size(loss_a, _pooled(first.group, other.group), min_effect)
    run: Verdict | None = None
    if why is None and paired is not None:
        run = noise.measured("run", "paired", paired["eval_loss_difference"], noise.paired_error(paired), size)
    elif why is None and loss_a is not None and loss_b is not None:
        df = _unpaired_df(first.records, other.records, se_a, se_b)
        run = noise.measured("run", "unpaired", loss_b - loss_a, Error(evaluation=combined, evaluation_df=df), size)
    compared, seed_noise = _configurations(first, other, why, min_effect)
    versus: Versus = {
        "id": other.id,
        "comparable": why is None,
        "configuration": compared.verdict if compared else None,
        "run": run,
        "eval_loss_difference": run["difference"]
        if run
        else (None if loss_a is None or loss_b is None else loss_b - loss_a),
        "combined_se": combined,
        "test": "paired" if paired is not None and run is not None else "unpaired",
        "paired": paired,
        "within_noise": run["within_noise"] if run else None,
        "noise": why or ("no eval loss to compare" if run is None else ""),
        "same_data_order": None,
        "data_order": "",
        "within_seed_noise": compared.verdict["within_noise"] if compared else seed_noise.get("within_seed_noise"),
        "seed_noise": seed_noise.get("seed_noise") or "",
    }
    versus["same_data_order"], versus["data_order"] = data_order(first.records, other.records)
    blocks = paired["blocks"] if paired is not None else None
    return Pending(versus, first.id, unpaired, compared, seeds.scored_all(first.config, blocks))


def _unpaired_df(
    first: Sequence[RunRecord], other: Sequence[RunRecord], se_a: float | None, se_b: float | None
) -> float:
    """Satterthwaite's degrees of freedom of two evaluations' errors combined, each at its clusters less one (the
    normal's where a run did not record its clusters)."""
    clusters = [latest(records, "eval_clusters") for records in (first, other)]
    if se_a is None or se_b is None or any(not isinstance(g, (int, float)) or g < 2 for g in clusters):
        return math.inf
    return student.satterthwaite([(se_a, clusters[0] - 1), (se_b, clusters[1] - 1)])


def _configurations(
    first: Side, other: Side, why: str | None, min_effect: float
) -> tuple[seeds.Compared | None, dict[str, Any]]:
    """The configuration-level comparison, or None and what is said instead (not comparable, a twin, a replicate of
    the first, no replicates, no spread)."""
    a, b = first.group, other.group
    if why is not None:
        return None, {"within_seed_noise": None, "seed_noise": "not comparable: no verdict over the seeds either"}
    if replicates.twins(first.config, other.config):
        return None, {
            "within_seed_noise": None,
            "seed_noise": f"{other.id} is a twin of {first.id} (the same config, seed included): no replicate, and "
            "their difference is not seed noise (exact training makes it 0)",
        }
    if a is not None and b is not None and other.id in a["ids"]:
        spread = replicates.shown(a["metrics"]["eval_loss"])
        return None, {
            "within_seed_noise": True,
            "seed_noise": f"{other.id} is a replicate of {first.id} (only training.seed differs): one configuration, "
            f"so their difference is seed noise; its replicates' eval loss is {spread}",
        }
    if a is None or b is None:
        missing = first.id if a is None else other.id
        return None, {
            "within_seed_noise": None,
            "seed_noise": f"{missing} has no replicates to judge seed noise by (`octlm new --from {missing} --seeds 3` "
            "makes some)",
        }
    size = Size(a["metrics"]["eval_loss"]["mean"], _pooled(a, b), min_effect)
    compared = seeds.configuration(first.members, other.members, size)
    if compared is None:
        return None, {
            "within_seed_noise": None,
            "seed_noise": "no seed spread to judge it by: fewer than two seeds with a final eval loss on a side "
            "(give each configuration --seeds 2 or more)",
        }
    return compared, {}


def _pooled(a: Group | None, b: Group | None) -> float | None:
    """The seeds' standard deviation of the eval loss, pooled over the groups that have one."""
    sds = [g["metrics"]["eval_loss"]["sd"] for g in (a, b) if g is not None and g["metrics"]["eval_loss"]["sd"]]
    return math.sqrt(sum(sd * sd for sd in sds) / len(sds)) if sds else None


def _sources(config: ConfigTree) -> list[str]:
    data = config.get("data")
    found = data.get("sources") if isinstance(data, dict) else None
    return [str(s) for s in found] if isinstance(found, list) else []


def settle(pending: list[Pending]) -> list[Versus]:
    """Holm's adjustment over each family of verdicts (the configurations', the runs'), then every verdict's words."""
    noise.adjust([p.versus["configuration"] for p in pending])
    noise.adjust([p.versus["run"] for p in pending])
    for p in pending:
        versus, configuration, run = p.versus, p.versus["configuration"], p.versus["run"]
        if configuration is not None and p.compared is not None:
            more = seeds.advice(p.compared, p.scored_all)
            configuration["words"] = seeds.words(configuration, p.first, versus["id"], p.compared.sizes, more)
            versus["within_seed_noise"], versus["seed_noise"] = configuration["within_noise"], configuration["words"]
        if run is not None:
            hint = "; the configurations' verdict above carries it" if configuration is not None else ""
            words = noise.run_words(run, p.first, versus["id"], p.unpaired, hint)
            if run["within_noise"] and not run["identical"]:
                words += f"; {noise.more_evaluation(p.scored_all)} narrow it"
            run["words"] = words
            versus["within_noise"], versus["noise"] = run["within_noise"], words
    return [p.versus for p in pending]


def sentences(first: str, found: Sequence[Versus]) -> list[str]:
    """What the comparison says in words, below the table: for each experiment after the first, the configurations'
    verdict first where there is one, then the two runs' (with the data order); or why they are not comparable."""
    said: list[str] = []
    for v in found:
        order = f"; {v['data_order']}" if v["same_data_order"] is not None else ""
        if not v["comparable"]:
            said.append(f"{v['id']} against {first}: {v['noise']}")
        elif v["configuration"] is not None:
            said.append(f"{v['id']} against {first}: {v['seed_noise']}")
            said.append(f"{v['id']} against {first}, these two runs: {v['noise']}{order}")
        else:
            said.append(f"{v['id']} against {first}: {v['noise']}{order}")
            said.append(f"{v['id']} against {first}, replicates: {v['seed_noise']}")
    return said


def latest(records: Sequence[RunRecord], key: str) -> Any:
    """The newest value of a field of a run file."""
    return next((value for record in reversed(records) if (value := record.get(key)) is not None), None)


def data_order(first: Sequence[RunRecord], other: Sequence[RunRecord]) -> tuple[bool | None, str]:
    """Whether two runs read the same blocks in the same order, from their receipts at the block counts both
    logged: the same up to the most such blocks, or different from the first count where they part."""
    a = {r["data_blocks"]: r.get("data_receipt") for r in first if r.get("data_blocks")}
    b = {r["data_blocks"]: r.get("data_receipt") for r in other if r.get("data_blocks")}
    common = sorted(set(a) & set(b))
    if not common:
        return None, "no receipts at a common block count to compare"
    parted = next((blocks for blocks in common if a[blocks] != b[blocks]), None)
    if parted is None:
        return True, f"the same blocks in the same order for the first {common[-1]:,}"
    return False, f"a different data order, by {parted:,} blocks"
