"""The per-user compile cache: created private, refused when it is a link or others can write to it or to a
folder above it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from octlm.core.errors import BadInput
from octlm.runtime.native import compile_cache


def test_the_default_folder_is_per_user_and_private(tmp_path: Path) -> None:
    environ = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    folder = compile_cache.directory(environ)
    assert folder == tmp_path / "xdg" / "octlm" / "inductor"
    assert folder.is_dir() and folder.stat().st_mode & 0o777 == 0o700


def test_the_variable_wins_and_torch_is_pointed_there(tmp_path: Path) -> None:
    environ = {"OCTLM_COMPILE_CACHE": str(tmp_path / "graphs"), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    assert compile_cache.use(environ) == str(tmp_path / "graphs")
    assert environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "graphs") and not (tmp_path / "xdg").exists()


def test_torchs_own_variable_is_respected(tmp_path: Path) -> None:
    environ = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "mine"), "OCTLM_COMPILE_CACHE": str(tmp_path / "graphs")}
    assert compile_cache.use(environ) == str(tmp_path / "mine") and not (tmp_path / "graphs").exists()


def test_a_linked_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    (tmp_path / "graphs").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(BadInput, match="symbolic link.*OCTLM_COMPILE_CACHE"):
        compile_cache.directory({"OCTLM_COMPILE_CACHE": str(tmp_path / "graphs")})


def test_a_folder_others_can_write_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "graphs"
    folder.mkdir()
    folder.chmod(0o777)
    with pytest.raises(BadInput, match="writable by other users"):
        compile_cache.directory({"OCTLM_COMPILE_CACHE": str(folder)})


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="changing a folder's owner needs root")
def test_a_folder_of_another_user_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "graphs"
    folder.mkdir(mode=0o700)
    os.chown(folder, 12345, 12345)
    with pytest.raises(BadInput, match="another user"):
        compile_cache.directory({"OCTLM_COMPILE_CACHE": str(folder)})


def test_a_folder_above_that_others_can_write_is_refused_unless_sticky(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # anyone could rename ours away and put their own code in its place
    with pytest.raises(BadInput, match="shared, a folder above it, is writable by other users"):
        compile_cache.directory({"OCTLM_COMPILE_CACHE": str(shared / "mine" / "graphs")})
    shared.chmod(0o1777)  # sticky, as /tmp: others cannot rename or remove what is ours
    assert compile_cache.directory({"OCTLM_COMPILE_CACHE": str(shared / "mine" / "graphs")}).is_dir()


def test_a_linked_folder_above_is_judged_where_it_leads(tmp_path: Path) -> None:
    open_folder = tmp_path / "open"
    open_folder.mkdir()
    open_folder.chmod(0o777)
    (tmp_path / "home").symlink_to(open_folder)  # a tidy-looking path that leads somewhere anyone can write
    with pytest.raises(BadInput, match="open, a folder above it, is writable by other users"):
        compile_cache.directory({"OCTLM_COMPILE_CACHE": str(tmp_path / "home" / "graphs")})


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="changing a folder's owner needs root")
def test_a_folder_above_of_another_user_is_refused(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, 12345, 12345)
    with pytest.raises(BadInput, match="theirs, a folder above it, belongs to another user"):
        compile_cache.directory({"OCTLM_COMPILE_CACHE": str(theirs / "graphs")})


def test_torchs_own_default_counts_as_unset(tmp_path: Path) -> None:
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    environ = {"TORCHINDUCTOR_CACHE_DIR": os.path.abspath(default_cache_dir()), "OCTLM_COMPILE_CACHE": str(tmp_path)}
    assert compile_cache.use(environ) == str(tmp_path)
