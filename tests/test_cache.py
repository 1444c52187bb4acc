"""privembed.core.cache: the user cache directory (PRIVEMBED_CACHE > XDG_CACHE_HOME > ~/.cache)."""

from __future__ import annotations

import os
import stat

import pytest

from privembed.core.cache import cache_dir, cache_root


@pytest.fixture
def env(monkeypatch, tmp_path):
    for k in ("PRIVEMBED_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return monkeypatch, tmp_path


def test_precedence(env):
    mp, tmp = env
    assert cache_root() == tmp / "home" / ".cache" / "privembed"
    mp.setenv("XDG_CACHE_HOME", str(tmp / "xdg"))
    assert cache_root() == tmp / "xdg" / "privembed"
    mp.setenv("PRIVEMBED_CACHE", str(tmp / "pe"))
    assert cache_root() == tmp / "pe"
    mp.setenv("PRIVEMBED_CACHE", "  ")  # empty counts as unset
    assert cache_root() == tmp / "xdg" / "privembed"


def test_creates_owner_only_folders_whatever_the_umask(env):
    mp, tmp = env
    mp.setenv("PRIVEMBED_CACHE", str(tmp / "pe"))
    old = os.umask(0o022)
    try:
        p = cache_dir("inversion", "models", "base")
    finally:
        os.umask(old)
    assert p == tmp / "pe" / "inversion" / "models" / "base" and p.is_dir()
    for q in (tmp / "pe", tmp / "pe" / "inversion", tmp / "pe" / "inversion" / "models", p):
        assert stat.S_IMODE(q.stat().st_mode) == 0o700, q
    assert cache_dir() == tmp / "pe"  # no parts: the root
    assert cache_dir("inversion", "models", "base") == p  # idempotent


def test_existing_folder_keeps_its_mode(env):
    mp, tmp = env
    root = tmp / "shared"
    root.mkdir(mode=0o755)
    os.chmod(root, 0o755)
    mp.setenv("PRIVEMBED_CACHE", str(root))
    cache_dir("x")
    assert stat.S_IMODE(root.stat().st_mode) == 0o755
    assert stat.S_IMODE((root / "x").stat().st_mode) == 0o700


@pytest.mark.parametrize("bad", ["", ".", "..", "a/b", "a\\b", "a\0b", " a"])
def test_bad_parts_are_refused_and_nothing_is_created(env, bad):
    mp, tmp = env
    mp.setenv("PRIVEMBED_CACHE", str(tmp / "pe"))
    with pytest.raises(ValueError, match=r"parts\[1\]"):
        cache_dir("ok", bad)
    assert not (tmp / "pe").exists()


def test_non_str_part_and_file_in_the_way(env):
    mp, tmp = env
    mp.setenv("PRIVEMBED_CACHE", str(tmp / "pe"))
    with pytest.raises(TypeError, match=r"parts\[0\]=3"):
        cache_dir(3)  # type: ignore[arg-type]
    (tmp / "pe").mkdir()
    (tmp / "pe" / "f").write_text("x")
    with pytest.raises(NotADirectoryError, match="not a folder"):
        cache_dir("f", "sub")
