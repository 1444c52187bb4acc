"""Shared CLI helpers: one-line errors with a non-zero exit, progress bars, parsing lists,
and the closed sets that options choose from.

User errors (bad files, bad parameters, bad data) print ``error: <message>`` on one line to
stderr and exit with status 2 (1 for unexpected internal errors); no traceback is shown unless
``PRIVEMBED_DEBUG=1`` is set.

Closed sets (mechanisms, calibrations, ...) are ``Literal`` types: typer turns them into choices
that ``--help`` lists in full and that the parser checks. ``tests/test_conventions.py`` checks
each against the library's own list, so a new mechanism cannot be left out of the command line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import json
import math
import os
import sys
import threading
import time
import typing
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

import typer
from rich.console import Console
from typer.core import TyperGroup

from ..core._validation import DataError
from ..core.cancel import Cancelled
from ..mechanisms import MECHANISMS
from ..mechanisms.params import describe
from .options import delta_flag, epsilon_flag, k_flag

__all__ = [
    "APP_SETTINGS",
    "MECHANISM_OPTIONS",
    "USER_ERRORS",
    "BitGeneratorName",
    "Calibration",
    "EmbedBackend",
    "InputNorm",
    "KeyedGenerator",
    "LogProgress",
    "MechanismName",
    "MechanismOptions",
    "Neighbouring",
    "OneLineErrors",
    "OptionGroup",
    "ProjectionKind",
    "StoreKind",
    "SubspaceNoise",
    "console",
    "err_console",
    "fail",
    "mechanism_text",
    "parse_floats",
    "print_json",
    "progress",
    "progress_callback",
    "progress_done",
    "progress_interval",
    "progress_reported",
    "show_progress",
    "tidy_help",
    "user_errors",
    "with_option_groups",
]

console = Console()
err_console = Console(stderr=True)

#: how every command group behaves (the app and its groups): help when called bare, no
#: shell-completion commands, no rich tracebacks (:func:`user_errors` says an error in a line)
APP_SETTINGS: dict[str, Any] = {
    "no_args_is_help": True,
    "add_completion": False,
    "pretty_exceptions_enable": False,
}

if TYPE_CHECKING:
    MechanismName = str
    IndexMechanismName = str
else:
    #: the names of :data:`privembed.mechanisms.MECHANISMS`, read from the registry: a new
    #: mechanism is a choice of every command without an edit here
    MechanismName = Literal[tuple(MECHANISMS)]
    #: the same, and "none" (index plain vectors as they are)
    IndexMechanismName = Literal[(*MECHANISMS, "none")]
#: noise laws of a private subspace (:data:`privembed.mechanisms.subspace.NOISES`)
SubspaceNoise = Literal["laplace", "gaussian", "purkayastha"]
#: Gaussian sigma calibration
Calibration = Literal["analytic", "classic"]
#: public JL matrix kinds (:data:`privembed.mechanisms.jl.KINDS`)
ProjectionKind = Literal["gaussian", "sparse", "srht"]
#: neighbouring relation a projection's noise is calibrated for
Neighbouring = Literal["record", "attribute"]
#: how inputs reach the sphere a sensitivity bound assumes
InputNorm = Literal["normalize", "clip", "none"]
#: keyed-noise stream generators (:mod:`privembed.keys.keyed`)
KeyedGenerator = Literal["philox", "aes"]

# ---- the mechanism options, declared once (protect, audit) -----------------------------------
# the help of each is the parameter's description (privembed.mechanisms.params.describe): its
# meaning and which registered mechanisms take it, read from their constructors
#: ``--epsilon``
OptEpsilon = Annotated[float | None, epsilon_flag(help=describe("epsilon"))]
#: ``--delta``
OptDelta = Annotated[float | None, delta_flag(help=describe("delta"))]
#: ``--sigma``
OptSigma = Annotated[float | None, typer.Option(help=describe("sigma"))]
#: ``--calibration``
OptCalibration = Annotated[Calibration | None, typer.Option(help=describe("calibration"))]
#: ``--covariance``
OptCovariance = Annotated[Path | None, typer.Option(help=describe("covariance"))]
#: ``--mask``
OptMask = Annotated[Path | None, typer.Option(help=describe("mask"))]
#: ``--mask-delta``
OptMaskDelta = Annotated[float | None, typer.Option(help=describe("mask_delta"))]
#: ``--smoothing``
OptSmoothing = Annotated[float | None, typer.Option(help=describe("smoothing"))]
#: ``--k``
OptK = Annotated[int | None, k_flag(help=describe("k"))]
#: ``--kind``
OptKind = Annotated[ProjectionKind | None, typer.Option(help=describe("kind"))]
#: ``--projection-seed``
OptProjectionSeed = Annotated[int | None, typer.Option(help=describe("projection_seed"))]
#: ``--neighbouring``
OptNeighbouring = Annotated[Neighbouring | None, typer.Option(help=describe("neighbouring"))]
#: ``--input-norm``
OptInputNorm = Annotated[InputNorm | None, typer.Option(help=describe("input_norm"))]
#: ``--renormalize/--no-renormalize``
OptRenormalize = Annotated[
    bool | None,
    typer.Option("--renormalize/--no-renormalize", help=describe("renormalize")),
]
#: randomness policies (:func:`privembed.core.rng.set_bit_generator`; aes/chacha need randomgen)
BitGeneratorName = Literal["pcg64", "pcg64dxsm", "philox", "sfc64", "aes", "chacha"]
#: vector stores (:mod:`privembed.integrations.stores`)
StoreKind = Literal["chroma", "qdrant", "faiss", "pgvector"]
#: embedding runtimes (:data:`privembed.data.embedders.BACKENDS`)
EmbedBackend = Literal["auto", "torch", "onnx", "onnx-int8"]

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


def _choice_label(choice: Any) -> str:
    return str(getattr(choice, "value", choice))


#: width of the option column of ``--help`` (click's default); longer choices go in the help
_OPTION_COLUMN = 30


def _tidy_param(param: Any) -> None:
    """A flag shows no value type (typer prints ``<bool>``, which reads as if it took a value);
    a choice shows all its values: after the option name when they fit the option column,
    else at the end of the help text, where they wrap at 80 columns."""
    if param.metavar is not None:
        return
    if getattr(param, "param_type_name", None) == "argument":
        param.metavar = param.name.upper()  # INPUT, as the help texts call it
        return
    if getattr(param, "param_type_name", None) != "option":
        return
    if getattr(param, "is_flag", False) and not getattr(param, "count", False):
        param.metavar = ""
        return
    desc = getattr(param, "type_descriptor", None)
    choices = getattr(desc, "choices", None) if desc is not None else None
    if not choices:
        return
    labels = [_choice_label(c) for c in choices]
    inline = "<" + "|".join(labels) + ">"
    if len(", ".join(param.opts)) + 1 + len(inline) <= _OPTION_COLUMN:
        param.metavar = inline
    else:
        param.metavar = f"<{param.name.replace('_', '-')}>"
        param.help = f"{param.help or ''} One of: {', '.join(labels)}.".strip()


#: Old spellings of renamed options -> the one name each thing has on every command. The old
#: spelling still parses (scripts keep working) but is not shown by ``--help``.
RENAMED_OPTIONS: dict[str, str] = {
    "--id-column": "--id-field",
    "--keep-column": "--keep-field",
    "--metadata-column": "--metadata-field",
    "--subject-column": "--subject-field",
}


def _add_hidden_aliases(command: Any) -> None:
    """Let each option of ``command`` named in :data:`RENAMED_OPTIONS` also parse under its old
    spelling, which help pages do not show (unless the command has an option of that name)."""
    taken = {o for p in command.params for o in getattr(p, "opts", ())}
    for param in command.params:
        if getattr(param, "param_type_name", None) != "option":
            continue
        aliases = [old for old, new in RENAMED_OPTIONS.items() if new in param.opts]
        aliases = [a for a in aliases if a not in taken]
        if not aliases:
            continue

        def add_to_parser(
            parser: Any, ctx: Any, _param: Any = param, _aliases: list[str] = aliases,
            _add: Any = param.add_to_parser,
        ) -> None:  # fmt: skip
            shown = _param.opts
            _param.opts = [*shown, *_aliases]
            try:
                _add(parser, ctx)
            finally:
                _param.opts = shown

        param.add_to_parser = add_to_parser


def tidy_help(command: Any) -> None:
    """Apply :func:`_tidy_param` to every option of ``command`` and its subcommands (the help
    option included), and add the hidden old spellings of renamed options."""
    for param in command.params:
        _tidy_param(param)
    _add_hidden_aliases(command)
    help_option = command.get_help_option(typer.Context(command))
    if help_option is not None:
        _tidy_param(help_option)
    for sub in getattr(command, "commands", {}).values():
        tidy_help(sub)


class OneLineErrors(TyperGroup):
    """The top-level command group: usage errors (a bad option value, a missing argument, an
    unknown option) print one ``error:`` line and exit 2, like every other user error, instead
    of a multi-line box; Ctrl-C exits 130. Help pages show flags without a value type and
    every value of a choice (:func:`tidy_help`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        tidy_help(self)

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
            msg = msg.replace(": Value error, ", ": ")  # typer's prefix on a bad choice
            err_console.print(
                f"error: {msg} (see '{cmd} --help')", style="bold red", highlight=False,
                soft_wrap=True, markup=False,
            )  # fmt: skip
            sys.exit(2)
        except _ClickException as exc:
            msg = " ".join(exc.format_message().split())  # type: ignore[attr-defined]
            err_console.print(f"error: {msg}", soft_wrap=True, markup=False)
            sys.exit(getattr(exc, "exit_code", 1))
        except (typer.Abort, KeyboardInterrupt):
            err_console.print("interrupted", highlight=False)
            sys.exit(130)
        sys.exit(rv if isinstance(rv, int) else 0)


def mechanism_text(cfg: Any, *, skip: tuple[str, ...] = ()) -> str:
    """A mechanism configuration as ``name(key=value, ...)``; arrays appear by their digest.

    Examples
    --------
    >>> mechanism_text({"mechanism": "laplace", "epsilon": 50.0, "input_norm": "normalize"})
    'laplace(epsilon=50, input_norm=normalize)'
    """
    if not isinstance(cfg, dict) or "mechanism" not in cfg:
        return "?"
    parts = []
    for k, v in cfg.items():
        if k == "mechanism" or k in skip or v is None:
            continue
        if isinstance(v, dict) and "sha256" in v:
            v = f"sha256:{str(v['sha256'])[:12]}"
        elif isinstance(v, dict | list):
            continue
        elif isinstance(v, float):
            v = f"{v:g}"
        parts.append(f"{k}={v}")
    return f"{cfg['mechanism']}(" + ", ".join(parts) + ")"


def fail(message: str, code: int = 2) -> None:
    """Print a one-line error and exit with ``code``."""
    msg = " ".join(str(message).split())
    # markup off: messages quote TOML tables such as [[api_keys]], which rich would eat
    err_console.print(
        f"error: {msg}", style="bold red", highlight=False, soft_wrap=True, markup=False
    )
    raise typer.Exit(code)


def _caused_by_interrupt(exc: BaseException) -> bool:
    """True if a KeyboardInterrupt is among the causes or contexts of ``exc``."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        if isinstance(e, KeyboardInterrupt):
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return False


def user_errors(func: F) -> F:
    """Decorator: turn user errors into one-line messages and a non-zero exit."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            try:
                return func(*args, **kwargs)
            except Exception as exc:
                # Ctrl-C inside a C extension's import (pyarrow imports pandas lazily, in the
                # first batch) surfaces as SystemError/AttributeError caused by the interrupt
                if _caused_by_interrupt(exc):
                    raise KeyboardInterrupt from exc
                raise
        except (typer.Exit, typer.Abort):
            raise
        except KeyboardInterrupt as exc:
            # a release stopped at a checkpoint (privembed.core.cancel), or Ctrl-C elsewhere: one
            # line and 128 + the signal, never a traceback and never click's "Aborted!" (1)
            code = exc.exit_code if isinstance(exc, Cancelled) else 130
            line = exc.message if isinstance(exc, Cancelled) else "interrupted"
            err_console.print(line, highlight=False)
            raise typer.Exit(code) from None
        except USER_ERRORS as exc:
            if os.environ.get("PRIVEMBED_DEBUG") == "1":
                raise
            notes = "; ".join(getattr(exc, "__notes__", ()))
            fail((str(exc) or type(exc).__name__) + (f" ({notes})" if notes else ""))
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


def _bar(
    description: str,
    total: int | None,
    unit: str,
    out: Console | None = None,
    *,
    redirect_stdout: bool = True,
) -> Any:
    """A transient rich progress bar: done/total, rate (``unit``/s), time left."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        ProgressColumn,
        TimeRemainingColumn,
    )
    from rich.text import Text

    class Rate(ProgressColumn):
        def render(self, task: Any) -> Text:
            speed = task.finished_speed or task.speed
            shown = "-" if speed is None else f"{speed:,.0f}" if speed >= 10 else f"{speed:.2g}"
            return Text(f"{shown} {unit}/s", style="progress.data.speed")

    bar = Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        Rate(),
        TimeRemainingColumn(),
        console=out or err_console,
        transient=True,
        redirect_stdout=redirect_stdout,
    )
    return bar, bar.add_task(description, total=total)


def show_progress() -> bool:
    """Progress bars are drawn on a terminal (stderr), never into logs or pipes (there,
    :class:`LogProgress` writes a line at a steady interval instead)."""
    return sys.stderr.isatty()


#: seconds between two progress lines off a terminal (``PRIVEMBED_PROGRESS_INTERVAL``)
PROGRESS_INTERVAL_S = 10.0
#: work estimated to take longer than this (seconds) is announced with its estimate, once
ANNOUNCE_OVER_S = 60.0


def progress_interval() -> float | None:
    """Seconds between progress lines off a terminal: ``PRIVEMBED_PROGRESS_INTERVAL`` when set
    (``0``: no lines), else :data:`PROGRESS_INTERVAL_S`."""
    raw = os.environ.get("PRIVEMBED_PROGRESS_INTERVAL", "").strip()
    if not raw:
        return PROGRESS_INTERVAL_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise ValueError(
            "PRIVEMBED_PROGRESS_INTERVAL must be a number of seconds >= 0 (0: no progress "
            f"lines), got PRIVEMBED_PROGRESS_INTERVAL={raw!r}."
        )
    return value or None


def progress_reported() -> bool:
    """Whether progress is shown at all: a bar on a terminal, or lines off one."""
    return show_progress() or progress_interval() is not None


def _duration(seconds: float) -> str:
    """``42 s``, ``1 min 40 s``, ``29 min``, ``2 h 05 min``."""
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 600:
        return f"{s // 60} min {s % 60} s" if s % 60 else f"{s // 60} min"
    if s < 3600:
        return f"{round(s / 60)} min"
    h, m = divmod(round(s / 60), 60)
    return f"{h} h {m:02d} min"


def _rate(per_s: float) -> str:
    return f"{per_s:,.0f}" if per_s >= 10 else f"{per_s:.2g}"


def _write_stderr(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


class LogProgress:
    """Progress as lines of text, for stderr off a terminal (a log file, a pipe, CI).

    Every ``interval`` seconds one line says the stage, done/total, the rate and the time left
    (``embedding: 40,800/117,659 texts (35%), 68 texts/s, about 19 min left``). The first time
    the rate is known, work that will take longer than :data:`ANNOUNCE_OVER_S` is announced with
    its estimate instead (``embedding 117,659 texts: about 29 min at 68 texts/s``), and such
    work ends with a line of its total time. The rate is measured from the first progress report
    on (what comes before it -- loading a model -- is not work done at that rate).

    Used as a context manager, a daemon thread writes the lines even while no progress is
    reported (a long batch, an epoch); ``update`` and ``advance`` write them too when they are
    due. ``clock`` (seconds, monotonic) and ``write`` are injectable; with a ``clock`` given
    there is no thread: time moves only when the caller says so.
    """

    def __init__(
        self,
        description: str,
        total: int | None,
        *,
        unit: str,
        interval: float,
        clock: Callable[[], float] | None = None,
        write: Callable[[str], None] | None = None,
    ) -> None:
        if not (interval > 0 and math.isfinite(interval)):
            raise ValueError(f"interval must be > 0 seconds, got interval={interval!r}.")
        self.description = description
        self.total = total or None
        self.unit = unit
        self.interval = float(interval)
        self._threaded = clock is None
        self._clock = clock or time.monotonic
        self._write = write or _write_stderr
        self._lock = threading.Lock()
        self._start = self._clock()
        self._due = self._start + self.interval
        self._done = 0
        self._first: tuple[float, int] | None = None  # (time, done) of the first report
        self._rate: float | None = None
        self._announced = False
        self._wrote = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- what the work reports
    def set_total(self, total: int | None) -> None:
        self.total = total or None

    def update(self, done: int) -> None:
        """``done`` units so far (a cumulative count)."""
        now = self._clock()
        with self._lock:
            if self._first is None:
                self._first = (now, done)
            elif now > self._first[0] and done > self._first[1]:
                self._rate = (done - self._first[1]) / (now - self._first[0])
            self._done = done
        self.tick(now)

    def advance(self, k: int) -> None:
        self.update(self._done + k)

    # ---- what it writes
    def tick(self, now: float | None = None) -> None:
        """Write a line if one is due."""
        now = self._clock() if now is None else now
        with self._lock:
            if now < self._due:
                return
            self._due = now + self.interval
            line = self._line(now)
            self._wrote = True
        self._write(line)

    def _line(self, now: float) -> str:
        d, unit, done, rate = self.description, self.unit, self._done, self._rate
        elapsed = _duration(now - self._start)
        if rate is None:
            so_far = f"{done:,}/{self.total:,} {unit}" if self.total else f"{done:,} {unit}"
            return f"{d}: {so_far}, {elapsed} elapsed"
        if self.total is None:
            return f"{d}: {done:,} {unit}, {_rate(rate)} {unit}/s, {elapsed} elapsed"
        whole = self.total / rate
        if not self._announced:
            self._announced = True
            if whole > ANNOUNCE_OVER_S:
                return (
                    f"{d} {self.total:,} {unit}: about {_duration(whole)} at {_rate(rate)} {unit}/s"
                )
        pct = 100 * done / self.total
        left = _duration(max(self.total - done, 0) / rate)
        return (
            f"{d}: {done:,}/{self.total:,} {unit} ({pct:.0f}%), {_rate(rate)} {unit}/s, "
            f"about {left} left"
        )

    def finish(self) -> None:
        """After work that wrote lines: one more with its total time and rate."""
        if not self._wrote:
            return
        took = _duration(self._clock() - self._start)
        if not self._done:  # a stage that reports no count (e.g. reconstructing)
            self._write(f"{self.description}: done in {took}")
            return
        rate = "" if self._rate is None else f" ({_rate(self._rate)} {self.unit}/s)"
        self._write(f"{self.description}: {self._done:,} {self.unit} in {took}{rate}")

    # ---- as a context manager: the thread, and the last line after work that completed
    def _run(self) -> None:
        while not self._stop.wait(min(self.interval, 1.0)):
            self.tick()

    def __enter__(self) -> LogProgress:
        if self._threaded:
            self._thread = threading.Thread(target=self._run, name="progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, exc_type: object, *_: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if exc_type is None:
            self.finish()


def _log_progress(description: str, total: int | None, unit: str) -> LogProgress | None:
    """Progress lines off a terminal, or None when ``PRIVEMBED_PROGRESS_INTERVAL=0``."""
    interval = progress_interval()
    if interval is None:
        return None
    return LogProgress(description, total, unit=unit, interval=interval)


def progress(
    iterable: Iterable[Any],
    *,
    total: int | None,
    description: str,
    size: Callable[[Any], int] | None = None,
    unit: str = "rows",
) -> Iterator[Any]:
    """A progress bar on a terminal (stderr); off one, a line every
    :func:`progress_interval` seconds (:class:`LogProgress`).

    ``size(item)`` gives how much each item advances the bar (default 1), e.g. rows per batch;
    the bar shows done/total, the rate in ``unit`` per second and the time left.
    """
    if not show_progress():
        log = _log_progress(description, total, unit)
        if log is None:
            yield from iterable
            return
        with log:
            for item in iterable:
                yield item
                log.advance(size(item) if size else 1)
        return
    bar, task = _bar(description, total, unit)
    with bar:
        for item in iterable:
            yield item
            bar.advance(task, size(item) if size else 1)


def print_json(obj: Any) -> None:
    """Print JSON to stdout (plain, machine-readable)."""
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


@contextlib.contextmanager
def progress_callback(
    description: str, *, unit: str = "rows", redirect_stdout: bool = True
) -> Iterator[tuple[Callable[[int], None], Callable[[int], None]]]:
    """Yield ``(set_total, advance)`` callbacks driving a progress bar on a terminal (stderr):
    done/total, the rate in ``unit`` per second, the time left (off a terminal: lines of
    :class:`LogProgress`). ``redirect_stdout=False``
    leaves stdout alone while the bar is drawn (results piped elsewhere stay on stdout)."""
    if not show_progress():
        log = _log_progress(description, None, unit)
        if log is None:
            yield (lambda _n: None), (lambda _k: None)
            return
        with log:
            yield log.set_total, log.advance
        return
    bar, task = _bar(description, None, unit, redirect_stdout=redirect_stdout)
    with bar:
        yield (lambda n: bar.update(task, total=n)), (lambda k: bar.advance(task, k))


@contextlib.contextmanager
def progress_done(description: str, total: int, *, unit: str) -> Iterator[Callable[[int], None]]:
    """Yield ``on_progress(done)`` (a cumulative count, as :meth:`privembed.data.embedders.Embedder.encode`
    reports it) driving a progress bar on a terminal (stderr), lines off one."""
    if not show_progress():
        log = _log_progress(description, total, unit)
        if log is None:
            yield lambda _done: None
            return
        with log:
            yield log.update
        return
    bar, task = _bar(description, total, unit)
    with bar:
        yield lambda done: bar.update(task, completed=done)


# ---- groups of options, declared once ------------------------------------------------------


class OptionGroup:
    """Options that several commands take together, declared once: a dataclass whose fields are
    ``Annotated`` typer options (with their defaults). A command parameter annotated with such a
    class stands for all of its options, at that place in ``--help``; the command receives one
    instance built from them (:func:`with_option_groups`). Fields with ``init=False`` are what
    the group works out from its options (``__post_init__``), not options.
    """

    def given(self) -> dict[str, Any]:
        """The options by their flag (``--basis-epsilon``), with their values (None: not
        given): what a command that refuses them names."""
        options = _group_options(type(self))  # type: ignore[arg-type]  # a class is hashable
        return {_flag(o): getattr(self, o.name) for o in options}


@functools.cache
def _group_options(cls: type[OptionGroup]) -> list[inspect.Parameter]:
    """The options of a group, made once: every command that takes the group shares them."""
    types = typing.get_type_hints(cls, include_extras=True)
    return [
        inspect.Parameter(
            f.name, inspect.Parameter.KEYWORD_ONLY, annotation=types[f.name], default=f.default
        )
        for f in dataclasses.fields(cls)  # type: ignore[arg-type]
        if f.init
    ]


def _flag(option: inspect.Parameter) -> str:
    """The long flag of a group's option: the one its declaration spells, else typer's
    default (``--`` and the name, dashed)."""
    for info in typing.get_args(option.annotation)[1:]:
        if not isinstance(info, typer.models.OptionInfo):
            continue
        # in ``Annotated``, typer reads an option's first name from its ``default`` slot
        first = [] if info.default is ... else [info.default]
        for decl in [*first, *(info.param_decls or ())]:
            if str(decl).startswith("--"):
                return str(decl).split("/")[0]  # a toggle: its "on" flag
    return "--" + option.name.replace("_", "-")


def with_option_groups(func: Callable[..., Any]) -> Callable[..., Any]:
    """``func`` as typer sees it: each parameter annotated with an :class:`OptionGroup` class
    is replaced by that group's options, in place; the call builds the groups back from the
    parsed values, in the order they stand."""
    hints = typing.get_type_hints(func, include_extras=True)
    params: list[inspect.Parameter] = []
    groups: dict[str, tuple[type[OptionGroup], list[str]]] = {}
    for p in inspect.signature(func).parameters.values():
        hint = hints.get(p.name, p.annotation)
        if not (isinstance(hint, type) and issubclass(hint, OptionGroup)):
            params.append(p.replace(annotation=hint, kind=inspect.Parameter.KEYWORD_ONLY))
            continue
        options = _group_options(hint)  # type: ignore[arg-type]  # a class is hashable
        groups[p.name] = (hint, [o.name for o in options])
        params += options

    @functools.wraps(func)
    def wrapper(**values: Any) -> Any:
        for name, (cls, names) in groups.items():
            values[name] = cls(**{n: values.pop(n) for n in names})
        return func(**values)

    wrapper.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    return wrapper


@dataclasses.dataclass
class MechanismOptions(OptionGroup):
    """The parameters of a mechanism (protect, audit), one option each: the keyword arguments of
    :func:`privembed.mechanisms.build_mechanism` these options give, in the order the commands
    show them (:data:`MECHANISM_OPTIONS`)."""

    epsilon: OptEpsilon = None
    delta: OptDelta = None
    sigma: OptSigma = None
    calibration: OptCalibration = None
    covariance: OptCovariance = None
    mask: OptMask = None
    mask_delta: OptMaskDelta = None
    smoothing: OptSmoothing = None
    k: OptK = None
    kind: OptKind = None
    projection_seed: OptProjectionSeed = None
    neighbouring: OptNeighbouring = None
    input_norm: OptInputNorm = None
    renormalize: OptRenormalize = None

    def kwargs(self, *, leave_out: tuple[str, ...] = ()) -> dict[str, Any]:
        """The parameters as keyword arguments (``leave_out``: those a command passes itself)."""
        return {n: getattr(self, n) for n in MECHANISM_OPTIONS if n not in leave_out}


#: the keyword arguments of :func:`privembed.mechanisms.build_mechanism` the mechanism options
#: give, in the order the commands declare them (checked by a test)
MECHANISM_OPTIONS = tuple(f.name for f in dataclasses.fields(MechanismOptions))
