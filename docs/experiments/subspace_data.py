"""Data of the private-subspace experiments: the GCIDE dev task and three public corpora, embedded.

Everything is embedded once with all-MiniLM-L6-v2 through the ONNX int8 backend
(``Embedder(backend="onnx-int8")``, the fastest on a shared 2-core machine) and cached outside
the repository (default ``/tmp/privembed_subspace``), in chunks so an interrupted run resumes.

* **The private corpus and its queries**: the GCIDE retrieval task of
  ``privembed.evaluation.loaders.gcide_retrieval`` (usage quotes as queries for the definition
  they illustrate, headword masked in the definition), the 40,000-document subset of
  ``gcide_embed.subset`` (every document relevant to 1,000 dev and 2,000 test queries, filled
  with a fixed hash-ordered sample), dev queries to tune, test queries to report.
* **Public corpora for a basis** (never part of the private corpus):

  - ``gcide-rest``: 10,000 GCIDE definition units that are *not* in the 40,000-document
    corpus (a hash-ordered sample): text of the same kind from the same source, the best case
    of "in-domain public text";
  - ``wordnet``: 10,000 WordNet 3.0 glosses from Debian's ``dict-wn`` (another dictionary; note
    that GCIDE itself took some glosses from WordNet 1.5, so the two overlap in part);
  - ``foldoc``: 5,000 entries of FOLDOC, the Free On-line Dictionary of Computing
    (``dict-foldoc``): definitions, but of computing terms -- the out-of-domain public corpus.

Get the data without root::

    cd /tmp/subspace_data && apt-get download dict-gcide dict-wn dict-foldoc &&
        for f in *.deb; do dpkg-deb -x $f ext; done

Run: ``nice -n 10 python docs/experiments/subspace_data.py [--dictd DIR] [--cache DIR]``.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import re
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import gcide_embed  # noqa: E402
from gcide_embed import embed_cached, subset  # noqa: E402

from privembed.evaluation.loaders import gcide_retrieval  # noqa: E402

DEFAULT_DICTD = Path("/tmp/subspace_data/ext/usr/share/dictd")
DEFAULT_CACHE = Path("/tmp/privembed_subspace")
N_DOCS = 40_000
DEV_QUERIES = 1000
TEST_QUERIES = 2000
PUBLIC_SIZES = {"gcide-rest": 10_000, "wordnet": 10_000, "foldoc": 5_000}

_B64 = {
    c: i for i, c in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
}


def _b64(s: str) -> int:
    v = 0
    for c in s:
        v = v * 64 + _B64[c]
    return v


def dictd_articles(root: Path, stem: str) -> list[tuple[str, str]]:
    """(headword, article text) of a dictd database, each article once."""
    raw = gzip.open(root / f"{stem}.dict.dz", "rb").read()
    seen, out = set(), []
    for line in (root / f"{stem}.index").read_text(encoding="utf-8", errors="replace").splitlines():
        parts = line.split("\t")
        if len(parts) != 3 or parts[0].startswith("00-"):
            continue
        where = (_b64(parts[1]), _b64(parts[2]))
        if where in seen:
            continue
        seen.add(where)
        out.append((parts[0], raw[where[0] : where[0] + where[1]].decode("utf-8", "replace")))
    return out


def _hash_order(items: list[str], salt: bytes) -> list[int]:
    return sorted(
        range(len(items)), key=lambda i: hashlib.sha256(salt + items[i].encode()).digest()
    )


_WN_SENSE = re.compile(r"^\s+(?:(?:n|v|adj|adv)\s+)?\d+:\s*(.*)$")


def wordnet_glosses(root: Path, n: int) -> list[str]:
    """``n`` WordNet glosses (the definition before the first usage example), hash-sampled."""
    glosses: dict[str, None] = {}
    for _, art in dictd_articles(root, "wn"):
        cur: list[str] = []
        lines = art.split("\n")[1:]
        for ln in [*lines, "  1:"]:
            m = _WN_SENSE.match(ln)
            if m or not ln.strip():
                if cur:
                    text = " ".join(cur)
                    text = re.sub(r"\[syn:.*?\]|\[ant:.*?\]|\[also:.*?\]", " ", text, flags=re.S)
                    text = text.split('; "')[0].replace("{", "").replace("}", "")
                    text = " ".join(text.split())
                    if len(text.split()) >= 3:
                        glosses[text] = None
                cur = [m.group(1)] if m else []
            else:
                cur.append(ln.strip())
    items = list(glosses)
    return [items[i] for i in _hash_order(items, b"privembed-wordnet:")[:n]]


def foldoc_entries(root: Path, n: int) -> list[str]:
    """``n`` FOLDOC definitions (first paragraph of each entry, tags and braces removed)."""
    out: dict[str, None] = {}
    for _, art in dictd_articles(root, "foldoc"):
        paras = [p for p in re.split(r"\n\s*\n", art.strip()) if p.strip()]
        body = next((p for p in paras[1:] if not re.fullmatch(r"\s*\(\d{4}-\d\d-\d\d\)\s*", p)), "")
        text = re.sub(r"<[^>]*>", " ", body)
        text = text.replace("{", "").replace("}", "")
        text = " ".join(text.split())
        if len(text.split()) >= 5:
            out[" ".join(text.split()[:96])] = None
    items = list(out)
    return [items[i] for i in _hash_order(items, b"privembed-foldoc:")[:n]]


def make_embedder():
    from privembed.data.embedders import Embedder

    return Embedder(backend="onnx-int8")


gcide_embed.make_embedder = make_embedder  # int8 ONNX for every chunk embedded here


def load(dictd: Path = DEFAULT_DICTD, cache: Path = DEFAULT_CACHE, *, public: bool = True) -> dict:
    """The task (corpus, dev and test queries) and the public corpora, embedded (unit rows)."""
    emb = None
    dev = gcide_retrieval(dictd, split="dev", max_queries=DEV_QUERIES)
    test = gcide_retrieval(dictd, split="test", max_queries=TEST_QUERIES)
    corpus = subset([dev, test], N_DOCS)
    out: dict = {"doc_ids": corpus.doc_ids, "doc_texts": corpus.doc_texts}
    out["D"] = embed_cached(corpus.doc_texts, cache, "corpus", emb)
    for split, t in (("dev", dev), ("test", test)):
        out[split] = (t, embed_cached(t.query_texts, cache, f"queries-{split}", emb))
    if public:
        inside = set(corpus.doc_texts)
        rest = [t for t in dev.doc_texts if t not in inside]
        rest = [
            rest[i]
            for i in _hash_order(rest, b"privembed-gcide-rest:")[: PUBLIC_SIZES["gcide-rest"]]
        ]
        texts = {
            "gcide-rest": rest,
            "wordnet": wordnet_glosses(dictd, PUBLIC_SIZES["wordnet"]),
            "foldoc": foldoc_entries(dictd, PUBLIC_SIZES["foldoc"]),
        }
        out["public"] = {k: embed_cached(v, cache, f"public-{k}", emb) for k, v in texts.items()}
        out["public_texts"] = texts
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dictd", type=Path, default=DEFAULT_DICTD)
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    args = ap.parse_args()
    data = load(args.dictd, args.cache)
    print(f"corpus {data['D'].shape}, dev {data['dev'][1].shape}, test {data['test'][1].shape}")
    for k, v in data["public"].items():
        print(f"public {k}: {v.shape}; e.g. {data['public_texts'][k][0][:100]!r}")
    print("norms", float(np.linalg.norm(data["D"], axis=1).mean()))


if __name__ == "__main__":
    main()
