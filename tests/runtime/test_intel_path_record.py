"""Issue 45 item 16: whether MKL was told that the processor is Intel (``cross-vendor``'s library, or one a user
preloads) is part of the environment record under every tier, and compared on resume as the kernel variables are:
warned of under ``local``, refused under a tier that pins kernels. On an AMD processor it changes MKL's kernels, so
a ``local`` run resumed without the library it was trained with continued silently on other bits."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import octlm, write_corpus, write_experiment

from octlm.core.errors import Refused
from octlm.core.reporting import QuietReporter
from octlm.runtime.machine import check_environment
from octlm.runtime.native import mkl
from octlm.train import checkpoint

TINY = {"steps": 4, "eval_interval": 2, "log_interval": 2, "warmup_steps": 1}
INTERPOSED = "Intel (interposed)"  # the record's MKL path when a library tells MKL the processor is Intel


class Collected(QuietReporter):
    def __init__(self) -> None:
        self.warnings: list[str] = []

    def warn(self, message: str, again: bool = False) -> None:
        self.warnings.append(message)


def test_a_change_of_what_mkl_is_told_is_warned_of_under_local_and_refused_under_a_tier() -> None:
    base = {"torch": "2.13.0", "device": "cpu", "threads": 1, "kernels": ""}
    for there, here in ((INTERPOSED, "AMD Zen"), ("AMD Zen", INTERPOSED), (INTERPOSED, "Intel")):
        said = Collected()
        check_environment({**base, "mkl": there}, {**base, "mkl": here}, "step-000002.pt", said)
        (line,) = said.warnings
        told = "told" if there == INTERPOSED else "not told"
        assert f"MKL was {told} that the processor is Intel when step-000002.pt was written" in line, line
        assert "not bit-identically" in line
    pinned = {**base, "determinism": "vendor (MKL_CBWR=AVX2,STRICT ...)", "canary": "51a269859038b65f"}
    with pytest.raises(Refused, match="MKL was told that the processor is Intel when x.pt was written, and is not now"):
        check_environment({**pinned, "mkl": INTERPOSED}, {**pinned, "mkl": "AMD Zen"}, "x.pt", Collected())
    same, old = Collected(), Collected()
    check_environment({**base, "mkl": INTERPOSED}, {**base, "mkl": INTERPOSED}, "x.pt", same)
    check_environment(base, {**base, "mkl": INTERPOSED}, "x.pt", old)  # a checkpoint that did not record it
    assert same.warnings == old.warnings == []


@pytest.mark.slow
def test_a_local_run_trained_with_the_library_preloaded_and_resumed_without_it_says_so(tmp_path: Path) -> None:
    """The attack: ``local`` trained with the library preloaded (as a worker that had pinned ``cross-vendor`` did),
    resumed without it. The record says which, the resume warns; under ``vendor`` it is refused."""
    library = mkl.build({"OCTLM_NATIVE_CACHE": str(tmp_path / "native"), "PATH": "/usr/bin:/bin"})
    home = write_corpus(tmp_path / "home")
    write_experiment(home, "EXP-001", training=TINY, checkpoint={"interval": 2})
    preloaded = {"LD_PRELOAD": str(library)}
    assert octlm(home, "train", "EXP-001", "--until", "2", "-q", env=preloaded).returncode == 0
    written = checkpoint.read(home / "checkpoints" / "EXP-001" / "step-000002.pt").environment
    assert written["mkl"] == INTERPOSED and written["kernels"] == ""
    resumed = octlm(home, "resume", "EXP-001", "-q")
    assert resumed.returncode == 0, resumed.stderr
    assert "MKL was told that the processor is Intel when step-000002.pt was written, and is not now" in resumed.stderr
    assert checkpoint.read(home / "checkpoints" / "EXP-001" / "step-000004.pt").environment["mkl"] != INTERPOSED
    write_experiment(home, "EXP-002", training={**TINY, "determinism": "vendor"}, checkpoint={"interval": 2})
    assert octlm(home, "train", "EXP-002", "--until", "2", "-q", env=preloaded).returncode == 0
    refused = octlm(home, "resume", "EXP-002", "-q")
    assert refused.returncode == 3 and "Traceback" not in refused.stderr, refused.stderr
    # Its canary differs too (the library's answer changes MKL's kernels here): warned of first, then the refusal.
    assert "MKL was told that the processor is Intel" in refused.stderr.strip().splitlines()[-1]
