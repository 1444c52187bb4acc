"""A real PostgreSQL with pgvector for the tests: one server per session, a database per test.

The server is ``pgserver`` (PyPI: PostgreSQL 16 with pgvector, started as a local process that
listens on a Unix socket only; as root it runs the server as its own system user). Each test
that asks for ``pg_url`` gets a new, empty database, dropped afterwards, and ``pg_admin`` runs
statements as the superuser (to cut connections, for instance).
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Any]:
    with warnings.catch_warnings():
        # platformdirs warns at import when XDG_RUNTIME_DIR is unset (CI, root shells)
        warnings.simplefilter("ignore")
        import pgserver

    # not under pytest's basetemp: another pytest run on the machine prunes old basetemps,
    # and would delete the data folder under a running server
    root = Path(tempfile.mkdtemp(prefix="privembed-pg-"))
    server = pgserver.get_server(root / "data", cleanup_mode="delete")
    try:
        yield server
    finally:
        server.cleanup()
        shutil.rmtree(root, ignore_errors=True)


def admin_connect(server: Any, database: str = "postgres") -> Any:
    import psycopg

    return psycopg.connect(server.get_uri(database), autocommit=True)


def terminate(server: Any, database: str) -> int:
    """End every backend connected to ``database`` (as an administrator would); how many."""
    with admin_connect(server) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s "
            "AND pid <> pg_backend_pid()",
            (database,),
        ).fetchall()
    return len(rows)


def allow_connections(server: Any, database: str, allowed: bool) -> None:
    from psycopg import sql

    with admin_connect(server) as admin:
        admin.execute(
            sql.SQL("ALTER DATABASE {} WITH ALLOW_CONNECTIONS {}").format(
                sql.Identifier(database), sql.Literal(allowed)
            )
        )


@pytest.fixture
def pg_database(pg_server: Any) -> Iterator[str]:
    """The name of a new, empty database (pgvector available), dropped after the test."""
    from psycopg import sql

    name = f"t_{uuid.uuid4().hex[:16]}"
    with admin_connect(pg_server) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield name
    finally:
        with admin_connect(pg_server) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@pytest.fixture
def pg_url(pg_server: Any, pg_database: str) -> str:
    """A ``postgresql://`` URL of a new, empty database."""
    return str(pg_server.get_uri(pg_database))
