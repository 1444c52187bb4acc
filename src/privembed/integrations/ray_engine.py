"""Protect Parquet shards with Ray Data: ``read_parquet -> map_batches(protect) -> write_parquet``.

:func:`privembed.integrations.shards.protect_dataset` is
:func:`~privembed.integrations.shards.protect_shards` with ``engine="ray"``; this module is the
engine only (it imports the shared plan, never the driver). Everything around the Ray job -- listing and checking shards, the ledger
pre-flight, one ledger release per output shard recorded by the driver, the atomic output
folder -- is shared with the local engine, and with a key the vectors are bit-identical to the
local engine's and to ``privembed protect`` on each shard.

Cluster. By default a local Ray instance is started with ``ray.init(num_cpus=...)`` and shut down
afterwards; with ``address`` the job runs on an existing cluster (``"auto"`` or
``"ray://head:10001"``), and an already initialised Ray session is used as it is. On a cluster
the input and output paths must be visible to every node (a shared file system), since the
driver lists the inputs and reads the outputs back for the ledger.

Secrets. Keyed noise needs the key where the noise is drawn: it is shipped to the workers inside
the task arguments (Ray's object store). On a cluster whose network is not trusted, enable Ray's
TLS; never use a key on a cluster whose nodes you do not trust.

Workers report errors in user data (NaN rows, duplicate ids) as the same one-line
:class:`privembed.DataError` the local engine raises.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..core._optional import require
from ..core._validation import DataError
from ..release import Release
from ._shardplan import ShardPlan, output_metadata

__all__ = ["run_ray"]


def _protect_table(
    table: Any,
    *,
    protector: Release,
    column: str,
    id_column: str | None,
    meta: bytes,
    keep: tuple[str, ...] = (),
) -> Any:
    """The ``map_batches`` function: one Arrow table in, the protected table out."""
    import pyarrow as pa

    from ..data.io import _list_to_numpy, _numpy_to_list

    X = _list_to_numpy(table.column(column), column)
    ids = table.column(id_column).to_pylist() if id_column else None
    # errors name the batch by its first record (Ray does not say which file it came from)
    protector.name = f"the batch starting at id {ids[0]!r}" if ids else "a batch"
    Y = protector.protect(X, ids)
    cols: dict[str, Any] = {}
    if id_column:
        cols["id"] = table.column(id_column)
    for name in keep:  # other columns only on request: they are not protected
        cols[name] = table.column(name)
    cols["embedding"] = _numpy_to_list(Y)
    return pa.table(cols).replace_schema_metadata({b"privembed": meta})


#: how a remote traceback names our error (from the class itself: a module move cannot stale it)
_REMOTE_DATA_ERROR = re.compile(
    re.escape(f"{DataError.__module__}.{DataError.__qualname__}") + ": (.+)"
)


def _user_error(exc: BaseException) -> BaseException | None:
    """The privembed data error inside Ray's wrappers (RayTaskError, UserCodeException).

    Ray re-raises a task's exception on the driver wrapped in its own types; the original is
    sometimes an attribute (``cause``) and sometimes only text in the remote traceback (exception
    chains do not survive pickling), so both are searched.
    """
    seen: set[int] = set()
    queue: list[BaseException | None] = [exc]
    while queue:
        e = queue.pop(0)
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if type(e) is DataError:
            return e
        queue.extend([getattr(e, "cause", None), e.__cause__, e.__context__])
    found = _REMOTE_DATA_ERROR.findall(str(exc))
    return DataError(found[-1].strip()) if found else None


@contextlib.contextmanager
def ray_session(address: str | None = None, num_cpus: int | None = None) -> Iterator[Any]:
    """Use the running Ray session, or start one (local, or connected to ``address``)."""
    ray = require("ray", "distributed", purpose="the Ray engine")
    if ray.is_initialized():
        yield ray
        return
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
    if address is not None:
        kwargs["address"] = address
    else:
        kwargs["num_cpus"] = num_cpus
    try:
        ray.init(**kwargs)
    except (ConnectionError, RuntimeError) as exc:
        where = f"cluster at {address!r}" if address else "a local Ray instance"
        raise ValueError(f"cannot start {where}: {str(exc).splitlines()[0]}") from None
    try:
        yield ray
    finally:
        ray.shutdown()


def run_ray(
    plan: ShardPlan,
    stage: Path,
    protector: Release,
    protection: dict[str, Any],
    *,
    batch_rows: int,
    address: str | None = None,
    num_cpus: int | None = None,
    num_blocks: int | None = None,
    keep_columns: tuple[str, ...] = (),
) -> None:
    """Run the Ray Data job for a checked :class:`ShardPlan`, writing Parquet into ``stage``."""
    from ..data.io import _embedding_column, _open_parquet

    first = plan.files[0]
    schema = _open_parquet(first).schema_arrow
    column = _embedding_column(schema, plan.column, first)
    id_column = plan.id_column or ("id" if "id" in schema.names else None)
    meta = json.dumps(output_metadata(plan.metadata, protection)).encode()
    with ray_session(address, num_cpus):
        import ray.data

        fn = functools.partial(
            _protect_table,
            protector=protector,
            column=column,
            id_column=id_column,
            meta=meta,
            keep=keep_columns,
        )
        try:
            ds = ray.data.read_parquet(
                [str(f.resolve()) for f in plan.files], override_num_blocks=num_blocks
            )
            ds = ds.map_batches(fn, batch_format="pyarrow", batch_size=batch_rows)
            ds.write_parquet(str(stage.resolve()))
        except Exception as exc:
            found = _user_error(exc)
            if found is not None:
                raise found from None
            raise
