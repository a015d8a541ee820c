"""Issue 45 item 12 (the attack on ``cross-vendor``'s library, ``runtime/native/mkl``, and the folders code is loaded
from, ``runtime/native/private``): the library's path never reaches a child in ``LD_PRELOAD`` (whose loader splits
it at spaces and colons); only the file in the checked folder is accepted, and that file is checked itself; a file
in place is never replaced under the processes that have it mapped; a build that does not answer is not kept; the
compiler is never found through an empty or relative ``PATH`` entry; folders are made 0700 by octlm whatever the
umask, a group of one counts as private, and nothing is created under a folder that would be refused.

A library loaded into this test process would change MKL's kernels for every later test in it: whatever loads one
into the global scope runs in a process of its own.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import REPO, write_corpus, write_experiment

from octlm.core.errors import BadInput
from octlm.runtime.native import compile_cache, mkl, private

CROSS = {"determinism": "cross-vendor", "threads": 1}
ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="changing a file's owner or group needs root")
needs_cc = pytest.mark.skipif(
    mkl.compiler({"PATH": os.environ.get("PATH", "")}) is None, reason="no C compiler here (.ci/run has one)"
)
# A library named as octlm's whose code, once loaded, says so in the file MARKER names.
PLANTED = """
#include <fcntl.h>
#include <unistd.h>
__attribute__((constructor)) static void planted(void) {
    int fd = open("MARKER", O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) { write(fd, "ran\\n", 4); close(fd); }
}
int mkl_serv_intel_cpu_true(void) { return 1; }
"""


def plant(at: Path, marker: Path) -> Path:
    """A library at ``at`` (folders made) whose constructor appends to ``marker``."""
    at.parent.mkdir(parents=True, exist_ok=True)
    source = at.parent / "planted.c"
    source.write_text(PLANTED.replace("MARKER", str(marker)))
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(at), str(source)], check=True, capture_output=True)
    return at


def script(tmp_path: Path, body: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    """``body`` run by a Python process of its own (this worktree's octlm), in ``cwd``, with ``env`` added."""
    environ = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "XDG_CACHE_HOME", "OCTLM_NATIVE_CACHE")}
    environ |= {"PYTHONPATH": str(REPO), **env}
    code = textwrap.dedent(body)
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=environ, capture_output=True, text=True, timeout=120
    )


PIN_AND_START_A_CHILD = """
    import os, subprocess, sys
    from octlm.config import Config
    from octlm.runtime import determinism
    config = Config().with_keys({"training.determinism": "cross-vendor"})
    determinism.pin(config)
    print("LD_PRELOAD" in os.environ)
    subprocess.run([sys.executable, "-c", "pass"], check=True)
"""


@needs_cc
@pytest.mark.parametrize("user", ["John Smith", "john:smith"])
def test_a_child_is_never_handed_a_path_its_loader_splits(tmp_path: Path, user: str) -> None:
    """The attack's variant without ranks: a run under a home folder with a space (or a colon) starts a child from an
    experiment home that holds ``Smith/.cache/octlm/native/<name>`` (or ``smith/...``): it must not run."""
    home_dir, experiment_home, marker = tmp_path / user, tmp_path / "experiments", tmp_path / "ran"
    home_dir.mkdir(mode=0o700)
    tail = user.replace(":", " ").split(" ")[1]
    plant(experiment_home / tail / ".cache" / "octlm" / "native" / mkl.NAME, marker)
    done = script(tmp_path, PIN_AND_START_A_CHILD, {"HOME": str(home_dir)}, experiment_home)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False"], done.stdout  # no path is handed on: the children load their own
    assert not marker.exists(), "the planted library ran in the child"
    assert (home_dir / ".cache" / "octlm" / "native" / mkl.NAME).is_file()  # the run's own was built and loaded


@needs_cc
@pytest.mark.slow
@pytest.mark.ranks
def test_the_ranks_of_a_run_under_a_home_with_a_space_load_only_the_checked_library(tmp_path: Path) -> None:
    """The attack as it was run: ``HOME="/home/John Smith"``, ``train --nproc 2`` started in an experiment home that
    holds ``Smith/.cache/octlm/native/<name>.so``. Its code never runs; both ranks train under the tier."""
    home_dir, marker = tmp_path / "John Smith", tmp_path / "ran"
    home_dir.mkdir(mode=0o700)
    root = write_corpus(tmp_path / "home")
    write_experiment(root, "EXP-001", training={**CROSS, "steps": 2, "warmup_steps": 1, "eval_interval": 2})
    plant(root / "Smith" / ".cache" / "octlm" / "native" / mkl.NAME, marker)
    env = {"HOME": str(home_dir), "OMP_NUM_THREADS": "1"}
    environ = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "XDG_CACHE_HOME", "OCTLM_NATIVE_CACHE")}
    done = subprocess.run(
        [sys.executable, "-m", "octlm", "--home", str(root), "train", "EXP-001", "--nproc", "2", "-q"],
        cwd=root,
        env={**environ, **env, "NO_COLOR": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert not marker.exists(), f"the planted library ran {marker.read_text().count('ran')} time(s)"
    assert (root / "checkpoints" / "EXP-001" / "step-000002.pt").is_file()


@needs_cc
def test_a_library_answering_mkl_from_anywhere_else_is_refused(tmp_path: Path) -> None:
    """A library of the same name preloaded from another folder (its code ran already: nothing undoes that) is not
    taken for octlm's: the tier is refused in one line naming it."""
    marker = tmp_path / "ran"
    elsewhere = plant(tmp_path / "elsewhere" / mkl.NAME, marker)
    cache = tmp_path / "cache"
    done = script(
        tmp_path, PIN_AND_START_A_CHILD, {"LD_PRELOAD": str(elsewhere), "XDG_CACHE_HOME": str(cache)}, tmp_path
    )
    assert done.returncode != 0 and "Refused" in done.stderr, done.stderr
    assert f"MKL is told that the processor is Intel by {elsewhere}, not by {cache}" in done.stderr


def _library(tmp_path: Path) -> tuple[dict[str, str], Path]:
    environ = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "PATH": os.environ["PATH"]}
    return environ, mkl.build(environ)


@needs_cc
def test_the_library_file_itself_is_checked(tmp_path: Path) -> None:
    """Made writable by others (an old octlm built it under umask 000), or a link in its place: refused in one line
    that names the file and says to remove it. Removed, it is built again."""
    environ, built = _library(tmp_path)
    mode = stat.S_IMODE(built.stat().st_mode)
    built.chmod(0o777)
    with pytest.raises(BadInput, match=f"{built}: is writable by other users.*remove it"):
        mkl.build(environ)
    built.unlink()
    real = tmp_path / "real.so"
    shutil.copy(mkl.build(environ), real)
    built.unlink()
    built.symlink_to(real)
    with pytest.raises(BadInput, match="is a symbolic link"):
        mkl.build(environ)
    built.unlink()
    assert mkl.build(environ) == built and not built.is_symlink()
    assert mode == stat.S_IMODE(built.stat().st_mode) == 0o500  # built readable and executable by its owner alone


@needs_cc
@needs_root
def test_a_library_file_of_another_user_is_refused(tmp_path: Path) -> None:
    environ, built = _library(tmp_path)
    os.chown(built, 12345, 12345)
    with pytest.raises(BadInput, match="belongs to another user"):
        mkl.build(environ)


def _compiler(tmp_path: Path, name: str, body: str) -> Path:
    wrapper = tmp_path / "compilers" / name
    wrapper.parent.mkdir(exist_ok=True)
    wrapper.write_text("#!/bin/sh\n" + body)
    wrapper.chmod(0o755)
    return wrapper


@needs_cc
def test_a_library_in_use_is_never_replaced(tmp_path: Path) -> None:
    """Four first runs at once, each building (a compiler that takes its time, so that all four find no library
    there): each keeps the file it loaded, none sees it replaced (before, 3 of 4 were refused at their next check)."""
    slow = _compiler(tmp_path, "slowcc", f'sleep 1\nexec {shutil.which("gcc")} "$@"\n')
    gate = tmp_path / "loaded"
    gate.mkdir()
    body = f"""
        import os, pathlib, time
        from octlm.runtime.native import mkl
        path = mkl.load()
        pathlib.Path({str(gate)!r}, str(os.getpid())).touch()
        deadline = time.monotonic() + 60
        while len(os.listdir({str(gate)!r})) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        mapped = [line.split(None, 5)[-1].strip() for line in open("/proc/self/maps") if mkl.NAME in line]
        assert mapped and not any(line.endswith("(deleted)") for line in mapped), mapped
        assert mkl.loaded() == path, mkl.loaded()
        print(os.stat(path).st_ino)
    """
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "CC": str(slow)}
    environ = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "OCTLM_NATIVE_CACHE")}
    environ |= {"PYTHONPATH": str(REPO), **env}
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(body)], env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for _ in range(4)
    ]
    results = [(p.wait(timeout=120), *p.communicate()) for p in processes]
    failed = [err.decode()[-300:] for code, _, err in results if code != 0]
    assert not failed, failed
    assert len({out for _, out, _ in results}) == 1  # one file, the same inode in all four


@needs_cc
@pytest.mark.parametrize(
    "bad",
    [
        "int mkl_serv_intel_cpu_true(void) { return 0; }\n",  # answers, wrongly
        "int something_else(void) { return 1; }\n",  # does not define it
    ],
)
def test_a_build_that_does_not_answer_is_not_kept(tmp_path: Path, bad: str) -> None:
    """A compiler that builds something else (a wrapper, a cross compiler's wrong target...): said in one line, and
    nothing kept, so the next run builds again instead of every run being refused for its canary."""
    source = tmp_path / "bad.c"
    source.write_text(bad)
    wrong = _compiler(tmp_path, "wrongcc", f'exec {shutil.which("gcc")} -shared -fPIC -o "$5" {source}\n')
    environ = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "PATH": os.environ["PATH"], "CC": str(wrong)}
    with pytest.raises(mkl.Unavailable, match="does not answer 1 to mkl_serv_intel_cpu_true"):
        mkl.build(environ)
    assert list((tmp_path / "cache" / "octlm" / "native").iterdir()) == []
    environ.pop("CC")
    assert mkl.build(environ).is_file()  # the system's compiler builds it as it should


@needs_cc
def test_a_kept_library_that_does_not_answer_is_refused_when_loaded(tmp_path: Path) -> None:
    """A file already in place (an older octlm's bad build) is asked again when it is loaded: one line naming it."""
    folder = tmp_path / "cache" / "octlm" / "native"
    folder.mkdir(parents=True, mode=0o700)
    source = tmp_path / "bad.c"
    source.write_text("int mkl_serv_intel_cpu_true(void) { return 0; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(folder / mkl.NAME), str(source)], check=True)
    body = """
        from octlm.runtime.native import mkl
        mkl.load()
    """
    done = script(tmp_path, body, {"XDG_CACHE_HOME": str(tmp_path / "cache")}, tmp_path)
    assert done.returncode != 0 and f"{folder / mkl.NAME} does not answer 1" in done.stderr, done.stderr


@needs_cc
@pytest.mark.parametrize("entry", ["", ".", "bin"])
def test_the_compiler_is_never_found_through_an_empty_or_relative_path_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry: str
) -> None:
    """Standing in a home that holds its own ``cc`` (and ``bin/cc``), with ``PATH`` naming the current folder (an
    empty entry, ``.``, or ``bin``): the system's compiler builds the library and the home's never runs."""
    marker = tmp_path / "ran"
    for planted in (tmp_path / "stand" / "cc", tmp_path / "stand" / "bin" / "cc"):
        planted.parent.mkdir(parents=True, exist_ok=True)
        planted.write_text(f"#!/bin/sh\necho ran >> {marker}\nexit 1\n")
        planted.chmod(0o755)
    monkeypatch.chdir(tmp_path / "stand")
    environ = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "PATH": f"{entry}:{os.environ['PATH']}"}
    found = mkl.compiler(environ)
    assert found is not None and os.path.isabs(found) and "stand" not in found
    assert mkl.build(environ).is_file() and not marker.exists()
    assert mkl.compiler({**environ, "CC": "cc"}) == found  # a name in CC is looked up the same way
    with pytest.raises(mkl.Unavailable, match="CC=./cc is a relative path"):
        mkl.compiler({**environ, "CC": "./cc"})
    with pytest.raises(mkl.Unavailable, match="CC=no-such-cc is not on the PATH"):
        mkl.compiler({**environ, "CC": "no-such-cc"})


def _levels(top: Path, bottom: Path) -> list[Path]:
    return [bottom, *[p for p in bottom.parents if top in p.parents]]


@pytest.mark.parametrize("make", ["compile cache", "native cache"])
def test_under_umask_002_every_folder_is_made_private_by_octlm(tmp_path: Path, make: str) -> None:
    """Debian's and Ubuntu's umask: ``~/.cache/octlm`` was made ``0775`` on the way, then refused as
    group-writable, so cross-vendor and training.compile failed on a folder octlm had just made."""
    environ = {"XDG_CACHE_HOME": str(tmp_path / "fresh" / ".cache")}
    before = os.umask(0o002)
    try:
        made = compile_cache.directory(environ) if make == "compile cache" else mkl.folder(environ)
    finally:
        os.umask(before)
    levels = _levels(tmp_path, made)
    assert [stat.S_IMODE(level.stat().st_mode) for level in levels] == [0o700] * len(levels)


def _group_of_many(uid: int) -> int | None:
    import grp
    import pwd

    for group in grp.getgrall():
        others = [a for a in pwd.getpwall() if a.pw_gid == group.gr_gid and a.pw_uid != uid]
        if others:
            return group.gr_gid
    return None


@needs_root
def test_a_group_of_one_is_private_as_openssh_judges_it(tmp_path: Path) -> None:
    """A group-writable folder whose group's one member is its owner (a user private group) is accepted, above the
    cache and as the cache; one whose group has other members is refused."""
    mine = os.getgid()
    if not private.group_of_one(mine, os.getuid()):
        pytest.skip("this user's group has other members here")
    many = _group_of_many(os.getuid())
    if many is None:
        pytest.skip("no group with another member here")
    above = tmp_path / "above"
    above.mkdir(mode=0o700)
    above.chmod(0o770)
    os.chown(above, os.getuid(), mine)
    folder = compile_cache.directory({"OCTLM_COMPILE_CACHE": str(above / "graphs")})
    folder.chmod(0o770)
    assert compile_cache.directory({"OCTLM_COMPILE_CACHE": str(folder)}) == folder
    os.chown(folder, os.getuid(), many)
    with pytest.raises(BadInput, match="graphs: is writable by other users"):
        compile_cache.directory({"OCTLM_COMPILE_CACHE": str(folder)})
    os.chown(folder, os.getuid(), mine)
    os.chown(above, os.getuid(), many)
    with pytest.raises(BadInput, match="above, a folder above it, is writable by other users"):
        compile_cache.directory({"OCTLM_COMPILE_CACHE": str(folder)})


@needs_root
@pytest.mark.parametrize("make", ["compile cache", "native cache"])
def test_root_with_a_users_home_creates_nothing_there(tmp_path: Path, make: str) -> None:
    """``sudo -E octlm ...`` (root, the user's HOME): refused before anything is made, so no folder of root's is left
    in the user's home to lock them out of their own cache."""
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, 12345, 12345)
    environ = {"XDG_CACHE_HOME": str(theirs / ".cache")}
    with pytest.raises(BadInput, match="theirs, a folder above it, belongs to another user"):
        compile_cache.directory(environ) if make == "compile cache" else mkl.folder(environ)
    assert list(theirs.iterdir()) == []
