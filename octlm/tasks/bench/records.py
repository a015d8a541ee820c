"""What ``octlm bench --json`` writes, typed once: a plain bench (``BenchReport``, a row per precision), bench
``--nproc N`` (``RanksReport``, a row per precision and variant) and bench over determinism profiles
(``ByProfile``). Torch-free: the CLI's tables read them too.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict


class Machine(TypedDict):
    """Where it ran. A plain bench adds its threads and tier; bench --nproc its cores."""

    platform: str
    processor: str
    torch: str
    device: str
    threads: NotRequired[int]
    determinism: NotRequired[str]
    cores: NotRequired[int | None]


class Header(TypedDict):
    """What every bench report starts with: the model, the (global) batch, the steps timed and the machine."""

    experiment: str | None
    preset: str | None
    parameters: int
    tokens_per_step: int
    steps_timed: int
    compile: bool
    machine: Machine


class Measured(TypedDict):
    """One precision of a plain bench: the step (medians), MFU against this machine's matmul peak, the checkpoint."""

    precision: str
    parameters: int
    ms_per_step: float
    cpu_ms_per_step: float
    tokens_per_second: float
    model_flops_per_second: float
    matmul_peak_flops_per_second: float
    matmul_peak_by_size: dict[str, float]  # square size -> FLOP/s
    mfu: float
    checkpoint_bytes: int
    checkpoint_save_seconds: float
    checkpoint_load_seconds: float
    checkpoint_cost_at_interval: float
    first_step_fresh_seconds: float
    first_step_resumed_seconds: float
    resume_to_fresh_ratio: float


class BenchReport(Header):
    """What ``octlm bench --json`` writes: the header, then a row per precision."""

    results: list[Measured]
    bf16_over_fp32_tokens_per_second: NotRequired[float]  # when both were measured
    bf16_over_fp32_matmul_peak: NotRequired[float]


class RankTimes(TypedDict):
    """What one rank measured: each step's seconds, each gradient sum's seconds, its threads."""

    steps: list[float]
    reduces: list[float]
    threads: int


class PrecisionFigures(TypedDict):
    """One precision on one variant, from every rank's times."""

    precision: str
    ranks: int
    threads_per_rank: int
    ms_per_step: float
    tokens_per_second: float
    all_reduce_ms: float
    all_reduce_longest_ms: float
    all_reduce_share: float


class RanksRow(PrecisionFigures):
    """A row of bench --nproc: the figures, then (from the user's process) the medians over the rounds."""

    parameters: int
    speed_up: float | None  # over one process with the seed's step (none in a variant's own report)
    mode: NotRequired[str]  # "per rank" or "K pieces"
    pieces: NotRequired[int]
    rounds: NotRequired[int]
    tokens_per_second_by_round: NotRequired[list[float]]
    spread: NotRequired[float]  # (max - min) / median of tokens/s over the rounds
    load_average: NotRequired[float]
    others_busy_cores: NotRequired[float | None]


class RanksReport(Header):
    """What ``octlm bench --nproc N --json`` writes: the header, then a row per precision and variant."""

    nproc: int
    results: list[RanksRow]
    rounds: NotRequired[int]
    load_warning: NotRequired[str | None]


class ProfileRun(BenchReport):
    determinism: str


class ByProfile(TypedDict):
    """bench over determinism profiles: per profile and precision the medians, and their ratios to the first's."""

    profiles: list[str]
    rounds: int
    median_tokens_per_second: dict[str, dict[str, float]]
    ratio: dict[str, dict[str, float]]
    median_cpu_ms_per_step: dict[str, dict[str, float]]
    cpu_cost: dict[str, dict[str, float]]  # CPU time of a step over the first profile's: above 1 costs more
    runs: list[ProfileRun]
