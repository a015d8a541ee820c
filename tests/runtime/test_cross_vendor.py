"""The ``cross-vendor`` tier (issue 37 item 4): MKL's Intel AVX2 path on both vendors' processors, through a one-line
C library loaded before torch (``runtime/native/mkl``), checked against the tier's golden canary at every start.

Every run here is a new process (the tier must hold before torch loads, and loading the library into this test
process would change the kernels of every later test in it). The golden canary, ``69deddf322540093`` at 1 thread on
torch 2.13.0+cpu, is what this project's Intel Xeon computes under ``vendor`` and what its AMD EPYC computes under
``cross-vendor`` (docs/guide/determinism.md); the emulated processor of the other vendor must compute it too.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import made_once, octlm, write_corpus, write_experiment
from test_determinism import emulate, state_digest

from octlm.config.tiers import TIERS
from octlm.runtime.native import mkl

TIER = TIERS["cross-vendor"]
CROSS = {"determinism": "cross-vendor", "threads": 1}
# The emulated processor of the other vendor: an Intel with AVX-512 (MKL_CBWR holds it to AVX2) on an AMD box, an
# AMD (whose MKL path the library changes) on an Intel one.
OTHER = {"AuthenticAMD": "Skylake-Server", "GenuineIntel": "EPYC-Rome-v1"}


def make_home(root: Path) -> Path:
    write_corpus(root)
    write_experiment(root, "EXP-001", training=CROSS)
    return root


def checkpoints(home: Path) -> list[Path]:
    return sorted((home / "checkpoints").rglob("*.pt")) if (home / "checkpoints").exists() else []


@pytest.fixture(scope="session")
def cross_trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home whose cross-vendor EXP-001 was trained 0 -> 8 natively (checkpoints at 4 and 8), made once."""

    def build(folder: Path) -> str:
        root = make_home(folder / "home")
        result = octlm(root, "train", "EXP-001", "--until", "8", "-q")
        assert result.returncode == 0, result.stderr
        return str(root)

    return Path(made_once(tmp_path_factory, "cross-vendor-trained", build))


@pytest.mark.slow
def test_a_native_run_records_the_golden_canary_and_the_intel_path(cross_trained: Path) -> None:
    from octlm.train import checkpoint

    environment = checkpoint.read(cross_trained / "checkpoints" / "EXP-001" / "step-000008.pt").environment
    golden = TIER.golden[environment["torch"]]
    assert environment["canary"] == golden and environment["mkl"] == "Intel (interposed)"
    assert environment["determinism"].startswith("cross-vendor (MKL_CBWR=AVX2,STRICT")
    canary = octlm(cross_trained, "canary", "EXP-001")
    assert canary.returncode == 0 and "and this machine computes it: its runs start here" in canary.stdout, canary


def test_the_library_is_built_once_into_a_private_folder(tmp_path: Path) -> None:
    environ = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "PATH": os.environ["PATH"]}
    if mkl.compiler(environ) is None:
        pytest.skip("no C compiler here (.ci/run has one: torch.compile needs it too)")
    built = mkl.build(environ)
    assert built == tmp_path / "cache" / "octlm" / "native" / mkl.NAME and built.is_file()
    assert built.parent.stat().st_mode & 0o777 == 0o700
    before = built.stat().st_mtime_ns
    assert mkl.build(environ) == built and built.stat().st_mtime_ns == before  # not built again
    assert [p.name for p in built.parent.iterdir()] == [mkl.NAME]  # no scratch left behind
    assert b"mkl_serv_intel_cpu_true" in built.read_bytes()  # the one symbol it defines, in its symbol table


def test_without_a_c_compiler_a_run_is_refused_in_one_line_naming_portable(home: Path, tmp_path: Path) -> None:
    write_experiment(home, "EXP-001", training=CROSS)
    empty = tmp_path / "no-compilers"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("CC", "LD_PRELOAD", "OCTLM_NATIVE_CACHE")}
    env |= {"PATH": str(empty), "XDG_CACHE_HOME": str(tmp_path / "fresh-cache"), "NO_COLOR": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "octlm_cli", "--home", str(home), "train", "EXP-001", "-q"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 3, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert "cross-vendor cannot run here" in done.stderr and "no C compiler" in done.stderr
    assert "training.determinism: portable" in done.stderr
    assert checkpoints(home) == [] and not (home / "runs").exists()


@pytest.mark.slow
def test_a_machine_whose_canary_is_not_the_tiers_is_refused_before_training(home: Path) -> None:
    """MKL capped below AVX2 (``MKL_ENABLE_INSTRUCTIONS=SSE4_2``, as a container may set it) computes other bits:
    measured, canary 1c92a7b78d4bd0a6 against the tier's. The run is refused at its start, naming the fallback."""
    write_experiment(home, "EXP-001", training=CROSS)
    result = octlm(home, "train", "EXP-001", "-q", env={"MKL_ENABLE_INSTRUCTIONS": "SSE4_2"})
    assert result.returncode == 3, result.stderr
    line = result.stderr.strip()
    assert "\n" not in line and "this machine's canary is" in line and "MKL: Intel (interposed)" in line, line
    assert "use training.determinism: portable" in line
    assert checkpoints(home) == []
    canary = octlm(home, "canary", "EXP-001", env={"MKL_ENABLE_INSTRUCTIONS": "SSE4_2"})  # says so, and exits 0
    assert canary.returncode == 0 and "is refused here; training.determinism: portable covers" in canary.stdout


@pytest.mark.slow
@pytest.mark.emulated
def test_the_other_vendors_processor_continues_the_native_run_bit_for_bit(cross_trained: Path, tmp_path: Path) -> None:
    """Under qemu-user, a processor of the other vendor resumes the native run's step 4 to 8: its start's canary is
    the golden one (or it would refuse), the resume says the machines agree, and the weights are the native's."""
    from octlm.runtime import determinism

    home = tmp_path / "home"
    shutil.copytree(cross_trained, home, ignore=shutil.ignore_patterns("step-000008.pt"))
    model = OTHER[determinism.vendor()]
    process = emulate(model, home, "resume", "EXP-001", "--step", "4", "--until", "8")
    _, stderr = process.communicate(timeout=1200)
    said = "".join(line for line in stderr.splitlines(True) if not line.startswith("qemu-x86_64: warning"))
    assert process.returncode == 0, f"{model}: {said}"
    assert "this machine agrees with the one that wrote step-000004.pt" in said and "warning" not in said, said
    final = "checkpoints/EXP-001/step-000008.pt"
    assert state_digest(home / final) == state_digest(cross_trained / final)
