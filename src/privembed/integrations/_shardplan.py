"""What every shard engine shares: listing shards, checking them, the plan, output metadata.

Kept apart from the engines (:mod:`.shards` drives them, :mod:`.ray_engine` is one of them) so
that no engine module imports the driver.
"""

from __future__ import annotations

import glob
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core._validation import DataError
from ..release import refuse_protected, release_metadata

__all__ = ["PARQUET_SUFFIXES", "ShardPlan", "output_metadata", "plan_shards", "resolve_shards"]

PARQUET_SUFFIXES = (".parquet", ".pq")


def resolve_shards(inputs: str | Path | Sequence[str | Path]) -> list[Path]:
    """The Parquet files named by a folder, a glob pattern, a file, or a list of those.

    A folder contributes its ``*.parquet`` / ``*.pq`` files (not recursive). The result is
    sorted within each entry, without duplicates.

    Raises
    ------
    FileNotFoundError
        Nothing matches.
    ValueError
        A named file is not Parquet.
    """
    entries = [inputs] if isinstance(inputs, str | Path) else list(inputs)
    if not entries:
        raise ValueError("no input shards given.")
    out: list[Path] = []
    for entry in entries:
        p = Path(entry)
        text = str(entry)
        if p.is_dir():
            found = sorted(q for q in p.iterdir() if q.suffix.lower() in PARQUET_SUFFIXES)
            if not found:
                raise FileNotFoundError(f"no .parquet files in folder {p}")
        elif any(ch in text for ch in "*?["):
            found = sorted(
                Path(q) for q in glob.glob(text) if Path(q).suffix.lower() in PARQUET_SUFFIXES
            )
            if not found:
                raise FileNotFoundError(f"no .parquet files match {text!r}")
        elif p.exists():
            if p.suffix.lower() not in PARQUET_SUFFIXES:
                raise ValueError(f"shards must be Parquet files (.parquet/.pq), got {p}.")
            found = [p]
        else:
            raise FileNotFoundError(f"file not found: {p}")
        out.extend(found)
    seen: set[Path] = set()
    uniq = []
    for q in out:
        r = q.resolve()
        if r not in seen:
            seen.add(r)
            uniq.append(q)
    return uniq


@dataclass
class ShardPlan:
    """What :func:`plan_shards` found: the files, row counts, dimension, metadata and ids."""

    files: list[Path]
    rows: list[int]
    dim: int
    metadata: dict[str, Any]
    ids: list[list[Any]] | None = None
    column: str | None = None
    id_column: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def total_rows(self) -> int:
        return int(sum(self.rows))


def plan_shards(
    files: Sequence[Path],
    *,
    column: str | None = None,
    id_column: str | None = None,
    need_ids: bool = False,
    allow_reprotect: bool = False,
) -> ShardPlan:
    """Check shards before any work: schema, dimension, protection state and (optionally) ids.

    Raises
    ------
    privembed.DataError
        Different embedding dimensions across shards, missing or duplicate ids.
    ValueError
        A shard is already protected (and ``allow_reprotect`` is false).
    """
    from ..data.io import iter_batches, read_ids

    rows, dims, metas = [], [], []
    for f in files:
        n, d, meta, _ = iter_batches(f, column=column, id_column=id_column)
        rows.append(int(n))
        dims.append(int(d))
        metas.append(meta)
        refuse_protected(meta, f, allow=allow_reprotect)
    known = {d for d in dims if d > 0}
    if len(known) > 1:
        detail = ", ".join(f"{f.name}: {d}" for f, d in zip(files, dims, strict=True) if d > 0)
        raise DataError(f"shards have different embedding dimensions ({detail}).")
    models = {str(m["embedding_model"]) for m in metas if m.get("embedding_model")}
    if len(models) > 1:
        raise DataError(f"shards come from different embedding models: {sorted(models)}.")
    ids = None
    if need_ids:
        ids = []
        seen: set[Any] = set()
        from ..keys.keyed import typed_id

        for f in files:
            got = read_ids(f, id_column=id_column)
            if got is None:
                raise DataError(
                    f"{f} has no record ids; keyed noise and the ledger need an id column "
                    "(id_column / --id-field)."
                )
            for rid in got:
                t = typed_id(rid)
                if t in seen:
                    raise DataError(
                        f"record id {rid!r} appears more than once across the shards (first "
                        f"repeat in {f.name}); ids must be unique for keyed noise and the ledger."
                    )
                seen.add(t)
            ids.append(got)
    return ShardPlan(
        files=list(files),
        rows=rows,
        dim=known.pop() if known else -1,
        metadata=metas[0] if metas else {},
        ids=ids,
        column=column,
        id_column=id_column,
    )


def output_metadata(meta_in: dict[str, Any], protection: dict[str, Any]) -> dict[str, Any]:
    """File metadata of a protected shard: :func:`privembed.release.release_metadata`, the
    rule ``protect`` follows (an earlier protection's key id or projection is not kept)."""
    return release_metadata(meta_in, protection)
