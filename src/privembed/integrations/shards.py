"""Protect a directory (or glob) of Parquet shards: the local engine and what every engine shares.

:func:`protect_shards` protects every shard of a dataset into an output folder, with one of two
engines that produce **bit-identical vectors** for the same input, mechanism and key:

* ``engine="local"`` -- one process, shard after shard, bounded memory (:func:`transform_file`);
  output files keep the input file names;
* ``engine="ray"`` -- Ray Data, ``read_parquet -> map_batches(protect) -> write_parquet``
  (:mod:`privembed.integrations.ray_engine`); output file names are Ray's.

Keyed noise (:mod:`privembed.keys.keyed`) is what makes the engines agree: the noise of a record is a
function of (key, configuration, model, record id, content) only, not of which shard, block or
batch the record lands in. Without a key the local engine can be seeded (experiments; each row
has its own stream); the Ray engine draws fresh OS entropy in every task.

The shards are the source (``_Shards``) and the output folder the sink (``_ShardFolder``) of
:func:`privembed.release.publish`, which opens the ledger and begins the release. What happens,
in order:

1. the shards are listed and checked (same embedding column and dimension; not protected already
   unless allowed; record ids present and unique across all shards when a key or a ledger is
   used -- read from the id columns only);
2. with a ledger, the driver stages **one release of all records** (:class:`~privembed.release.
   Release`; keyed tags from the input shards, so free re-releases are recognised) -- workers
   hold a copy of the release without the ledger and never touch it;
3. the engine writes into a hidden staging folder next to the output;
4. the driver commits the release in the ledger (budgets checked: a refusal publishes nothing);
5. the staging folder is renamed to the output folder (an existing output is replaced only with
   ``overwrite=True``). A crash between 4 and 5 leaves a charged release without output (the
   safe direction), never an output without its ledger record.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ..core._validation import check_choice, check_int
from ..mechanisms import Mechanism
from ..release import Batch, Release, ReleaseRequest, Releases, publish
from ._shardplan import (
    PARQUET_SUFFIXES,
    ShardPlan,
    output_metadata,
    plan_shards,
    resolve_shards,
)

__all__ = [
    "PARQUET_SUFFIXES",
    "ShardPlan",
    "output_metadata",
    "plan_shards",
    "protect_dataset",
    "protect_shards",
    "resolve_shards",
]

ENGINES = ("local", "ray")


@contextlib.contextmanager
def _staging(output_dir: Path, overwrite: bool) -> Iterator[Path]:
    """A hidden folder next to ``output_dir``; renamed over it on success, removed on failure."""
    parent = output_dir.parent
    if not parent.exists():
        raise FileNotFoundError(f"output folder's parent does not exist: {parent}")
    if output_dir.exists() and not overwrite:
        raise FileExistsError(
            f"output folder already exists: {output_dir} (pass overwrite / --overwrite)."
        )
    if output_dir.exists() and not output_dir.is_dir():
        raise NotADirectoryError(f"output must be a folder, got a file: {output_dir}")
    token = secrets.token_hex(4)
    stage = parent / f".{output_dir.name}.staging-{token}"
    stage.mkdir()
    try:
        yield stage
        if output_dir.exists():
            old = parent / f".{output_dir.name}.old-{token}"
            os.replace(output_dir, old)
            os.replace(stage, output_dir)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(stage, output_dir)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise


def _check_engine_options(engine: str, rng: Any, address: str | None, num_cpus: int | None) -> None:
    """Refuse a seed for the Ray engine, and Ray's options for the local one."""
    if engine == "ray":
        if rng is not None:
            raise ValueError(
                "the Ray engine cannot use a seed (tasks would repeat or reorder the noise); "
                "use a key for reproducible, partition-independent output."
            )
    elif address is not None or num_cpus is not None:
        raise ValueError("address and num_cpus apply to engine='ray' only.")


def _shard_files(inputs: Any, out_dir: Path, engine: str) -> list[Path]:
    """The input shards, outside the output folder and (local engine) of distinct names."""
    files = resolve_shards(inputs)
    for f in files:
        if out_dir.resolve() == f.resolve().parent or out_dir.resolve() in f.resolve().parents:
            raise ValueError(f"output folder {out_dir} must not contain the input shards.")
    if engine == "local":
        names = [f.stem for f in files]
        if len(set(names)) != len(names):
            raise ValueError(
                "shards from different folders share file names; the local engine keeps "
                "names, so rename them or use engine='ray'."
            )
    return files


def _kept_columns(
    plan: ShardPlan, keep_columns: Sequence[str]
) -> tuple[tuple[str, ...], list[str]]:
    """The other columns copied as they are and those dropped; every shard must have the kept
    ones (checked before any work)."""
    from ..data.io import other_columns

    keep = tuple(dict.fromkeys(str(c) for c in keep_columns))
    dropped: list[str] = []
    for f in plan.files:
        _kept, drop = other_columns(f, keep, column=plan.column, id_column=plan.id_column)
        dropped += [c for c in drop if c not in dropped]
    return keep, dropped


class _Shards:
    """The shards of a plan as a source: every record's ids and clean vectors, read from the
    input shards (the driver accounts them; the engine's workers read the shards themselves)."""

    name = "X"

    def __init__(self, plan: ShardPlan, batch_rows: int) -> None:
        self.plan, self.batch_rows = plan, batch_rows
        self.model: str | None = plan.metadata.get("embedding_model")

    def batches(self) -> Iterator[Batch]:
        from ..data.io import iter_batches

        p = self.plan
        for f in p.files:
            _n, _d, _m, raw = iter_batches(
                f, batch_rows=self.batch_rows, column=p.column, id_column=p.id_column
            )
            for b in raw:
                assert b.ids is not None
                yield Batch(b.X, b.ids, start=b.start)


class _ShardFolder:
    """An output folder as a sink: one release of all records, staged by the driver (keyed tags
    from the input shards, so free re-releases are recognised), drawn by workers that hold a
    copy without the ledger, written into a hidden staging folder and renamed into place only
    after the commit."""

    per_batch = False

    def __init__(
        self,
        out_dir: Path,
        *,
        engine: str,
        overwrite: bool,
        keep: tuple[str, ...],
        on_shard: Callable[[Path, int], None] | None,
        address: str | None,
        num_cpus: int | None,
    ) -> None:
        self.out_dir, self.engine, self.overwrite, self.keep = out_dir, engine, overwrite, keep
        self.on_shard, self.address, self.num_cpus = on_shard, address, num_cpus
        self.destination = str(out_dir.resolve())
        self.files_out = 0

    def run(self, source: Any, releases: Releases) -> None:
        plan, batch_rows = source.plan, source.batch_rows
        protection = releases.metadata(plan.dim if plan.dim > 0 else None)
        worker = releases.worker_copy()
        if releases.ledger is not None:
            for b in source.batches():
                releases.account(b)
        with _staging(self.out_dir, self.overwrite) as stage:
            if self.engine == "local":
                _run_local(plan, stage, worker, protection, batch_rows, self.on_shard, self.keep)
            else:
                from .ray_engine import run_ray

                run_ray(
                    plan,
                    stage,
                    worker,
                    protection,
                    batch_rows=batch_rows,
                    address=self.address,
                    num_cpus=self.num_cpus,
                    keep_columns=self.keep,
                )
            self.files_out = sum(1 for q in stage.iterdir() if q.suffix == ".parquet")
            releases.commit()  # before the staging folder becomes the output
        releases.published()


def protect_shards(
    inputs: str | Path | Sequence[str | Path],
    output_dir: str | Path,
    mechanism: Mechanism,
    *,
    key: Any = None,
    rng: Any = None,
    engine: str = "local",
    address: str | None = None,
    num_cpus: int | None = None,
    batch_rows: int = 4096,
    column: str | None = None,
    id_column: str | None = None,
    ledger: str | Path | None = None,
    budget_epsilon: float | None = None,
    budget_delta: float | None = None,
    allow_reprotect: bool = False,
    overwrite: bool = False,
    keep_columns: Sequence[str] = (),
    on_shard: Callable[[Path, int], None] | None = None,
) -> dict[str, Any]:
    """Protect every shard of a Parquet dataset into ``output_dir`` (see the module docstring).

    Parameters
    ----------
    inputs : folder, glob pattern, file, or a list of them
    output_dir : str or Path
        Output folder (must not exist unless ``overwrite``; must not hold the inputs).
    mechanism : Mechanism
    key : bytes or key file, optional
        Keyed noise (record ids required): the engines then agree bit for bit.
    rng : int, Generator or None
        Without a key: local engine only may be seeded; Ray always uses fresh entropy.
    engine : {"local", "ray"}
    address, num_cpus
        Ray only: connect to an existing cluster (``address``), or start a local one with
        ``num_cpus`` CPUs (default: all).
    batch_rows : int
        Rows per protected batch (bounds memory; does not change keyed output).
    ledger, budget_epsilon, budget_delta
        Privacy ledger file and per-record budget (see :mod:`privembed.keys.ledger`).
    keep_columns : sequence of str
        Other columns to copy into the output as they are (not protected); the rest are
        dropped. Every shard must have them.

    Returns
    -------
    dict
        ``rows``, ``shards_in``, ``files_out``, ``dim_in``, ``dim_out``, ``engine``,
        ``seconds``, ``ledger_releases``, ``output``, ``dropped_columns``.
    """
    engine = check_choice("engine", engine, ENGINES)
    batch_rows = check_int("batch_rows", batch_rows, ge=1)
    out_dir = Path(output_dir)
    _check_engine_options(engine, rng, address, num_cpus)
    request = ReleaseRequest(
        key=key, rng=rng, ledger=ledger, budget_epsilon=budget_epsilon, budget_delta=budget_delta
    )
    request.check()
    if (budget_epsilon is not None or budget_delta is not None) and ledger is None:
        raise ValueError("budget_epsilon/budget_delta need a ledger.")
    files = _shard_files(inputs, out_dir, engine)
    plan = plan_shards(
        files,
        column=column,
        id_column=id_column,
        need_ids=request.needs_ids,
        allow_reprotect=allow_reprotect,
    )
    if plan.dim > 0:
        mechanism.check_dim(plan.dim)
    keep, dropped = _kept_columns(plan, keep_columns)
    sink = _ShardFolder(
        out_dir, engine=engine, overwrite=overwrite, keep=keep, on_shard=on_shard,
        address=address, num_cpus=num_cpus,
    )  # fmt: skip
    t0 = time.perf_counter()
    releases = publish(_Shards(plan, batch_rows), sink, mechanism, request)
    seconds = time.perf_counter() - t0
    files_out = sink.files_out
    ledger_releases = releases.count if ledger is not None else 0
    return {
        "rows": plan.total_rows,
        "shards_in": len(files),
        "files_out": files_out,
        "dim_in": plan.dim,
        "dim_out": mechanism.output_dim(plan.dim) if plan.dim > 0 else None,
        "engine": engine,
        "seconds": seconds,
        "ledger_releases": ledger_releases,
        "output": str(out_dir),
        "guarantee": mechanism.guarantee.describe(),
        "kept_columns": list(keep),
        "dropped_columns": dropped,
    }


def _run_local(
    plan: ShardPlan,
    stage: Path,
    worker: Release,
    protection: dict[str, Any],
    batch_rows: int,
    on_shard: Callable[[Path, int], None] | None,
    keep_columns: tuple[str, ...] = (),
) -> None:
    from ..data.io import transform_file

    offset = 0
    for f, n in zip(plan.files, plan.rows, strict=True):
        worker.name = f.name
        base = offset

        def fn(batch: Any, base: int = base) -> Any:
            return worker.protect(batch.X, batch.ids, row_offset=base + batch.start)

        summary = transform_file(
            f,
            stage / (f.stem + ".parquet"),
            fn,
            metadata=lambda m: output_metadata(m, protection),
            batch_rows=batch_rows,
            column=plan.column,
            id_column=plan.id_column,
            keep_columns=keep_columns,
        )
        offset += n
        if on_shard is not None:
            on_shard(f, int(summary["rows"]))


def protect_dataset(
    paths_or_dir: str | Path | Sequence[str | Path],
    output_dir: str | Path,
    mechanism: Mechanism,
    key: bytes | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Protect a folder, glob or list of Parquet shards with Ray Data (see the module docstring):
    :func:`protect_shards` with ``engine="ray"``.

    Parameters
    ----------
    paths_or_dir : folder, glob pattern, file or list of them
    output_dir : str or Path
        Output folder of Parquet files (written atomically: staged, then renamed).
    mechanism : Mechanism
    key : bytes, optional
        Keyed noise: output independent of partitioning, equal to the local engine's. Without
        a key every task draws fresh OS entropy.
    **options
        As in :func:`protect_shards`: ``address`` (an existing Ray cluster; default: start a
        local one), ``num_cpus`` (CPUs of the local instance; default: all), ``batch_rows``
        (rows per ``map_batches`` call), ``column``, ``id_column``, ``ledger``,
        ``budget_epsilon``, ``budget_delta``, ``allow_reprotect``, ``overwrite``,
        ``keep_columns``.

    Returns
    -------
    dict
        Summary (rows, files, seconds, ...).
    """
    return protect_shards(paths_or_dir, output_dir, mechanism, key=key, engine="ray", **options)
