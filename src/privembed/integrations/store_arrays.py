"""Strings and payload bytes of the FAISS store as NumPy arrays."""

from __future__ import annotations

import itertools
import zipfile
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray


def _gather(
    src: Any,
    starts: NDArray[np.int64],
    lens: NDArray[np.int64],
    off: NDArray[np.int64],
    out: NDArray[np.uint8],
) -> None:
    """``out[off[i] : off[i] + lens[i]] = src[starts[i] : starts[i] + lens[i]]`` for every i
    (``starts`` ascending): one gather of whole rows per distinct length, in source order (the
    views of ``src`` end with the call, so a memory map can close after it)."""
    buf = np.frombuffer(src, dtype=np.uint8)
    windows = np.lib.stride_tricks.sliding_window_view
    for length in np.unique(lens[lens > 0]).tolist():
        rows = np.flatnonzero(lens == length)
        windows(out, length, writeable=True)[off[rows]] = windows(buf, length)[starts[rows]]
    del buf


def _join_utf8(items: Sequence[str]) -> tuple[NDArray[np.uint8], NDArray[np.int64]]:
    """Strings as one UTF-8 byte array and offsets (n + 1): no fixed-width padding."""
    encoded = [t.encode("utf-8", "surrogatepass") for t in items]
    off = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(e) for e in encoded], out=off[1:])
    return np.frombuffer(b"".join(encoded), dtype=np.uint8), off


def _split_utf8(blob: NDArray[Any], off: NDArray[Any]) -> list[str]:
    raw = np.asarray(blob, dtype=np.uint8).tobytes()
    bounds = np.asarray(off, dtype=np.int64).tolist()
    if len(bounds) < 1 or bounds[0] != 0 or bounds[-1] != len(raw):
        raise ValueError("string offsets do not match their bytes")
    seen: dict[bytes, str] = {}  # equal strings share one object (most metadata is "{}")
    out = []
    for a, b in itertools.pairwise(bounds):
        chunk = raw[a:b]
        text = seen.get(chunk) if b - a <= 8 else None
        if text is None:
            text = chunk.decode("utf-8", "surrogatepass")
            if b - a <= 8:
                seen[chunk] = text
        out.append(text)
    return out


class _Strings:
    """A list of strings kept as UTF-8 bytes and offsets until one is changed: a store opened
    to search decodes the ids and metadata of its hits only (at 117,659 records the decoded
    lists and their index cost about 15 MiB of the store's memory)."""

    __slots__ = ("_items", "_off", "_raw")

    def __init__(self, raw: bytes = b"", off: NDArray[Any] | None = None) -> None:
        self._off = np.zeros(1, dtype=np.int64) if off is None else np.asarray(off, np.int64)
        if (
            self._off.ndim != 1
            or self._off[0] != 0
            or self._off[-1] != len(raw)
            or (np.diff(self._off) < 0).any()
        ):
            raise ValueError("string offsets do not match their bytes")
        self._raw = raw
        self._items: list[str] | None = None

    @classmethod
    def of(cls, items: list[str]) -> _Strings:
        out = cls()
        out._items = items
        return out

    def __len__(self) -> int:
        return len(self._items) if self._items is not None else self._off.size - 1

    def __getitem__(self, i: int) -> str:
        if self._items is not None:
            return self._items[i]
        if not 0 <= i < self._off.size - 1:
            raise IndexError(i)
        a, b = int(self._off[i]), int(self._off[i + 1])
        return self._raw[a:b].decode("utf-8", "surrogatepass")

    def __iter__(self) -> Iterator[str]:
        if self._items is not None:
            return iter(self._items)
        return (self[i] for i in range(len(self)))

    def take(self, positions: Sequence[int]) -> list[str]:
        """The strings at ``positions`` (valid indices), decoded in one pass: a search's hits
        (``self[i]`` per hit costs a numpy scalar read and a bounds check each)."""
        if self._items is not None:
            items = self._items
            return [items[i] for i in positions]
        idx = np.asarray(positions, dtype=np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= self._off.size - 1):
            raise IndexError(f"positions outside 0..{self._off.size - 2}")
        raw = self._raw
        return [
            raw[a:b].decode("utf-8", "surrogatepass")
            for a, b in zip(self._off[idx].tolist(), self._off[idx + 1].tolist(), strict=True)
        ]

    def _list(self) -> list[str]:
        if self._items is None:
            self._items = _split_utf8(np.frombuffer(self._raw, dtype=np.uint8), self._off)
            self._raw, self._off = b"", np.zeros(1, dtype=np.int64)
        return self._items

    def append(self, item: str) -> None:
        self._list().append(item)

    def __setitem__(self, i: int, item: str) -> None:
        self._list()[i] = item

    def arrays(self) -> tuple[NDArray[np.uint8], NDArray[np.int64]]:
        """The UTF-8 bytes and offsets (as :func:`_join_utf8` writes them)."""
        if self._items is None:
            return np.frombuffer(self._raw, dtype=np.uint8), self._off
        return _join_utf8(self._items)


def _npy_rows(zf: zipfile.ZipFile, name: str, chunk_bytes: int = 1 << 24) -> Iterator[list[str]]:
    """The rows of a 1-D string array member of an ``.npz``, in chunks of about
    ``chunk_bytes`` (a layout-1 metadata array is as wide as its longest row: reading it whole
    took 1 GB at 117k records)."""
    with zf.open(f"{name}.npy") as fh:
        version = np.lib.format.read_magic(fh)
        if version == (1, 0):
            shape, _fortran, dtype = np.lib.format.read_array_header_1_0(fh)
        else:
            shape, _fortran, dtype = np.lib.format.read_array_header_2_0(fh)
        if dtype.kind != "U" or len(shape) != 1:
            raise ValueError(f"{name} is not a 1-D string array (dtype {dtype}, shape {shape})")
        n, width = int(shape[0]), int(dtype.itemsize)
        if width == 0:
            yield [""] * n
            return
        step = max(1, chunk_bytes // width)
        for s in range(0, n, step):
            rows = min(step, n - s)
            buf = fh.read(rows * width)
            if len(buf) != rows * width:
                raise ValueError(f"{name} is truncated")
            yield np.frombuffer(buf, dtype=dtype).tolist()
