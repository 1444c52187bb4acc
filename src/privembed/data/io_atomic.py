"""Atomic outputs: a temporary file next to the destination, renamed over it only once
everything succeeded (and the caller's commit ran, with SIGINT/SIGTERM held in between), so a
failure leaves no partial output.

The public face of these files is :mod:`privembed.data.io`, which re-exports what is here.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..core.cancel import checkpoint


def _default_mode(dst: Path) -> int:
    """Mode for a new output: the existing file's, else 0o666 minus the umask (not mkstemp's 0o600)."""
    if dst.exists():
        return dst.stat().st_mode & 0o777
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


#: temporary outputs are named ``.<name>.privembed-<pid>-<random>.tmp`` next to the output
_TMP_RE = re.compile(r"^\.(?P<name>.+)\.privembed-(?P<pid>\d+)-[0-9a-f]{8}\.tmp$")
SIDECAR_SUFFIX = ".privembed.json"
_SIDECAR_FORMAT = "privembed-npy-sidecar/1"


def sidecar_path(path: str | Path) -> Path:
    """Where the metadata of a ``.npy`` file lives (``x.npy`` -> ``x.npy.privembed.json``)."""
    p = Path(path)
    return p.with_name(p.name + SIDECAR_SUFFIX)


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def remove_stale_temporaries(dst: str | Path) -> list[Path]:
    """Delete temporary outputs for ``dst`` left by processes that no longer run (SIGKILL,
    power loss); returns what was removed. Temporaries of running processes are kept."""
    dst = Path(dst)
    parent = dst.parent if str(dst.parent) else Path(".")
    removed: list[Path] = []
    if not parent.is_dir():
        return removed
    names = {dst.name, sidecar_path(dst).name}
    for entry in parent.iterdir():
        m = _TMP_RE.match(entry.name)
        if m is None or m.group("name") not in names:
            continue
        if not _pid_alive(int(m.group("pid"))):
            with contextlib.suppress(FileNotFoundError):
                entry.unlink()
                removed.append(entry)
    return removed


def _temp_for(dst: Path) -> Path:
    parent = dst.parent if str(dst.parent) else Path(".")
    return parent / f".{dst.name}.privembed-{os.getpid()}-{secrets.token_hex(4)}.tmp"


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM (main thread) so that a commit and its rename happen together."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(
        signal, "pthread_sigmask"
    ):
        yield
        return
    held = {signal.SIGINT, signal.SIGTERM}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextlib.contextmanager
def atomic_output(
    dst: str | Path,
    *,
    src: str | Path | None = None,
    commit: Callable[[], object] | None = None,
    sidecar: Callable[[Path], dict[str, Any]] | None = None,
    overwrite: bool = True,
) -> Iterator[Path]:
    """Yield a temporary path next to ``dst``; publish it as ``dst`` on success, delete on error.

    Publication is: ``commit()`` (e.g. the ledger records the release), then the rename --
    with SIGINT/SIGTERM held in between, so a signal cannot separate the two. A crash there
    (SIGKILL) leaves a committed release without output, never an output without its commit.
    ``sidecar(tmp)`` returns metadata written to :func:`sidecar_path` just before the rename
    (``.npy`` files carry their metadata that way). Temporaries of dead processes for the same
    ``dst`` are removed first; on any error (or signal) this one is removed too.

    Raises
    ------
    ValueError
        ``dst`` equals ``src`` (the input is never touched).
    FileExistsError
        ``dst`` exists and ``overwrite`` is False.
    """
    dst = Path(dst)
    if src is not None and Path(src).resolve() == dst.resolve():
        raise ValueError(f"output must differ from the input, got output={str(dst)!r}.")
    if dst.is_dir():
        raise IsADirectoryError(f"output is a directory: {dst}")
    if not overwrite and dst.exists():
        raise FileExistsError(f"output exists: {dst} (pass --overwrite to replace it).")
    parent = dst.parent if str(dst.parent) else Path(".")
    if not parent.exists():
        raise FileNotFoundError(f"output folder does not exist: {parent}")
    remove_stale_temporaries(dst)
    tmp_path = _temp_for(dst)
    side_tmp: Path | None = None
    fd = os.open(tmp_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.close(fd)
    try:
        checkpoint("output.opened")
        yield tmp_path
        os.chmod(tmp_path, _default_mode(dst))
        if sidecar is not None:
            side = sidecar_path(dst)
            side_tmp = _temp_for(side)
            body = {
                "format": _SIDECAR_FORMAT,
                "size": tmp_path.stat().st_size,
                "metadata": sidecar(tmp_path),
            }
            side_tmp.write_text(json.dumps(body), encoding="utf-8")
            os.chmod(side_tmp, _default_mode(dst))
        checkpoint("commit.before")
        with _signals_deferred():
            if commit is not None:
                commit()
            checkpoint("commit.after", stop=False)  # signals are held: the rename follows
            if side_tmp is not None:
                os.replace(side_tmp, sidecar_path(dst))
            os.replace(tmp_path, dst)
    except BaseException:
        for t in (tmp_path, side_tmp):
            if t is not None:
                with contextlib.suppress(FileNotFoundError):
                    t.unlink()
        raise
