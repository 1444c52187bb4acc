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
    """A list of strings kept as UTF-8 bytes and offsets: a store opened to search decodes the
    ids and metadata of its hits only, and strings appended (:meth:`extend`) are packed too (a
    Python str and its list slot cost ~60 bytes more than its UTF-8 bytes: 1M ids of 10
    characters ~70 MB as a list, 18 MB packed). Replacing a string (``s[i] = x``) decodes the
    whole list once, from then on kept as a list."""

    __slots__ = ("_items", "_n", "_off", "_raw")

    def __init__(self, raw: bytes = b"", off: NDArray[Any] | None = None) -> None:
        self._off = np.zeros(1, dtype=np.int64) if off is None else np.asarray(off, np.int64)
        if (
            self._off.ndim != 1
            or self._off.size < 1
            or self._off[0] != 0
            or self._off[-1] != len(raw)
            or (np.diff(self._off) < 0).any()
        ):
            raise ValueError("string offsets do not match their bytes")
        self._raw = bytearray(raw)
        self._n = self._off.size - 1  # strings held; ``_off`` has room for more
        self._items: list[str] | None = None

    @classmethod
    def of(cls, items: list[str]) -> _Strings:
        out = cls()
        out._items = items
        return out

    def __len__(self) -> int:
        return len(self._items) if self._items is not None else self._n

    def __getitem__(self, i: int) -> str:
        if self._items is not None:
            return self._items[i]
        if not 0 <= i < self._n:
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
        if idx.size and (idx.min() < 0 or idx.max() >= self._n):
            raise IndexError(f"positions outside 0..{self._n - 1}")
        raw = self._raw
        return [
            raw[a:b].decode("utf-8", "surrogatepass")
            for a, b in zip(self._off[idx].tolist(), self._off[idx + 1].tolist(), strict=True)
        ]

    def _list(self) -> list[str]:
        if self._items is None:
            raw, off = self.arrays()
            self._items = _split_utf8(raw, off)
            self._raw, self._off, self._n = bytearray(), np.zeros(1, dtype=np.int64), 0
        return self._items

    def extend(self, items: Sequence[str]) -> None:
        """Append strings, packed (kept as a list once one was replaced)."""
        if self._items is not None:
            self._items.extend(items)
            return
        blob, off = _join_utf8(items)
        need = self._n + 1 + len(items)
        if need > self._off.size:  # room for the offsets, grown by half at a time
            grown = np.zeros(max(need, self._off.size * 3 // 2 + 16), dtype=np.int64)
            grown[: self._n + 1] = self._off[: self._n + 1]
            self._off = grown
        self._off[self._n + 1 : need] = off[1:] + self._off[self._n]
        self._raw += blob.tobytes()
        self._n += len(items)

    def append(self, item: str) -> None:
        self.extend([item])

    def __setitem__(self, i: int, item: str) -> None:
        self._list()[i] = item

    def arrays(self) -> tuple[NDArray[np.uint8], NDArray[np.int64]]:
        """The UTF-8 bytes and offsets (as :func:`_join_utf8` writes them; a copy)."""
        if self._items is None:
            return np.frombuffer(bytes(self._raw), dtype=np.uint8), self._off[: self._n + 1].copy()
        return _join_utf8(self._items)


class _IdLabels:
    """Record id -> FAISS label for the ids of a :class:`_Strings` (label ``i``: its ``i``-th
    id), without a dict: the ids' 64-bit hashes sorted, with their labels; a lookup is a binary
    search (``np.searchsorted``) confirmed by comparing the id itself, so two ids whose hashes
    collide stay two records. 16 bytes an id (a dict of str: ~100 bytes an id beside the ids).

    The hash is Python's ``hash`` of the id (keyed per process), never stored: a store rebuilds
    this from its ids when it first looks one up."""

    __slots__ = ("_hash", "_ids", "_label")

    def __init__(self, ids: _Strings) -> None:
        self._ids = ids
        h = _hashes(ids)
        order = np.argsort(h, kind="stable")
        self._hash = h[order]
        self._label = order.astype(np.int64)

    def get(self, keys: Sequence[str]) -> NDArray[np.int64]:
        """The label of each id (``-1``: not held)."""
        out = np.full(len(keys), -1, dtype=np.int64)
        if not len(keys) or not self._hash.size:
            return out
        h = _hashes(keys)
        lo = np.searchsorted(self._hash, h, side="left")
        hi = np.searchsorted(self._hash, h, side="right")
        one = np.flatnonzero(hi - lo == 1)  # one held id of that hash: compare it
        if one.size:
            labels = self._label[lo[one]]
            held = self._ids.take(labels.tolist())
            same = np.fromiter(
                (held[j] == keys[q] for j, q in enumerate(one.tolist())), bool, one.size
            )
            out[one[same]] = labels[same]
        for q in np.flatnonzero(hi - lo > 1).tolist():  # a hash shared by held ids: rare
            for lab in self._label[lo[q] : hi[q]].tolist():
                if self._ids[lab] == keys[q]:
                    out[q] = lab
                    break
        return out

    def add(self, keys: Sequence[str], labels: NDArray[np.int64]) -> None:
        """Index new ids (none held already) under their labels."""
        if not len(keys):
            return
        h = _hashes(keys)
        order = np.argsort(h, kind="stable")
        h, lab = h[order], np.asarray(labels, dtype=np.int64)[order]
        at = np.searchsorted(self._hash, h, side="right")
        self._hash = np.insert(self._hash, at, h)
        self._label = np.insert(self._label, at, lab)


def _hashes(items: Any) -> NDArray[np.int64]:
    """Python's hash of each string (64 bits on the platforms privembed runs on)."""
    return np.fromiter((hash(s) for s in items), dtype=np.int64, count=len(items))


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
