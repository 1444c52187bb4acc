"""MTEB / BEIR tasks (STS12, FiQA, ...) from a local folder in the hub layout or by hub name.

Loaded through :mod:`privembed.evaluation.loaders` (:func:`load_mteb_sts`,
:func:`load_mteb_retrieval`); :class:`MTEBRetrieval` is also the form of the GCIDE task
(:mod:`privembed.evaluation.gcide`).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core._optional import require
from ..core._validation import DataError
from .utility import STSTask

__all__ = ["MTEBSTS", "MTEBRetrieval", "load_mteb_retrieval", "load_mteb_sts"]


@dataclass(frozen=True)
class MTEBSTS:
    """An STS task: sentence pairs and gold scores."""

    name: str
    sentences1: list[str]
    sentences2: list[str]
    scores: NDArray[np.float64]

    def __len__(self) -> int:
        return len(self.scores)

    def sts_task(self) -> tuple[list[str], STSTask]:
        """Texts to embed (first sentences, then second ones) and the task over their rows."""
        m = len(self.scores)
        pairs = np.stack([np.arange(m), np.arange(m, 2 * m)], axis=1)
        return self.sentences1 + self.sentences2, STSTask(pairs, self.scores, name=self.name)


@dataclass(frozen=True)
class MTEBRetrieval:
    """A retrieval task in BEIR form: corpus, queries and relevance judgments."""

    name: str
    doc_ids: list[str]
    doc_texts: list[str]
    query_ids: list[str]
    query_texts: list[str]
    qrels: dict[str, dict[str, float]]

    def subset(self, n_docs: int | None) -> MTEBRetrieval:
        """The corpus cut to ``n_docs`` documents (``None`` or more than there are: all).

        Every document judged relevant to a query is kept; the rest are filled with the
        documents of smallest ``sha256("privembed-subset:" + doc id)``, in corpus order -- a
        deterministic sample of distractors that does not depend on any system's results.
        A smaller corpus makes every ranking metric easier: say which size was used.
        """
        if n_docs is None or n_docs >= len(self.doc_ids):
            return self
        if n_docs < 1:
            raise ValueError(f"n_docs must be >= 1, got n_docs={n_docs}.")
        index = {d: i for i, d in enumerate(self.doc_ids)}
        relevant = {index[d] for r in self.qrels.values() for d in r if d in index}
        rest = sorted(
            (i for i in range(len(self.doc_ids)) if i not in relevant),
            key=lambda i: hashlib.sha256(b"privembed-subset:" + self.doc_ids[i].encode()).digest(),
        )
        order = sorted(relevant | set(rest[: max(n_docs - len(relevant), 0)]))
        return MTEBRetrieval(
            name=f"{self.name}-{len(order)}docs",
            doc_ids=[self.doc_ids[i] for i in order],
            doc_texts=[self.doc_texts[i] for i in order],
            query_ids=list(self.query_ids),
            query_texts=list(self.query_texts),
            qrels=self.qrels,
        )


def _open_text(p: Path) -> io.TextIOBase:
    if p.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(p, "rb"), encoding="utf-8")
    return p.open(encoding="utf-8")


def _rows(p: Path) -> Iterator[dict[str, Any]]:
    name = p.name.lower()
    if name.endswith(".parquet"):
        pq = require("pyarrow.parquet", "io", purpose="MTEB parquet files")
        yield from pq.read_table(p).to_pylist()
    elif name.endswith((".jsonl", ".jsonl.gz", ".json", ".json.gz")):
        with _open_text(p) as fh:
            for i, line in enumerate(fh):
                if line.strip():
                    try:
                        yield json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise DataError(f"{p}: line {i + 1} is not JSON: {exc}") from None
    elif name.endswith((".tsv", ".tsv.gz")):
        with _open_text(p) as fh:
            header = fh.readline().rstrip("\n").split("\t")
            for line in fh:
                if line.strip():
                    yield dict(zip(header, line.rstrip("\n").split("\t"), strict=False))
    else:
        raise DataError(f"unsupported file type: {p}")


def _find(root: Path, patterns: Sequence[str]) -> list[Path]:
    for pat in patterns:
        hits = sorted(p for p in root.glob(pat) if p.is_file())
        if hits:
            return hits
    return []


def _resolve(source: str | Path, revision: str | None, patterns: Sequence[str]) -> Path:
    p = Path(source)
    if p.is_dir():
        return p
    if p.exists():
        raise DataError(f"{p} is a file; give the task's folder (MTEB hub layout).")
    if "/" not in str(source):
        raise FileNotFoundError(
            f"{source!r} is neither a local folder nor a hub dataset name like 'mteb/sts12-sts'."
        )
    hub = require("huggingface_hub", "embed", purpose="downloading MTEB tasks")
    try:
        local = hub.snapshot_download(
            repo_id=str(source),
            repo_type="dataset",
            revision=revision,
            allow_patterns=[*patterns, "*.md"],
        )
    except Exception as exc:  # offline, unknown repo, auth
        raise OSError(
            f"cannot download {source!r} from the hub ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}); download it elsewhere and pass "
            "the folder."
        ) from None
    return Path(local)


_STS_PATTERNS = (
    "{split}.jsonl.gz",
    "{split}.jsonl",
    "data/{split}-*.parquet",
    "{split}-*.parquet",
    "{split}/*.parquet",
    "default/{split}/*.parquet",
)


def load_mteb_sts(
    source: str | Path, *, split: str = "test", revision: str | None = None
) -> MTEBSTS:
    """An MTEB STS task (e.g. ``"mteb/sts12-sts"``) from a folder or the hub.

    The folder holds ``{split}.jsonl(.gz)`` (MTEB's layout) or ``data/{split}-*.parquet``
    with ``sentence1``, ``sentence2`` and ``score`` per row.

    Parameters
    ----------
    source : folder or hub dataset name
    split : str, default "test"
    revision : str, optional
        Hub revision (a commit pins the data).
    """
    pats = [p.format(split=split) for p in _STS_PATTERNS]
    root = _resolve(source, revision, pats)
    files = _find(root, pats)
    if not files:
        raise FileNotFoundError(f"no {split!r} split in {root} (looked for {', '.join(pats)}).")
    s1, s2, sc = [], [], []
    for f in files:
        for r in _rows(f):
            try:
                s1.append(str(r["sentence1"]))
                s2.append(str(r["sentence2"]))
                sc.append(float(r["score"]))
            except KeyError as exc:
                raise DataError(
                    f"{f}: rows need sentence1, sentence2 and score; missing {exc}."
                ) from None
    if not sc:
        raise DataError(f"{root}: the {split!r} split is empty.")
    return MTEBSTS(Path(str(source)).name, s1, s2, np.array(sc, dtype=np.float64))


def load_mteb_retrieval(
    source: str | Path, *, split: str = "test", revision: str | None = None
) -> MTEBRetrieval:
    """An MTEB/BEIR retrieval task (e.g. ``"mteb/fiqa"``) from a folder or the hub.

    Layout (either form): ``corpus.jsonl`` (``_id``, ``title``, ``text``), ``queries.jsonl``
    (``_id``, ``text``) and ``qrels/{split}.jsonl`` or ``qrels/{split}.tsv`` (``query-id``,
    ``corpus-id``, ``score``); or the parquet form ``corpus/*.parquet``, ``queries/*.parquet``,
    ``qrels/{split}-*.parquet`` (or ``data/{split}-*.parquet``). A document's text is
    ``title + " " + text`` when it has a title (as MTEB does). Only queries with judgments in
    the split are kept.
    """
    corpus_p = ("corpus.jsonl.gz", "corpus.jsonl", "corpus/*.parquet", "corpus-*.parquet")
    queries_p = ("queries.jsonl.gz", "queries.jsonl", "queries/*.parquet", "queries-*.parquet")
    qrels_p = tuple(
        p.format(split=split)
        for p in (
            "qrels/{split}.jsonl",
            "qrels/{split}.tsv",
            "qrels/{split}-*.parquet",
            "qrels/{split}/*.parquet",
            "data/{split}-*.parquet",
        )
    )
    root = _resolve(source, revision, corpus_p + queries_p + qrels_p)
    found = {}
    for what, pats in (("corpus", corpus_p), ("queries", queries_p), ("qrels", qrels_p)):
        files = _find(root, pats)
        if not files:
            raise FileNotFoundError(f"no {what} file in {root} (looked for {', '.join(pats)}).")
        found[what] = files
    doc_ids, doc_texts = [], []
    for f in found["corpus"]:
        for r in _rows(f):
            title = str(r.get("title") or "").strip()
            text = str(r.get("text") or "").strip()
            doc_ids.append(str(r["_id"]))
            doc_texts.append(f"{title} {text}".strip() if title else text)
    qrels: dict[str, dict[str, float]] = {}
    for f in found["qrels"]:
        for r in _rows(f):
            qrels.setdefault(str(r["query-id"]), {})[str(r["corpus-id"])] = float(r["score"])
    q_ids, q_texts = [], []
    for f in found["queries"]:
        for r in _rows(f):
            qid = str(r["_id"])
            if qid in qrels:
                q_ids.append(qid)
                q_texts.append(str(r["text"]))
    if not q_ids:
        raise DataError(f"{root}: no query of the {split!r} split has judgments.")
    return MTEBRetrieval(Path(str(source)).name, doc_ids, doc_texts, q_ids, q_texts, qrels)
