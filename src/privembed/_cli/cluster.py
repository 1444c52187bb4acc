"""``privembed index-shards``: Parquet shards into one pgvector collection, with several writers
and one ledger (issue 38.5's command-line front end).

Example::

    export PRIVEMBED_PG_DSN=postgresql://privembed@db.internal/vectors   # password: ~/.pgpass
    privembed index-shards shards/ --collection notes --path notes-local/ -m laplace \\
        --epsilon 200 --key-file release.key --writers 4 --partitions 8 --ledger ledger.db
    privembed index-shards shards/ ... --engine ray --address ray://head:10001   # a cluster

The work, its guarantees (the same bits as one process, every record charged once, a retry
that duplicates nothing) and the deployment are :func:`privembed.integrations.cluster_index.
index_cluster`'s and docs/integrations.md's; this module parses and prints.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Any

import typer

from ._groups import LedgerOptions, Report, ShardEngine
from .common import MechanismName, err_console, print_json, user_errors, with_option_groups
from .options import OptBatchRows, OptColumn, OptIdField, OptKeyFile, mechanism_flag
from .stores import Collection, MechanismParams

ShardInputs = Annotated[
    list[str], typer.Argument(help="Parquet shards: folder(s), glob pattern(s) or files.")
]
Dsn = Annotated[
    str | None,
    typer.Option(
        envvar="PRIVEMBED_PG_DSN",
        help="The PostgreSQL database with pgvector, a postgresql:// URL every writer reaches "
        "(default: $PRIVEMBED_PG_DSN; password from PGPASSWORD or ~/.pgpass, not the URL).",
    ),
]
LocalPath = Annotated[
    Path,
    typer.Option(
        "--path", help="Local folder beside the collection (what stays with the key holder)."
    ),
]
Writers = Annotated[int, typer.Option(help="Writer processes (local) or Ray actors.")]
Partitions = Annotated[
    int | None,
    typer.Option(help="Hash-partition a new collection's table by id into this many tables."),
]
ClusterMechanism = Annotated[MechanismName, mechanism_flag(help="The privacy mechanism.")]


def index_shards(
    *,
    inputs: ShardInputs,
    dsn: Dsn = None,
    collection: Collection = "privembed",
    path: LocalPath = Path("privembed-db"),
    mechanism: ClusterMechanism,
    params: MechanismParams,
    key_file: OptKeyFile = None,
    writers: Writers = 2,
    partitions: Partitions = None,
    where: ShardEngine,
    batch_rows: OptBatchRows = 4096,
    column: OptColumn = None,
    id_column: OptIdField = None,
    ledger_options: LedgerOptions,
    report: Report,
) -> None:
    """Protect Parquet shards with keyed noise and upsert them, with sealed payloads, into one
    pgvector collection: several writers (processes, or Ray actors with --engine ray), one
    ledger charged once by this process before any writer starts.

    Running the same command again fills in what a failed writer left and charges nothing
    twice (same key, same content: free re-releases).
    """
    from ..integrations.cluster_index import index_cluster
    from ..keys.keyed import load_key

    if not dsn:
        raise ValueError(
            "index-shards needs the database: --dsn postgresql://... or $PRIVEMBED_PG_DSN."
        )
    if key_file is None:
        raise ValueError(
            "index-shards needs --key-file: keyed noise makes every writer (and a re-run) "
            "write the same bits, and the payloads are sealed with it (privembed keygen)."
        )
    out = index_cluster(
        inputs, dsn, collection, params.build(mechanism), key=load_key(key_file), path=path,
        writers=writers, partitions=partitions, **where.kwargs(), batch_rows=batch_rows,
        column=column, id_column=id_column, **dataclasses.asdict(ledger_options),
    )  # fmt: skip
    if report.as_json:
        print_json(out)
    elif not report.quiet:
        _print(out, collection)


def _print(out: dict[str, Any], collection: str) -> None:
    err_console.print(
        f"indexed {out['rows']} records into {collection} ({out['count']} rows there) with "
        f"{len(out['writers'])} {out['engine']} writer(s) in {out['seconds']:.1f} s",
        highlight=False,
    )
    for w in out["writers"]:
        err_console.print(
            f"  writer {w['writer']}: {w['rows']} rows in {w['batches']} batch(es), "
            f"{w['rows_per_second']:,.0f} rows/s",
            highlight=False,
        )
    led = out["ledger"]
    if led is not None:
        err_console.print(
            f"ledger: {led['fresh']} record(s) charged, {led['free']} free re-release(s), "
            f"one release ({led['batches']} batch(es) accounted before the writers started)",
            highlight=False,
        )
    err_console.print(f"guarantee: {out['guarantee']}", highlight=False)


def register(app: typer.Typer) -> None:
    """Add ``index-shards`` to ``app``."""
    app.command("index-shards")(user_errors(with_option_groups(index_shards)))
