"""The per-user compile cache: created private, refused when it is a link or others can write to it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from octlm.core.errors import BadInput
from octlm.runtime import compile_cache


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


def test_torchs_own_default_counts_as_unset(tmp_path: Path) -> None:
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    environ = {"TORCHINDUCTOR_CACHE_DIR": os.path.abspath(default_cache_dir()), "OCTLM_COMPILE_CACHE": str(tmp_path)}
    assert compile_cache.use(environ) == str(tmp_path)
