"""The portable determinism profile (issue 17): a golden run, the canary, resume on "another" machine.

The profile must be set before torch is imported, so every run of a portable experiment here is a new
process (``octlm`` in a subprocess). The golden constants below were measured on this project's machine:
``cat /proc/cpuinfo | grep 'model name' | head -1`` says ``model name : AMD EPYC`` (family 25, model 17, a KVM
guest with AVX-512), Linux x86-64, glibc 2.36, Python 3.11, torch 2.13.0+cpu, 1 thread. Under the portable
profile they must come out the same on any x86-64 processor with AVX2 and the same torch release; under
``local`` they would not (the local canary here is ``4b8640b1b8c3d5b3``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CORPUS, cli, holds, made_once, octlm, write_experiment

from octlm.config.tiers import TIERS

GOLDEN_CANARY = "e8678dae20ac184d"  # `octlm canary --threads 1` under portable, on the machine above
# sha256 of EXP-001's weights and optimizer state at step 8 (``state_digest``; the tiny config of conftest, portable)
GOLDEN_STATE = "a1ede1f9f2ddf32ece12c38c6a037f8524de0c038356d888d0266cafa22b3ae9"
PORTABLE = {"determinism": "portable", "threads": 1}
PINNED = {"MKL_CBWR": "COMPATIBLE", "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}  # portable's


def state_digest(path: Path) -> str:
    """sha256 of a checkpoint's weights (by name) and optimizer state (by parameter, then name)."""
    from octlm.train import checkpoint

    record = checkpoint.read(path)
    digest = hashlib.sha256()
    tensors = [record.model[name] for name in sorted(record.model)]
    for index in sorted(record.optimizer["state"]):
        values = record.optimizer["state"][index]
        tensors += [values[name] for name in sorted(values)]
    for tensor in tensors:
        digest.update(tensor.contiguous().numpy().tobytes())
    return digest.hexdigest()


def make_home(root: Path, **training: object) -> Path:
    (root / "corpus").mkdir(parents=True)
    for i in range(10):
        (root / "corpus" / f"doc{i}.txt").write_text(CORPUS[i * 1000 : (i + 1) * 1000 + 500])
    write_experiment(root, "EXP-001", training={**PORTABLE, **training})
    return root


@pytest.fixture(scope="session")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home whose portable EXP-001 was trained 0 -> 8 in a new process (checkpoints at 4 and 8), made once for every
    worker (``made_once``); the tests read it only."""

    def build(folder: Path) -> str:
        root = make_home(folder / "home")
        result = octlm(root, "train", "EXP-001", "--until", "8", "-q")
        assert result.returncode == 0, result.stderr
        return str(root)

    return Path(made_once(tmp_path_factory, "portable-trained", build))


@pytest.mark.slow
def test_golden_weights_and_canary(trained: Path) -> None:
    from octlm.train import checkpoint

    final = trained / "checkpoints" / "EXP-001" / "step-000008.pt"
    assert state_digest(final) == GOLDEN_STATE
    environment = checkpoint.read(final).environment
    assert environment["canary"] == GOLDEN_CANARY and environment["threads"] == 1
    assert environment["determinism"].startswith("portable (MKL_CBWR=COMPATIBLE ATEN_CPU_CAPABILITY=avx2")
    canary = octlm(trained, "canary", "EXP-001", "--json")
    assert canary.returncode == 0, canary.stderr
    assert json.loads(canary.stdout)["digest"] == GOLDEN_CANARY
    holds(json.loads(canary.stdout), "octlm canary --json")


@pytest.mark.slow
def test_verify_resume_passes_under_portable(trained: Path) -> None:
    result = octlm(trained, "verify-resume", "EXP-001", "--split-at", "2", "--until", "4", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["identical"]
    resumed = json.loads(result.stdout)
    holds(resumed, "octlm verify-resume ID --json")
    for check in resumed["checks"]:
        holds(check, "octlm verify-resume ID --json: each of checks")


FAKED = (
    "import sys; from octlm.train import canary; from octlm.runtime import determinism; "
    "name, digest = sys.argv.pop(1), sys.argv.pop(1); "
    "determinism.processor = lambda: name; "
    "canary.digest = (lambda threads: digest) if digest != 'real' else canary.digest; "
    "sys.argv[0] = 'octlm'; from octlm.cli.app import main; main()"
)


def resume_on(home: Path, processor: str, digest: str, until: int) -> subprocess.CompletedProcess:
    """``octlm resume`` in a process whose processor name (and, unless 'real', canary digest) is faked."""
    command = [sys.executable, "-c", FAKED, processor, digest, "--home", str(home), "resume", "EXP-001"]
    env = {**os.environ, "NO_COLOR": "1", **PINNED}  # pinned before the faking imports torch
    return subprocess.run([*command, "--until", str(until)], capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.slow
def test_another_processor_agrees_by_its_canary(trained: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    shutil.copytree(trained, home)
    agreed = resume_on(home, "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz", "real", 10)
    assert agreed.returncode == 0, agreed.stderr
    assert "this machine agrees with the one that wrote step-000008.pt" in agreed.stderr
    assert "warning" not in agreed.stderr and "different environment" not in agreed.stderr
    differs = resume_on(home, "AMD EPYC 9654 96-Core Processor", "0123456789abcdef", 12)
    assert differs.returncode == 0, differs.stderr
    assert "does not agree with the one that wrote step-000010.pt" in differs.stderr
    assert "the resume will not be bit-identical" in differs.stderr
    assert "different environment" not in differs.stderr  # the processor itself is no reason under portable


@pytest.mark.slow
def test_portable_refuses_compile_and_bf16_on_cpu(tmp_path: Path) -> None:
    home = make_home(tmp_path / "home", compile=True)
    result = cli(home, "train", "EXP-001")
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "training.compile" in result.stderr and "portable" in result.stderr
    write_experiment(home, "EXP-002", training={**PORTABLE, "precision": "bf16", "device": "cpu"})
    bf16 = octlm(home, "train", "EXP-002")
    assert bf16.returncode == 2 and len(bf16.stderr.strip().splitlines()) == 1, bf16.stderr
    assert "training.precision: bf16 on a CPU is not covered by training.determinism: portable" in bf16.stderr


@pytest.mark.slow
def test_local_is_unchanged(home: Path) -> None:
    from octlm import config as cfg
    from octlm.train import checkpoint

    config = cfg.load(home / "experiments" / "EXP-001.yaml")
    assert not {"training.determinism", "training.threads"} & set(config.trajectory_dict())
    assert cli(home, "train", "EXP-001", "--until", "4", "-q").exit_code == 0
    environment = checkpoint.read(home / "checkpoints" / "EXP-001" / "step-000004.pt").environment
    assert "canary" not in environment and "determinism" not in environment
    assert environment["processor"]  # recorded, so that a local resume elsewhere says the processor changed


def test_environment_warnings_name_what_the_profile_cannot_pin() -> None:
    from octlm.runtime.machine import environment_warnings

    here = {"torch": "2.13.0", "device": "cpu", "threads": 2, "processor": "A", "canary": "x", "determinism": "p"}
    assert environment_warnings({**here, "processor": "B"}, here) == []
    (line,) = environment_warnings({**here, "torch": "2.12.0"}, here)
    assert "torch 2.12.0 -> 2.13.0" in line and "each torch release has kernels of its own" in line
    on_gpu = environment_warnings(here, {**here, "device": "cuda"})
    assert any("tiers pin CPU kernels only" in line for line in on_gpu)
    local = {key: value for key, value in here.items() if key not in ("canary", "determinism")}
    (line,) = environment_warnings({**local, "processor": "B"}, local)
    assert "processor B -> A" in line and "training.determinism: vendor pins them" in line


def test_bench_times_each_profile_in_processes_of_its_own(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from octlm.tasks.bench import plan as bench_plan

    started: list[list[str]] = []
    speeds = {"local": iter([100.0, 120.0]), "portable": iter([90.0, 96.0])}

    def child(argv: list[str]) -> dict:  # each profile's process, as `octlm bench ... --determinism P --json` prints
        started.append(argv)
        profile = argv[argv.index("--determinism") + 1]
        rate = next(speeds[profile])
        return {"results": [{"precision": "fp32", "tokens_per_second": rate, "cpu_ms_per_step": 1e4 / rate}]}

    monkeypatch.setattr(bench_plan, "_child", child)
    result = cli(home, "bench", "EXP-001", "--determinism", "local,portable", "--steps", "3", "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    holds(report, "octlm bench --determinism A,B --json")
    assert [argv[argv.index("--determinism") + 1] for argv in started] == ["local", "portable", "portable", "local"]
    assert all("--no-compile" in argv and "--json" in argv for argv in started)  # eager alike: portable refuses compile
    assert report["median_tokens_per_second"] == {"local": {"fp32": 110.0}, "portable": {"fp32": 93.0}}
    assert report["ratio"]["portable"]["fp32"] == round(93 / 110, 3)
    medians = report["median_cpu_ms_per_step"]
    assert report["cpu_cost"]["portable"]["fp32"] == round(medians["portable"]["fp32"] / medians["local"]["fp32"], 3)
    assert report["cpu_cost"]["local"]["fp32"] == 1.0
    assert cli(home, "bench", "EXP-001", "--determinism", "portable,nope").exit_code == 2


def test_threads_are_the_key_else_under_portable_the_first_start(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from octlm import config as cfg
    from octlm.runtime import machine as runtime

    asked: list[int] = []
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    monkeypatch.setattr(torch, "set_num_threads", asked.append)
    portable, local = cfg.Config().with_keys({"training.determinism": "portable"}), cfg.Config()
    runtime.set_threads(portable, recorded=4)  # a resume: the count the first start recorded
    runtime.set_threads(local, recorded=4)  # local: torch's own count, as before
    runtime.set_threads(local.with_keys({"training.threads": 3}), recorded=4)  # the key wins
    assert asked == [4, 3]


# -- under emulated processors (issue 29): qemu-user runs this Python and torch with another CPU's CPUID and
# instruction set, so the same wheel takes that processor's kernels (MKL by vendor, ATen by features).
QEMU = shutil.which("qemu-x86_64")
INTEL_MODELS, AMD_MODEL = ("Haswell",), "EPYC-Rome-v1"


def other_vendor_model() -> str:
    """An emulated model of the vendor this machine is not: a resume under it crosses vendors."""
    from octlm.runtime import determinism

    return "Haswell" if determinism.vendor() == "AuthenticAMD" else AMD_MODEL


def emulate(model: str, home: Path, *args: str) -> subprocess.Popen:
    """``octlm --home HOME ARGS`` under ``qemu-x86_64 -cpu MODEL`` (one thread: the golden config's)."""
    if QEMU is None:  # .ci/run installs it and sets OCTLM_REQUIRE_QEMU, so that CI never skips these
        missing = "qemu-x86_64 is missing: apt-get install qemu-user"
        if os.environ.get("OCTLM_REQUIRE_QEMU"):
            pytest.fail(missing)
        pytest.skip(missing)
    command = [QEMU, "-cpu", model, sys.executable, "-m", "octlm", "--home", str(home), *args]
    env = {**os.environ, "NO_COLOR": "1"}
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


@pytest.fixture(scope="session")
def emulated(trained: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, str]]:
    """Per emulated model, its home and stderr: the model of the other vendor resumes the native run's step 4 to
    8; the others train EXP-001 from nothing to 8. All at once (each one thread, a few minutes in all), and once for
    every worker (``made_once``)."""

    def build(folder: Path) -> dict[str, list[str]]:
        crossing = other_vendor_model()
        started = {}
        for model in (*INTEL_MODELS, AMD_MODEL):
            home = folder / model / "home"
            if model == crossing:
                shutil.copytree(trained, home)
                started[model] = (home, emulate(model, home, "resume", "EXP-001", "--step", "4", "--until", "8"))
            else:
                started[model] = (make_home(home), emulate(model, home, "train", "EXP-001", "--until", "8", "-q"))
        done = {}
        for model, (home, process) in started.items():
            _, stderr = process.communicate(timeout=1200)
            said = "".join(line for line in stderr.splitlines(True) if not line.startswith("qemu-x86_64: warning: TCG"))
            assert process.returncode == 0, f"{model}: {said}"
            done[model] = [str(home), said]
        return done

    return {model: (Path(home), said) for model, (home, said) in made_once(tmp_path_factory, "emulated", build).items()}


@pytest.mark.slow
@pytest.mark.emulated
@pytest.mark.parametrize("model", (*INTEL_MODELS, AMD_MODEL))
def test_golden_run_and_canary_under_emulation(emulated: dict[str, tuple[Path, str]], model: str) -> None:
    from octlm.train import checkpoint

    home, _ = emulated[model]
    final = home / "checkpoints" / "EXP-001" / "step-000008.pt"
    environment = checkpoint.read(final).environment
    assert environment["canary"] == GOLDEN_CANARY, f"{model} computes other bits than the native machine"
    assert state_digest(final) == GOLDEN_STATE


@pytest.mark.slow
@pytest.mark.emulated
def test_resume_crosses_vendors_bit_for_bit(emulated: dict[str, tuple[Path, str]], trained: Path) -> None:
    from octlm.train import checkpoint

    model = other_vendor_model()
    home, stderr = emulated[model]
    assert "this machine agrees with the one that wrote step-000004.pt" in stderr, stderr
    assert "warning" not in stderr
    resumed = checkpoint.read(home / "checkpoints" / "EXP-001" / "step-000008.pt")
    straight = trained / "checkpoints" / "EXP-001" / "step-000008.pt"
    assert resumed.environment["mkl"] != checkpoint.read(straight).environment["mkl"]  # MKL took another path
    assert state_digest(home / "checkpoints" / "EXP-001" / "step-000008.pt") == state_digest(straight)


def test_a_vendor_run_moved_to_another_vendor_names_the_tier_that_covers_it() -> None:
    from octlm.core.reporting import QuietReporter
    from octlm.runtime.machine import check_environment

    class Collected(QuietReporter):
        def __init__(self) -> None:
            self.warnings: list[str] = []

        def warn(self, message: str, again: bool = False) -> None:
            self.warnings.append(message)

    there = {"torch": "2.13.0", "device": "cpu", "threads": 1, "determinism": "vendor (MKL_CBWR=AVX2,STRICT ...)"}
    said = Collected()
    check_environment(
        {**there, "canary": "69deddf322540093", "mkl": "Intel"},
        {**there, "canary": "51a269859038b65f", "mkl": "AMD Zen"},
        "step-000004.pt",
        said,
    )
    (line,) = said.warnings
    assert "does not agree with the one that wrote step-000004.pt" in line
    assert (
        "MKL ran its Intel path there, AMD Zen here: training.determinism: cross-vendor or portable covers both vendors"
        in line
    )
    same_path = Collected()
    check_environment(
        {**there, "canary": "a", "mkl": "Intel"}, {**there, "canary": "b", "mkl": "Intel"}, "x.pt", same_path
    )
    assert "portable covers" not in same_path.warnings[0]  # the canaries differ for another reason: no false remedy


def test_the_tiers_and_what_each_covers(tmp_path: Path) -> None:
    from octlm import config as cfg
    from octlm.core.errors import ConfigError
    from octlm.runtime import determinism

    assert determinism.settings("portable")["MKL_CBWR"] == "COMPATIBLE"  # the one branch MKL honours on AMD too
    assert determinism.settings("vendor")["MKL_CBWR"] == "AVX2,STRICT"  # thread-count invariant on Intel
    assert determinism.settings("local") == {}
    assert "Intel or AMD" in determinism.covers("portable")
    assert "its AMD Zen path (as here)" in determinism.covers("vendor", "AMD Zen")
    assert cfg.Config().with_keys({"training.determinism": "vendor"}).training.determinism == "vendor"
    with pytest.raises(ConfigError, match="training.determinism"):
        cfg.Config().with_keys({"training.determinism": "intel"})


@pytest.mark.parametrize("name", list(TIERS))  # every member of the table: a new tier is tested without a line here
def test_every_tier_of_the_table_is_a_choice_of_the_config_and_the_commands_documented_and_in_the_guide(
    name: str,
) -> None:
    """Issue 34 item 2, issue 47 item 1: each record of the tiers' one table (config/tiers.TIERS) is a choice of
    training.determinism and of ``canary`` and ``bench --determinism``, the key's documentation carries its own
    ``help`` (``octlm config keys``, docs/reference/config.md), and docs/guide/determinism.md's table its pins and
    measured cost."""
    import typing

    from octlm.cli.commands import canary, tools
    from octlm.config import describe_keys
    from octlm.config.schema import DETERMINISMS

    assert list(TIERS) == list(DETERMINISMS)  # the table and the config's choices
    tier = TIERS[name]
    documented = next(key for key in describe_keys() if key["key"] == "training.determinism")["doc"]
    assert name in documented.split(":")[0] and f"{name} {tier.help}" in documented
    for option in (canary.CanaryDeterminismOption, tools.DeterminismOption):
        assert name in typing.get_args(option)[1].help.split(" (")[0]
    docs = Path(__file__).resolve().parents[2] / "docs"
    table = (docs / "guide" / "determinism.md").read_text()  # the guide's table: its pins, what it covers, its cost
    assert (
        f"`{name}`" in table
        and (tier.cost in table or not tier.pins)
        and all(f"{k}={v}" in table for k, v in tier.pins.items())
    )
    assert tier.help in (docs / "reference" / "config.md").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("name", list(TIERS))  # every member of the table: a new tier is tested without a line here
def test_every_tier_of_the_table_is_pinned_by_a_real_canary(name: str, tmp_path: Path) -> None:
    """Issue 34 item 2: a real ``octlm canary`` under each tier, in a process of its own (none of the variables a
    tier pins inherited), holds the tier's pins and says what it covers."""
    import json
    import subprocess
    import sys

    from octlm.runtime.determinism import VARIABLES

    tier = TIERS[name]
    env = {key: value for key, value in os.environ.items() if key not in VARIABLES}
    done = subprocess.run(
        [sys.executable, "-m", "octlm_cli", "--home", str(tmp_path), "canary", "--determinism", name, "--json"],
        capture_output=True,
        text=True,
        env={**env, "NO_COLOR": "1"},
        timeout=300,
        check=True,
    )
    said = json.loads(done.stdout)
    assert all(f"{key}={value}" in said["profile"] for key, value in tier.pins.items())
    assert said["covers"].startswith(tier.covers.split("{")[0])
    if tier.capability:
        assert said["capability"] == tier.capability
