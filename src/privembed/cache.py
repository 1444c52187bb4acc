"""Where privembed keeps what it can recompute: ONNX exports, compiled kernels, model weights.

Never inside the installed package or a checkout (a read-only install must work, and a test
run must leave the source tree as it was): ``$PRIVEMBED_CACHE`` if set, else
``$XDG_CACHE_HOME/privembed``, else ``~/.cache/privembed``.

Examples
--------
>>> import os
>>> os.environ["PRIVEMBED_CACHE"] = "/tmp/pe-cache-doc"
>>> cache_dir("onnx", create=False).as_posix()
'/tmp/pe-cache-doc/onnx'
>>> del os.environ["PRIVEMBED_CACHE"]
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_dir", "cache_root"]


def cache_root() -> Path:
    """The cache's root folder (not created)."""
    if os.environ.get("PRIVEMBED_CACHE"):
        return Path(os.environ["PRIVEMBED_CACHE"]).expanduser()
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "privembed"
    return Path.home() / ".cache" / "privembed"


def cache_dir(*parts: str, create: bool = True) -> Path:
    """A folder of the cache (created with mode 0700 unless ``create=False``)."""
    p = cache_root().joinpath(*parts)
    if create:
        p.mkdir(mode=0o700, parents=True, exist_ok=True)
    return p
