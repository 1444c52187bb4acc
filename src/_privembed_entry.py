"""The ``privembed`` console script's first module: Ctrl-C during start-up ends quietly.

The command line imports numpy, scipy, typer and privembed before any command runs (about a
second). A SIGINT in that window would raise ``KeyboardInterrupt`` out of whatever import is
running and print a traceback. Nothing is open yet, so this module -- imported before anything
heavy, outside the ``privembed`` package whose ``__init__`` is itself a heavy import -- ends the
process with one line and exit status 130 instead. Once the command line is loaded the usual
handlers take over (:mod:`privembed.core.cancel` for releases).

The fault point ``startup`` of :mod:`privembed.core.cancel` lives here (``PRIVEMBED_FAULT_AT=startup:SIGINT``).
"""

from __future__ import annotations

import os
import signal
import sys


def _early(signum: int, frame: object) -> None:
    os.write(2, b"interrupted\n" if signum == signal.SIGINT else b"terminated\n")
    os._exit(128 + signum)


def main() -> None:
    """Console-script entry point: install the start-up handlers, then run the CLI."""
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s, h in previous.items():
        if h is not signal.SIG_IGN:
            signal.signal(s, _early)
    spec = os.environ.get("PRIVEMBED_FAULT_AT", "")
    if spec.startswith("startup:"):  # privembed.core.cancel's fault injection, at this point
        signal.raise_signal(signal.Signals[spec.split(":", 1)[1]])
    from privembed.cli import main as cli_main
    from privembed.core.cancel import run_console

    for s, h in previous.items():
        signal.signal(s, h)
    # a signal after a release published its output ends the process with one line, never
    # by the signal itself during the interpreter's teardown
    sys.exit(run_console(cli_main))


if __name__ == "__main__":  # pragma: no cover
    main()
