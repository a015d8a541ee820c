"""The determinism tiers (``training.determinism``): one ``Tier`` record each, in one table, ``TIERS``.

Everything octlm does per tier reads the record: the config's choices and the key's documentation
(``training_section``: ``documentation``, hence ``octlm config keys`` and docs/reference/config.md), the
``--determinism`` options of ``canary`` and ``bench``, the environment pinned before torch loads and the processor it
needs (``runtime.determinism``, ``runtime.machine``), the canary and what it says the tier covers (``train.canary``,
``octlm canary``), what a checkpoint records of it and how a resume compares it
(``runtime.machine.check_environment``). Adding a tier: its record here, then its row in docs/guide/determinism.md's
table with its measured figures; tests/runtime/test_determinism.py holds every record to the choices, the
documentation and the guide, and runs a real ``octlm canary`` under it (docs/modules.md, "Families")."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Tier:
    """One determinism tier."""

    name: str
    help: str  # what it pins and which machines agree under it, in ``training.determinism``'s documentation
    pins: dict[str, str] = field(default_factory=dict)  # environment set before torch loads (MKL, ATen, oneDNN)
    capability: str | None = None  # what torch.backends.cpu.get_cpu_capability() must say under it
    covers: str = "this machine only"  # which machines continue each other's runs ({vendor}: MKL's path)
    cost: str = "1x"  # its step time against local's, measured on CPU (docs/performance.md)
    strict_with_pieces: bool = True  # with canonical pieces, MKL's strict mode makes the thread count irrelevant
    across_vendors: bool = False  # machines of both vendors agree (else a move across MKL paths is named)
    mkl_intel: bool = False  # MKL runs its Intel path on every vendor's processor (``runtime/native/mkl``)
    # The canary's digest at 1 thread under the tier, by torch release: a run under a tier that has one checks this
    # machine against it at every start and refuses, naming ``fallback``, when they differ or this torch has none.
    golden: dict[str, str] = field(default_factory=dict)
    fallback: str = ""

    @property
    def pins_kernels(self) -> bool:
        """Whether the tier pins kernels: a checkpoint then records the canary, and a resume compares it."""
        return bool(self.pins)


_AVX2 = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
TIERS: dict[str, Tier] = {
    tier.name: tier
    for tier in (
        Tier("local", "is exact on this machine alone, nothing pinned"),
        Tier(
            "vendor",
            "pins them across one vendor's x86-64 processors",
            pins={"MKL_CBWR": "AVX2,STRICT", **_AVX2},
            capability="AVX2",
            covers="x86-64 processors with AVX2 on which MKL takes {vendor}, at the same torch release and threads",
            cost="1.19x (day1), 1.48x (day2)",
        ),
        Tier(
            "cross-vendor",
            "pins them across Intel and AMD (MKL's Intel path, needs a C compiler)",
            pins={"MKL_CBWR": "AVX2,STRICT", **_AVX2},
            capability="AVX2",
            covers="any x86-64 processor with AVX2, Intel or AMD, running MKL's Intel AVX2 path, at the same torch "
            "release and threads",
            cost="1.19x (day1), 1.48x (day2) on Intel; 0.96x (day1), 0.99x (day2) on AMD",
            across_vendors=True,
            mkl_intel=True,
            golden={"2.13.0+cpu": "69deddf322540093"},
            fallback="portable",
        ),
        Tier(
            "portable",
            "pins them across Intel and AMD, no C compiler needed (2-3x slower)",
            pins={"MKL_CBWR": "COMPATIBLE", **_AVX2},
            capability="AVX2",
            covers="any x86-64 processor with AVX2, Intel or AMD, at the same torch release and thread count",
            cost="2.09x (day1), 3.24x (day2)",
            strict_with_pieces=False,  # MKL's COMPATIBLE branch has no strict mode
            across_vendors=True,
        ),
    )
}


def documentation() -> str:
    """``training.determinism``'s help text: its choices, what pinning gives, then each tier's ``help``."""
    return (
        "{choices}: a tier that pins the CPU kernels (MKL, ATen, oneDNN) lets machines whose `octlm canary` digests "
        "agree continue each other's runs bit for bit; " + "; ".join(f"{t.name} {t.help}" for t in TIERS.values())
    )
