"""``privembed ledger show|spent|export``: inspect a privacy ledger."""

from __future__ import annotations

import csv
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from ..ledger import Ledger
from .common import console, print_json, user_errors

app = typer.Typer(no_args_is_help=True)


def _open(path: Path) -> Ledger:

    if not path.exists():
        raise FileNotFoundError(f"ledger not found: {path}")
    return Ledger(path)


@app.command()
@user_errors
def show(ledger: Annotated[Path, typer.Argument(help="Ledger file.")]) -> None:
    """Budget and release counts per configuration."""
    with _open(ledger) as led:
        s = led.summary()
    b = s["budget"]
    console.print(
        f"budget per record: {'none' if b is None else f'epsilon={b[0]:g}, delta={b[1]:g}'}"
    )
    t = Table("configuration", "kind", "key id", "releases", "free", "records")
    for c in s["configurations"]:
        t.add_row(
            c["config_fp"],
            c["kind"],
            c["key_id"] or "-",
            str(c["releases"]),
            str(c["free"]),
            str(c["records"]),
        )
    console.print(t)


@app.command()
@user_errors
def spent(
    ledger: Annotated[Path, typer.Argument(help="Ledger file.")],
    record: Annotated[
        list[str] | None, typer.Option("--id", help="Record id(s) (strings).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    top: Annotated[int, typer.Option(help="Show the N records that spent most.")] = 20,
) -> None:
    """Composed (epsilon, delta) spent per record."""
    with _open(ledger) as led:
        rows = led.spent(record)
        delta = led.report_delta
    rows.sort(key=lambda r: -r.epsilon)
    if as_json:
        print_json([r.__dict__ for r in rows])
        return
    t = Table(
        "record",
        f"epsilon (at delta={delta:g})",
        "delta",
        "releases",
        "free",
        title=f"{len(rows)} record(s)",
    )
    for r in rows[:top]:
        t.add_row(
            r.record_id, f"{r.epsilon:.4g}", f"{r.delta:.3g}", str(r.releases), str(r.free_releases)
        )
    console.print(t)


@app.command()
@user_errors
def export(
    ledger: Annotated[Path, typer.Argument(help="Ledger file.")],
    fmt: Annotated[str, typer.Option("--format", help="json|csv")] = "json",
) -> None:
    """Every release row, to stdout."""
    with _open(ledger) as led:
        rows = led.export()
    if fmt == "json":
        print_json(rows)
    elif fmt == "csv":
        w = csv.DictWriter(sys.stdout, fieldnames=list(rows[0]) if rows else ["seq"])
        w.writeheader()
        w.writerows(rows)
    else:
        raise ValueError(f"format must be one of 'json', 'csv', got format={fmt!r}.")
