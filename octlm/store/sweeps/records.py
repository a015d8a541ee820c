"""A sweep's rows as the store reads them and the records its queue hands out (torch-free): the sweep with its spec,
its trials (with their open claim), a claim, the worker that takes one, halving's decisions; the events of its
history; and what the sweep commands write with ``--json`` (``SweepCreated`` ... ``SweepUnpacked``), kept here beside
the rows they are made of."""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

from octlm.core.records.freeform import ConfigTree
from octlm.store.migrations import Json


class Range(TypedDict):
    """One ``--range KEY=LOW:HIGH[:log]`` as a spec keeps it."""

    low: float
    high: float
    log: bool
    int: bool


class Shipped(TypedDict):
    """A sweep's mark while ``sweep pack`` has its trials in other homes (this home's, never shipped)."""

    to: str
    at: str
    trials: list[str]  # the experiment IDs not merged back yet


class SweepSpec(TypedDict, total=False):
    """What a sweep tries and how (``sweeps.spec``, JSON): every key is there in a sweep made by this octlm; an older
    sweep's spec may lack the later ones (``history``, ``shipped``, ``base_config``, ``sampler``), hence not total."""

    grid: dict[str, list[Any]]  # KEY: its values, as the config holds them (a config key's values are free-form)
    ranges: dict[str, Range]
    random: int
    seeds: int
    sampler: str  # a name of tasks/sweeps/planning/samplers.SAMPLERS
    trials: int | None
    parallel: int
    metric: str
    seed: int
    halving: list[int]  # the rungs' steps ([]: no halving)
    keep: float
    overrides: list[str]
    prefix: str
    base_config: ConfigTree  # the base experiment's config
    history: list[Retried | Extended]  # extend's and retry's events (``mending``)
    shipped: Shipped  # where ``sweep pack`` sent it, until ``sweep unpack`` brings every trial back


class SweepFields(TypedDict):
    """A sweep's row as it moves with the sweep (``sweep pack``'s manifest) and as its record beside the registry keeps
    it: these keys, in this order (``rows.SWEEP_FIELDS``), each as ``specs.SWEEP_ROW`` checks it."""

    name: str
    uuid: str
    base: str | None
    description: str | None
    spec: SweepSpec
    created: str | None


class TrialFields(TypedDict):
    """A trial's row as it moves with its sweep and as the sweep's record keeps it: these keys, in this order
    (``rows.TRIAL_FIELDS``), each as ``specs.TRIAL_ROW`` checks it."""

    experiment_id: str
    position: int
    params: Json
    group_key: str
    replicate: int
    seed: int
    status: str
    rung: int
    target_step: int
    value: float | None
    error: str | None


class SweepRow(TypedDict):
    id: int
    name: str
    uuid: str
    base: str | None
    description: str | None
    spec: SweepSpec
    created: str | None
    updated: str | None


class TrialRow(TypedDict):
    id: int
    sweep_id: int
    experiment_id: str
    position: int
    params: Json
    group_key: str
    replicate: int
    seed: int
    status: str
    rung: int
    target_step: int
    value: float | None
    error: str | None
    updated: str | None


class QueuedTrial(TrialRow):
    """A trial as ``trials`` reads it: with its open claim (None when unclaimed) and whether its process is gone."""

    claim_id: int | None
    host: str | None
    pid: int | None
    pid_start: int | None
    threads: int | None
    device: str | None
    claimed: str | None
    lost: bool


class Worker(TypedDict):
    """Who claims a trial: the worker process, and what it trains on."""

    host: str
    pid: int
    pid_start: int | None
    threads: int | None  # None: torch's default
    device: str


class Lost(TypedDict):
    """The process that held a trial before it was taken over."""

    host: str | None
    pid: int | None


class ClaimedTrial(TrialRow):
    """A trial as ``claim`` hands it to its worker: the trial's row, its new claim, and whom it was taken from."""

    claim_id: int
    trial_id: int
    host: str
    pid: int
    pid_start: int | None
    threads: int | None
    device: str
    claimed: str
    taken_over: Lost | None


class ClaimRow(TypedDict):
    id: int
    trial_id: int
    sweep_id: int
    experiment_id: str
    target_step: int | None
    host: str | None
    pid: int | None
    pid_start: int | None
    threads: int | None
    device: str | None
    claimed: str | None
    released: str | None
    outcome: str | None


class DecisionRow(TypedDict):
    id: int
    sweep_id: int
    rung: int
    step: int
    ranking: Json
    promoted: Json
    created: str | None


class RetriedTrial(TypedDict):
    was: str  # failed | stopped
    reason: str  # why it failed, on one line (its log's ``failed:`` line, shortened), else its status
    target_step: int  # where it trains to now


class Retried(TypedDict):
    """``sweep retry``'s event in the sweep's history: what was asked, each trial queued again and why it had
    stopped."""

    event: Literal["retried"]
    at: str
    trials: dict[str, RetriedTrial]
    asked: NotRequired[list[str]]  # the statuses retried (failed, stopped): ``--failed``, ``--stopped``


class ExtendAsked(TypedDict):
    """What ``sweep extend`` added, as its options say it: the seeds in all (None: not asked), each grid key's new
    values (as the config holds them), the more random draws."""

    seeds: int | None
    grid: dict[str, list[Any]]
    random: int


class Extended(TypedDict):
    """``sweep extend``'s event in the sweep's history: what was asked, how many trials it added and the grown seeds
    and grid."""

    event: Literal["extended"]
    at: str
    added: int
    seeds: int
    grid: dict[str, list[Any]]  # KEY: its values, as the config holds them
    asked: NotRequired[ExtendAsked]  # an event of an older octlm has none


class SweepRetried(Retried):
    """What ``octlm sweep retry --json`` writes: the event it added to the sweep's history."""

    name: str


class SweepExtended(TypedDict):
    """What ``sweep extend --json`` writes: the event (none but ``added`` 0 when nothing was new) and the trials."""

    name: str
    event: Literal["extended"]
    added: int
    trials: list[str]
    at: NotRequired[str]
    seeds: NotRequired[int]
    grid: NotRequired[dict[str, list[Any]]]
    asked: NotRequired[ExtendAsked]


class Made(TypedDict):
    """A trial as ``sweep new`` made it."""

    id: str
    params: ConfigTree  # {config key: value}
    seed: int
    description: str


class SweepCreated(TypedDict):
    """What ``octlm sweep new --json`` writes: the sweep, its spec as kept, and the trials made."""

    sweep: str
    id: int
    spec: SweepSpec
    trials: list[Made]


class SweepPacked(TypedDict):
    """What ``octlm sweep pack --json`` writes: the folder of each shard and the trials shipped."""

    sweep: str
    folders: list[str]  # one per shard
    trials: list[str]


class SweepUnpacked(TypedDict):
    """What ``octlm sweep unpack --json`` writes: what became of each trial, and whether anything changed."""

    sweep: str
    trials: dict[str, str]  # trial ID -> new | further | kept
    changed: bool


class RankedGroup(TypedDict):
    """One configuration at a rung, as halving ranks them (best first)."""

    group: str  # the configuration's key
    params: ConfigTree  # {config key: value}
    trials: list[str]  # its replicates' experiment IDs
    values: list[float | None]  # each replicate's metric
    value: float | None  # their mean; none when one failed
    sd: float | None
    promoted: NotRequired[bool]  # set by the decision
    late: NotRequired[bool]  # placed after the decision: a replicate that had failed ended there since (``retry``)
