"""An untrusted home runs nothing: its git config, a package planted in the working directory."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import cli, json_out

OCTLM = Path(sys.executable).with_name("octlm")  # the console script, as a user runs it (not `python -m`)


ENV = {**os.environ, "NO_COLOR": "1", "OMP_NUM_THREADS": "1"}  # one core each: other tests may run beside


def last_run(home: Path) -> dict:
    return json_out(cli(home, "show", "EXP-001", "--json"))["runs"][-1]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_homes_git_config_never_runs(home: Path, tmp_path: Path) -> None:
    marker = tmp_path / "fsmonitor-ran"
    git = ["git", "-C", str(home), "-c", "user.name=t", "-c", "user.email=t@t"]
    for args in (["init", "-q"], ["add", "experiments", "corpus"], ["commit", "-qm", "home"]):
        subprocess.run([*git, *args], check=True, timeout=30)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30).stdout.strip()
    (home / ".gitattributes").write_text("* filter=evil\n")  # a clean filter that `git status` would run
    for key, value in (("core.fsmonitor", f"touch {marker}"), ("filter.evil.clean", f"touch {marker}; cat")):
        subprocess.run([*git, "config", key, value], check=True, timeout=30)
    (home / "corpus" / "doc0.txt").touch()  # stale stat data: git would re-read the file through the filter
    assert cli(home, "train", "EXP-001", "-q").exit_code == 0
    assert not marker.exists()
    assert last_run(home)["git_commit"] == head


def test_a_planted_package_in_the_working_directory_never_runs(home: Path, tmp_path: Path) -> None:
    marker = tmp_path / "planted-ran"
    planted = tmp_path / "cwd" / "octlm"
    planted.mkdir(parents=True)
    (tmp_path / "cwd" / "octlm_cli").symlink_to(planted)
    (planted / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    (planted / "__main__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    done = subprocess.run(
        [str(OCTLM), "--home", str(home), "verify-resume", "EXP-001", "--split-at", "6", "--json"],
        cwd=planted.parent,
        capture_output=True,
        text=True,
        timeout=180,
        env=ENV,
    )
    assert not marker.exists()
    assert done.returncode == 0, done.stderr
    assert json_out(done)["identical"]


# ---------------------------------------------------------------- issue 45 item 18d: a home the user cannot write

DROP = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-dac_override,-dac_read_search"]


@pytest.fixture(scope="module")
def trained_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from conftest import write_corpus, write_experiment

    home = write_corpus(tmp_path_factory.mktemp("trained") / "home")
    write_experiment(home, training={"steps": 4, "eval_interval": 2, "warmup_steps": 1}, checkpoint={"interval": 2})
    assert cli(home, "train", "EXP-001", "-q").exit_code == 0
    return home


def _read_only(home: Path) -> list[Path]:
    """Every folder and file of ``home`` made read-only (chmod a-w): what a home is to a user who cannot write it,
    for root less its permission override (``DROP``)."""
    paths = [home, *home.rglob("*")]
    for path in paths:
        path.chmod(path.stat().st_mode & ~0o222)
    return paths


def _state(home: Path) -> dict[str, tuple[int, int, int]]:
    return {
        str(p.relative_to(home)): (p.stat().st_mode, p.stat().st_size, p.stat().st_mtime_ns) for p in home.rglob("*")
    }


def _dropped(home: Path, *args: str) -> subprocess.CompletedProcess:
    command = [*DROP, sys.executable, "-m", "octlm", "--home", str(home), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=ENV)


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv")
@pytest.mark.parametrize("lock", ["its lock file", "no lock file", "no locks folder"])
def test_pack_works_in_a_home_the_user_cannot_write(trained_home: Path, tmp_path: Path, lock: str) -> None:
    """Issue 45 item 18d: ``pack`` only reads the home, but took the experiment's lock as a writer does, so a home
    the user cannot write could not be packed. It packs now, the same bytes as where the home can be written, with
    nothing written in the home; only the output is written."""
    home = shutil.copytree(trained_home, tmp_path / "home", symlinks=True)
    want = tmp_path / "writable.tar"
    assert cli(home, "pack", "EXP-001", "-o", str(want)).exit_code == 0
    if lock != "its lock file":
        (home / "locks" / "EXP-001.lock").unlink()
    if lock == "no locks folder":
        (home / "locks").rmdir()
    paths, out = _read_only(home), tmp_path / "out"
    out.mkdir()
    try:
        if _dropped(home, "new").returncode == 0:
            pytest.skip("cannot drop the permission override here")
        before = _state(home)
        done = _dropped(home, "pack", "EXP-001", "-o", str(out / "EXP-001.tar"))
        assert done.returncode == 0, done.stderr
        assert (out / "EXP-001.tar").read_bytes() == want.read_bytes()
        assert _state(home) == before
    finally:
        for path in paths:
            path.chmod(path.stat().st_mode | 0o200)


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv")
def test_pack_in_a_home_the_user_cannot_write_waits_for_no_run(trained_home: Path, tmp_path: Path) -> None:
    """The shared lock it takes there still refuses while the home's owner trains the experiment (one line, exit 3,
    nothing written), as the writer's lock does."""
    from octlm.store.locking import ExperimentLock

    home = shutil.copytree(trained_home, tmp_path / "home", symlinks=True)
    out = tmp_path / "EXP-001.tar"
    paths = _read_only(home)
    try:
        with ExperimentLock(home / "locks" / "EXP-001.lock", "EXP-001"):  # the owner's run, holding it
            done = _dropped(home, "pack", "EXP-001", "-o", str(out))
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 3 and len(lines) == 1 and "being trained by pid" in lines[0], done.stderr
        assert not out.exists()
    finally:
        for path in paths:
            path.chmod(path.stat().st_mode | 0o200)
