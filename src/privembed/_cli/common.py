"""Shared CLI helpers: one-line errors with a non-zero exit, progress bars, parsing lists.

User errors (bad files, bad parameters, bad data) print ``error: <message>`` on one line to
stderr and exit with status 2 (1 for unexpected internal errors); no traceback is shown unless
``PRIVEMBED_DEBUG=1`` is set.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import typer
from rich.console import Console
from typer.core import TyperGroup

from .._validation import DataError

__all__ = [
    "USER_ERRORS",
    "OneLineErrors",
    "console",
    "err_console",
    "fail",
    "parse_floats",
    "print_json",
    "progress",
    "progress_callback",
    "user_errors",
]

console = Console()
err_console = Console(stderr=True)

USER_ERRORS: tuple[type[BaseException], ...] = (
    DataError,
    ValueError,
    TypeError,
    FileNotFoundError,
    FileExistsError,
    IsADirectoryError,
    PermissionError,
    ImportError,
    OSError,
    RuntimeError,
)

F = TypeVar("F", bound=Callable[..., Any])

# typer vendors click: its exception classes, found through the public typer.BadParameter
_UsageError: type[Exception] = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError"
)
_ClickException: type[Exception] = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException"
)


class OneLineErrors(TyperGroup):
    """The top-level command group: usage errors (a bad option value, a missing argument, an
    unknown option) print one ``error:`` line and exit 2, like every other user error, instead
    of a multi-line box; Ctrl-C exits 130."""

    def main(
        self,
        args: Any = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        run = functools.partial(
            super().main,
            args,
            prog_name,
            complete_var,
            windows_expand_args=windows_expand_args,
            **extra,
        )
        if not standalone_mode:
            return run(standalone_mode=False)
        try:
            rv = run(standalone_mode=False)
        except _UsageError as exc:
            ctx = getattr(exc, "ctx", None)
            cmd = ctx.command_path if ctx is not None else "privembed"
            msg = " ".join(exc.format_message().split())  # type: ignore[attr-defined]
            err_console.print(
                f"error: {msg} (see '{cmd} --help')", style="bold red", highlight=False,
                soft_wrap=True,
            )  # fmt: skip
            sys.exit(2)
        except _ClickException as exc:
            msg = " ".join(exc.format_message().split())  # type: ignore[attr-defined]
            err_console.print(f"error: {msg}", soft_wrap=True)
            sys.exit(getattr(exc, "exit_code", 1))
        except (typer.Abort, KeyboardInterrupt):
            err_console.print("interrupted", highlight=False)
            sys.exit(130)
        sys.exit(rv if isinstance(rv, int) else 0)


def fail(message: str, code: int = 2) -> None:
    """Print a one-line error and exit with ``code``."""
    msg = " ".join(str(message).split())
    err_console.print(f"error: {msg}", style="bold red", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def user_errors(func: F) -> F:
    """Decorator: turn user errors into one-line messages and a non-zero exit."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except (typer.Exit, typer.Abort, KeyboardInterrupt):
            raise
        except USER_ERRORS as exc:
            if os.environ.get("PRIVEMBED_DEBUG") == "1":
                raise
            fail(str(exc) or type(exc).__name__)
        except MemoryError as exc:
            if os.environ.get("PRIVEMBED_DEBUG") == "1":
                raise
            fail(f"out of memory ({exc or 'the request is too large for this machine'}).")
        except RecursionError:
            if os.environ.get("PRIVEMBED_DEBUG") == "1":
                raise
            fail("input nested too deeply to read (recursion limit).")

    return wrapper  # type: ignore[return-value]


def parse_floats(name: str, text: str) -> list[float]:
    """Parse ``"1,5,10"`` into floats, naming the option on error."""
    try:
        vals = [float(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise ValueError(
            f"{name} must be a comma-separated list of numbers, got {name}={text!r}."
        ) from None
    if not vals:
        raise ValueError(f"{name} must not be empty, got {name}={text!r}.")
    return vals


def progress(
    iterable: Iterable[Any],
    *,
    total: int | None,
    description: str,
    size: Callable[[Any], int] | None = None,
) -> Iterator[Any]:
    """A progress bar on a terminal (stderr), silent otherwise.

    ``size(item)`` gives how much each item advances the bar (default 1), e.g. rows per batch.
    """
    if not sys.stderr.isatty():
        yield from iterable
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=err_console,
        transient=True,
    ) as bar:
        task = bar.add_task(description, total=total)
        for item in iterable:
            yield item
            bar.advance(task, size(item) if size else 1)


def print_json(obj: Any) -> None:
    """Print JSON to stdout (plain, machine-readable)."""
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


@contextlib.contextmanager
def progress_callback(
    description: str,
) -> Iterator[tuple[Callable[[int], None], Callable[[int], None]]]:
    """Yield ``(set_total, advance)`` callbacks driving a progress bar on a terminal (stderr)."""
    if not sys.stderr.isatty():
        yield (lambda _n: None), (lambda _k: None)
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=err_console,
        transient=True,
    ) as bar:
        task = bar.add_task(description, total=None)
        yield (lambda n: bar.update(task, total=n)), (lambda k: bar.advance(task, k))
