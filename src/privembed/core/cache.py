"""The user cache directory: where trained attack weights and other derived files live.

Never the repository or the installed package: a cache is per user, may hold large files and
must survive upgrades. The root is ``$PRIVEMBED_CACHE`` if set, else
``$XDG_CACHE_HOME/privembed``, else ``~/.cache/privembed`` (the XDG base-directory rule; the
ONNX exports of :mod:`privembed.data.embedders` use the same root).

Folders are created owner-only (mode 0700): cached decoder weights are an attacker's tool trained
on someone's texts, and cached embeddings are personal data.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_dir", "cache_root"]

ENV = "PRIVEMBED_CACHE"


def cache_root() -> Path:
    """The cache root (not created): ``$PRIVEMBED_CACHE``, ``$XDG_CACHE_HOME/privembed`` or
    ``~/.cache/privembed``. An empty variable counts as unset.

    Examples
    --------
    >>> import os
    >>> old = os.environ.get("PRIVEMBED_CACHE")
    >>> os.environ["PRIVEMBED_CACHE"] = "/tmp/pe-cache-root"
    >>> cache_root().as_posix()
    '/tmp/pe-cache-root'
    >>> _ = os.environ.pop("PRIVEMBED_CACHE") if old is None else os.environ.update(
    ...     PRIVEMBED_CACHE=old)
    """
    env = os.environ.get(ENV, "").strip()
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    if xdg:
        return Path(xdg).expanduser() / "privembed"
    return Path.home() / ".cache" / "privembed"


def cache_dir(*parts: str) -> Path:
    """The folder ``<cache root>/<parts...>``, created (with its parents) with mode 0700.

    Parameters
    ----------
    *parts : str
        Sub-folder names, each one plain path component (no separators, not ``.``/``..``, not
        empty): a name comes from code, and a component that climbs out of the cache is a bug.

    Returns
    -------
    pathlib.Path

    Raises
    ------
    TypeError
        A part is not a str.
    ValueError
        A part is empty, ``.``, ``..`` or holds a path separator or NUL.
    NotADirectoryError
        The path exists and is not a folder.

    Notes
    -----
    Folders this call creates get mode 0700 whatever the umask; an existing folder keeps its
    mode (a user may have shared it on purpose).

    Examples
    --------
    >>> import os, tempfile
    >>> old = os.environ.get("PRIVEMBED_CACHE")
    >>> os.environ["PRIVEMBED_CACHE"] = tempfile.mkdtemp()
    >>> p = cache_dir("inversion", "models")
    >>> p.relative_to(os.environ["PRIVEMBED_CACHE"]).as_posix(), oct(p.stat().st_mode & 0o777)
    ('inversion/models', '0o700')
    >>> _ = os.environ.pop("PRIVEMBED_CACHE") if old is None else os.environ.update(
    ...     PRIVEMBED_CACHE=old)
    """
    for i, p in enumerate(parts):
        if not isinstance(p, str):
            raise TypeError(f"cache_dir parts must be str, got parts[{i}]={p!r}.")
        if p in ("", ".", "..") or "/" in p or "\\" in p or "\0" in p or p != p.strip():
            raise ValueError(f"cache_dir parts must be plain folder names, got parts[{i}]={p!r}.")
    path = cache_root()
    for p in ("", *parts):
        path = path / p if p else path
        if path.exists():
            if not path.is_dir():
                raise NotADirectoryError(f"cache path exists and is not a folder: {path}")
            continue
        path.mkdir(parents=True, mode=0o700, exist_ok=True)
        os.chmod(path, 0o700)  # mkdir's mode is masked by the umask
    return path
