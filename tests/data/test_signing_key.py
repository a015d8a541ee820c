"""Issue 33 item 12: the token cache's signing key is no single point of failure. Whatever is wrong with the key (a
file others can read, a link, a state folder that cannot be written, a read-only HOME), ``train`` and ``prepare``
say so in one warning that names the key and its fix, keep no token file, and the run goes on."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import cli, json_out, octlm

KEY = Path("octlm") / "token-cache.key"


def _world_readable(state: Path) -> str:
    (state / KEY).parent.mkdir(parents=True)
    (state / KEY).write_bytes(os.urandom(32))
    (state / KEY).chmod(0o644)
    return "can be read by others (mode 0644)"


def _linked(state: Path) -> str:
    private = state.parent / "elsewhere.key"
    private.write_bytes(os.urandom(32))
    private.chmod(0o600)
    (state / KEY).parent.mkdir(parents=True)
    (state / KEY).symlink_to(private)
    return "is a symbolic link"


def _dangling(state: Path) -> str:
    (state / KEY).parent.mkdir(parents=True)
    (state / KEY).symlink_to(state / "nothing")
    return "is a symbolic link"


def _folder_is_a_file(state: Path) -> str:
    state.parent.mkdir(parents=True, exist_ok=True)
    state.write_text("not a folder")  # mkdir of the key's folder fails (as in a HOME that cannot be written)
    return "cannot be made or read"


def _short_key(state: Path) -> str:
    (state / KEY).parent.mkdir(parents=True)
    (state / KEY).write_bytes(b"short")
    (state / KEY).chmod(0o600)
    return "holds 5 bytes"


BROKEN: dict[str, Callable[[Path], str]] = {
    "world-readable": _world_readable,
    "link": _linked,
    "dangling link": _dangling,
    "state folder not writable": _folder_is_a_file,
    "short key": _short_key,
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_broken_key_warns_once_and_the_run_goes_on(
    case: str, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state"
    said = BROKEN[case](state)
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    trained = cli(home, "train", "EXP-001", "--until", "4")
    assert trained.exit_code == 0, trained.stderr
    warnings = [line for line in trained.stderr.splitlines() if "octlm: warning:" in line]
    assert len(warnings) == 1 and said in warnings[0] and str(state / KEY) in warnings[0], trained.stderr
    assert "the token cache is not used" in warnings[0]
    assert not list((home / "cache").glob("tokens-*")), "no token file is kept without a key to trust"
    prepared = cli(home, "prepare", "EXP-001", "--json")
    assert prepared.exit_code == 0 and json_out(prepared)["token_file"] == "not kept", prepared.stderr
    resumed = cli(home, "resume", "EXP-001")  # and the experiment goes on to its end
    assert resumed.exit_code == 0 and "completed at step 12/12" in resumed.stderr, resumed.stderr


def test_a_mended_key_signs_caches_again(home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path / "state"
    _world_readable(state)
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    assert cli(home, "prepare", "EXP-001").exit_code == 0
    (state / KEY).chmod(0o600)  # the fix the warning names
    first, second = cli(home, "prepare", "EXP-001", "--json"), cli(home, "prepare", "EXP-001", "--json")
    assert json_out(first)["token_file"] == "written" and json_out(second)["token_file"] == "reused"
    assert "warning" not in first.stderr + second.stderr


def test_a_read_only_home_folder_warns_and_trains(home: Path, tmp_path: Path) -> None:
    """As a user whose HOME cannot be written (root, less its permission override), with no XDG_STATE_HOME."""
    if shutil.which("setpriv") is None:
        pytest.skip("no setpriv")
    user = tmp_path / "user"
    user.mkdir()
    user.chmod(0o555)
    drop = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-dac_override,-dac_read_search"]
    env = {k: v for k, v in os.environ.items() if k != "XDG_STATE_HOME"}
    env.update(HOME=str(user), NO_COLOR="1")
    probe = subprocess.run([*drop, "sh", "-c", f"! touch {user}/x"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot drop the permission override here: {probe.stderr!r}")
    done = subprocess.run(
        [*drop, *octlm_command(home, "train", "EXP-001", "--until", "4")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if "octlm: warning:" in line]
    assert len(warnings) == 1 and str(user / ".local" / "state" / KEY) in warnings[0], done.stderr
    assert "XDG_STATE_HOME" in warnings[0]


def octlm_command(home: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "octlm", "--home", str(home), *args]


def test_the_warning_reaches_a_piped_stderr_once(home: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    _world_readable(state)
    done = octlm(home, "train", "EXP-001", "--until", "4", env={"XDG_STATE_HOME": str(state)})
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("the token cache is not used") == 1, done.stderr
