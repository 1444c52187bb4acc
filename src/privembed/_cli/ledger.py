"""``privembed ledger show|spent|export|budget``: inspect a privacy ledger, or set its budget.

A ledger is an SQLite file or a ``postgresql://`` URL (its password, if written in it, is
never printed). Inspection opens the file read-only: it never writes to it (not even SQLite's
WAL files; a PostgreSQL session is read-only) and refuses a file that is not a privembed
ledger. ``budget`` is the one command that changes a
budget; raising one needs ``--raise`` and is recorded with its time.
"""

from __future__ import annotations

import csv
import datetime as _dt
import sys
from typing import Annotated, Literal

import typer
from rich.padding import Padding
from rich.table import Table

from ..keys.ledger import Ledger, administer_budget, display_key, key_value, open_existing
from .common import console, err_console, mechanism_text, print_json, user_errors
from .options import OptJson, OptJsonFull, delta_flag, epsilon_flag

app = typer.Typer(no_args_is_help=True)


#: a ledger on the command line: a file, or a PostgreSQL URL
LEDGER_HELP = "Ledger file, or a postgresql:// URL (password from PGPASSWORD or ~/.pgpass)."
#: the LEDGER argument of the ledger commands that read one
LedgerArg = Annotated[str, typer.Argument(help=LEDGER_HELP)]


def _open(path: str) -> Ledger:
    return open_existing(path)


def _when(t: float | None) -> str:
    if t is None:
        return "-"
    return _dt.datetime.fromtimestamp(t, tz=_dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _guarantee_text(g: object) -> str:
    """A recorded guarantee in words (``?`` when it cannot be read)."""
    from ..core.accounting import guarantee_from_dict

    if not isinstance(g, dict):
        return "?"
    try:
        return guarantee_from_dict(g).describe()
    except (TypeError, ValueError):
        return str(g.get("kind", "?"))


@app.command()
@user_errors
def show(
    ledger: LedgerArg,
    as_json: OptJsonFull = False,
) -> None:
    """Budgets, and per configuration: mechanism, guarantee, key id, releases; unpublished
    releases; budget changes."""
    with _open(ledger) as led:
        s = led.summary()
    if as_json:
        print_json(s)
        return
    b, sb = s["budget"], s["subject_budget"]
    console.print(
        f"{s['path']}: {s['records']} record(s); budget per record: "
        f"{'none' if b is None else f'epsilon={b[0]:g}, delta={b[1]:g}'}; per subject: "
        f"{'none' if sb is None else f'epsilon={sb[0]:g}, delta={sb[1]:g}'}",
        highlight=False,
    )
    configs = s["configurations"]
    if not configs:
        console.print("no releases recorded", highlight=False)
    for n, c in enumerate(configs, start=1):
        console.print(f"\n[bold]{n}. {mechanism_text(c['mechanism'])}[/bold]", highlight=False)
        grid = Table.grid(padding=(0, 1))
        grid.add_column(no_wrap=True)
        grid.add_column(overflow="fold")
        grid.add_row("guarantee:", _guarantee_text(c["guarantee"]))
        grid.add_row(
            "releases:",
            f"{c['releases']} ({c['free']} free: keyed re-releases of unchanged content), "
            f"last {_when(c['last'])}",
        )
        noise = f"keyed, key id {c['key_id']}" if c["key_id"] else "fresh (no key)"
        grid.add_row("noise:", f"{noise}; configuration {c['config_fp']}")
        console.print(Padding(grid, (0, 0, 0, 3)), highlight=False)
    if s["unpublished"]:
        console.print(
            f"\n{len(s['unpublished'])} release(s) were charged but never published (a crash "
            "between the ledger commit and the output's rename; conservative):",
            highlight=False,
        )
        for u in s["unpublished"]:
            console.print(
                f"  {_when(u['created'])}: {u['records']} record(s) -> {u['destination'] or '?'}",
                highlight=False,
            )
    if s["budget_history"]:
        console.print("")
    for h in s["budget_history"]:
        console.print(
            f"budget {h['action']} ({h['scope']}) at {_when(h['changed'])}: epsilon="
            f"{h['epsilon']:g}, delta={h['delta']:g}"
            + (f" (was {h['previous']})" if h["previous"] else ""),
            highlight=False,
        )


def _lookup_keys(ids: list[str]) -> list[str]:
    """An id typed on the command line may be an int or a string record: look up both."""
    keys: list[str] = []
    for text in ids:
        if text[:2] in ("i:", "s:", "b:"):
            keys.append(text)
            continue
        keys.append("s:" + text)
        try:
            keys.append(f"i:{int(text)}")
        except ValueError:
            pass
    return keys


@app.command()
@user_errors
def spent(
    ledger: LedgerArg,
    record: Annotated[
        list[str] | None,
        typer.Option("--id", help="Record id(s); 5 finds the int and the string record 5."),
    ] = None,
    subject: Annotated[
        str | None, typer.Option(help="Show a subject's spend over all its records.")
    ] = None,
    as_json: OptJson = False,
    top: Annotated[int, typer.Option(help="Show the N records that spent most.")] = 20,
) -> None:
    """Composed (epsilon, delta) spent per record (or per subject)."""
    with _open(ledger) as led:
        rows = (
            [led.spent_subject(subject)]
            if subject
            else led.spent(None if record is None else _lookup_keys(record))
        )
        delta = led.report_delta
    rows.sort(key=lambda r: -r.epsilon)
    if as_json:
        # the id as written (5 and "5" stay apart as JSON number and string), and its key
        out = []
        for r in rows:
            rest = {k: v for k, v in r.__dict__.items() if k != "record_id"}
            if subject:
                out.append({"subject": r.record_id, **rest})
            else:
                out.append({"id": key_value(r.record_id), "ledger_key": r.record_id, **rest})
        print_json(out)
        return
    t = Table(
        "subject" if subject else "record",
        f"epsilon (at delta={delta:g})",
        "delta",
        "releases",
        "free",
        title=f"{len(rows)} {'subject' if subject else 'record(s)'}",
    )
    for r in rows[:top]:
        t.add_row(
            r.record_id if subject else display_key(r.record_id),
            f"{r.epsilon:.4g}",
            f"{r.delta:.3g}",
            str(r.releases),
            str(r.free_releases),
        )
    console.print(t)


@app.command()
@user_errors
def export(
    ledger: LedgerArg,
    fmt: Annotated[
        Literal["json", "csv"], typer.Option("--format", help="Output format.")
    ] = "json",
) -> None:
    """Every release row, to stdout."""
    with _open(ledger) as led:
        rows = led.export()
    if fmt == "json":
        print_json(rows)
    else:
        w = csv.DictWriter(sys.stdout, fieldnames=list(rows[0]) if rows else ["seq"])
        w.writeheader()
        w.writerows(rows)


@app.command()
@user_errors
def budget(
    ledger: Annotated[str, typer.Argument(help=LEDGER_HELP + " Created if missing.")],
    epsilon: Annotated[float | None, epsilon_flag(help="epsilon budget.")] = None,
    delta: Annotated[float | None, delta_flag(help="delta budget.")] = None,
    subject: Annotated[
        bool, typer.Option("--subject", help="Set the per-subject budget (not per record).")
    ] = False,
    allow_raise: Annotated[
        bool, typer.Option("--raise", help="Allow a larger budget than the stored one.")
    ] = False,
) -> None:
    """Set, lower or (with --raise) raise a budget; every change is recorded with its time."""
    old, msg, where = administer_budget(
        ledger, epsilon=epsilon, delta=delta, subject=subject, allow_raise=allow_raise
    )
    if msg is None:
        console.print(
            f"{'subject' if subject else 'record'} budget: "
            f"{'none' if old is None else old.describe()}",
            highlight=False,
        )
        return
    err_console.print(f"ledger {where}: {msg}", highlight=False)


def register(main: typer.Typer) -> None:
    """Attach the ``ledger`` command group to the main app."""
    main.add_typer(app, name="ledger", help="Inspect the privacy ledger.")
