"""Signal dispositions for the tests that send signals: set by each test, never inherited.

A shell starts a background job (``make test &``, ``nohup``, a CI step's ``cmd &``) with SIGINT
*ignored*, and privembed rightly keeps an ignored SIGINT ignored (:mod:`privembed.core.cancel`):
so a test that sends SIGINT and inherits that disposition sees nothing happen. Every test that
sends SIGINT therefore sets what it needs itself:

* in a subprocess it starts: :func:`run` / :func:`popen` (or ``preexec_fn=default_signals``),
  which give the child SIGINT and SIGTERM at their defaults, as a terminal's foreground job has;
* in its own process: :func:`python_sigint` (Python's own ``KeyboardInterrupt`` handler).
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
from collections.abc import Iterator
from typing import Any

__all__ = ["default_signals", "popen", "python_sigint", "run"]


def default_signals() -> None:
    """``preexec_fn``: the child starts with SIGINT and SIGTERM at their defaults."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def run(args: Any, **kwargs: Any) -> subprocess.CompletedProcess[Any]:
    """:func:`subprocess.run` with default SIGINT/SIGTERM in the child."""
    return subprocess.run(args, preexec_fn=default_signals, **kwargs)


def popen(args: Any, **kwargs: Any) -> subprocess.Popen[Any]:
    """:class:`subprocess.Popen` with default SIGINT/SIGTERM in the child."""
    return subprocess.Popen(args, preexec_fn=default_signals, **kwargs)


@contextlib.contextmanager
def python_sigint() -> Iterator[None]:
    """Python's ``KeyboardInterrupt`` handler for SIGINT in this process for the block."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
