"""Caches live under the user's cache folder, never inside the package or the checkout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import privembed
from privembed.core.cache import cache_dir, cache_root

PKG = Path(privembed.__file__).parent


def test_cache_root_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("PRIVEMBED_CACHE", str(tmp_path / "pe"))
    assert cache_root() == tmp_path / "pe"
    d = cache_dir("onnx")
    assert d == tmp_path / "pe" / "onnx" and d.is_dir() and (d.stat().st_mode & 0o777) == 0o700
    monkeypatch.delenv("PRIVEMBED_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "privembed"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_root() == tmp_path / "home" / ".cache" / "privembed"


def test_compiled_kernels_cache_under_the_user_cache_not_the_package(tmp_path):
    """Issue 28: the compiled kernels wrote their cache into the source tree
    (src/privembed/__pycache__/*.nbc)."""
    pytest.importorskip("numba")
    before = {p.name for p in PKG.rglob("*.nb[ci]")}
    env = {**os.environ, "PRIVEMBED_CACHE": str(tmp_path / "cache"), "PRIVEMBED_JIT": "1"}
    env.pop("NUMBA_CACHE_DIR", None)
    code = (
        "from privembed.core import _jit; from privembed.core.rng import _verify_kernels; "
        "assert _jit.kernels(-1, verify=_verify_kernels) is not None"
    )
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert list((tmp_path / "cache" / "numba").rglob("*.nbi")), "no cache where it belongs"
    assert {p.name for p in PKG.rglob("*.nb[ci]")} == before
