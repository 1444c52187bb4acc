"""The inversion attacker's public training corpus, built offline and embedded once.

Sources (all public, all on this machine or one ``apt-get download`` away):

* **GCIDE** (Debian ``dict-gcide``, Webster 1913 + WordNet 1.5): every definition unit (without
  its headword) and every quoted usage example, through
  :func:`privembed.evaluation.loaders.gcide_retrieval` (``split="all"``);
* **FOLDOC** (Debian ``dict-foldoc``): the sentences of every article body;
* **presidio-evaluator's PII templates** filled with seeded Faker values
  (:func:`privembed.evaluation.loaders.pii_sentences`): names, places, dates, numbers;
* **faker-healthcare-provider's term lists**: every disease, symptom and generic drug name,
  alone (a public vocabulary, as GCIDE's headwords are).

Long units are split at sentence ends; sentences of 3 to ``--max-words`` words are kept,
duplicates dropped, the order shuffled with a fixed seed. None of the held-out test texts of the
inversion experiment comes from these sources: the Lee corpus (news) and the synthetic clinical
notes (privembed's own templates) are other sources.

Everything lands in the user cache (``privembed.core.cache.cache_dir("inversion", "corpus")``):
``texts-<digest>.txt`` (one sentence a line) and the embeddings (all-MiniLM-L6-v2, unit rows,
float32) in chunks of 5,000, so an interrupted run resumes.

Run: ``nice -n 10 python docs/experiments/inversion_corpus.py [--limit N] [--pii 40000]``
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import re
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

_SENT_END = re.compile(r"(?<=[.;!?])\s+(?=[A-Z(\"'])")
_FOLDOC_META = re.compile(r"^\(\d{4}-\d{2}-\d{2}\)$")


def split_sentences(text: str, min_words: int, max_words: int) -> list[str]:
    """Sentences of ``text`` with ``min_words`` to ``max_words`` words."""
    out = []
    for s in _SENT_END.split(" ".join(text.split())):
        n = len(s.split())
        if min_words <= n <= max_words:
            out.append(s)
    return out


def gcide_sentences(path: str | None, min_words: int, max_words: int) -> list[str]:
    from privembed.evaluation.loaders import gcide_retrieval

    t0 = time.time()
    defs = gcide_retrieval(path, split="all", mask="query", min_words=1, max_words=10_000)
    quotes = gcide_retrieval(path, split="all", mask="document", min_words=1, max_words=10_000)
    out = []
    for d in defs.doc_texts:  # "<headword>: <definition>"
        body = d.split(": ", 1)[1] if ": " in d else d
        body = re.sub(r"\[[^\]]*\]", "", body)  # [Obs.], [R.] and left-over source tags
        out += split_sentences(body, min_words, max_words)
    for q in quotes.query_texts:
        out += split_sentences(q, min_words, max_words)
    print(f"gcide: {len(out)} sentences ({time.time() - t0:.0f} s)", flush=True)
    return out


def foldoc_sentences(path: Path, min_words: int, max_words: int) -> list[str]:
    raw = gzip.open(path, "rt", encoding="utf-8", errors="replace").read()
    out = []
    body: list[str] = []

    def flush() -> None:
        text = " ".join(body)
        text = re.sub(r"<[^>]*>", " ", text).replace("{", "").replace("}", "")
        text = re.sub(r"\(https?://[^)]*\)|\(ftp://[^)]*\)|https?://\S+", " ", text)
        if text.strip():
            out.extend(split_sentences(text, min_words, max_words))
        body.clear()

    for line in raw.splitlines():
        if not line.strip():
            flush()
        elif line.startswith("   "):
            s = line.strip()
            if not _FOLDOC_META.match(s):
                body.append(s)
        else:  # a headword line starts a new article
            flush()
    flush()
    print(f"foldoc: {len(out)} sentences", flush=True)
    return out


def pii_template_sentences(n: int, seed: int) -> list[str]:
    from privembed.evaluation.loaders import pii_sentences

    c = pii_sentences(n, seed=seed)
    print(f"pii templates ({c.source}): {len(c)} sentences", flush=True)
    return list(c.texts)


def healthcare_terms() -> list[str]:
    import faker
    import faker_healthcare as fh

    p = fh.HealthcareProvider(faker.Faker("en_US"))
    terms = [*p.diseases, *p.symptoms, *p.generic_drugs]
    print(f"healthcare terms: {len(terms)}", flush=True)
    return [str(t) for t in terms]


def build(args: argparse.Namespace) -> list[str]:
    texts = gcide_sentences(args.gcide, args.min_words, args.max_words)
    if args.foldoc.exists():
        texts += foldoc_sentences(args.foldoc, args.min_words, args.max_words)
    else:
        print(f"no FOLDOC at {args.foldoc}; skipped", flush=True)
    texts += pii_template_sentences(args.pii, args.seed)
    texts += healthcare_terms()
    uniq = list(dict.fromkeys(t.strip() for t in texts if t.strip()))
    order = np.random.default_rng(args.seed).permutation(len(uniq))
    uniq = [uniq[i] for i in order]
    return uniq[: args.limit] if args.limit else uniq


def corpus_paths(texts: list[str]) -> tuple[Path, str]:
    from privembed.core.cache import cache_dir

    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode("utf-8") + b"\0")
    return cache_dir("inversion", "corpus"), h.hexdigest()[:16]


def load(limit: int | None = None) -> tuple[list[str], np.ndarray]:
    """The newest built corpus and its embeddings (the first ``limit`` rows)."""
    from privembed.core.cache import cache_dir

    folder = cache_dir("inversion", "corpus")
    files = sorted(folder.glob("texts-*.txt"), key=lambda p: p.stat().st_mtime)
    if not files:
        raise FileNotFoundError(f"no corpus in {folder}: run docs/experiments/inversion_corpus.py")
    texts = files[-1].read_text(encoding="utf-8").split("\n")
    from gcide_embed import embed_cached

    X = embed_cached(texts, folder, "emb")
    if limit:
        texts, X = texts[:limit], X[:limit]
    return texts, X


def load_available(limit: int = 0) -> tuple[list[str], np.ndarray]:
    """The newest corpus, cut to the sentences whose embedding chunks exist (an embedding run
    may have been stopped: what it finished is usable), and to ``limit`` (0: no limit)."""
    from gcide_embed import CHUNK, _digest

    from privembed.core.cache import cache_dir

    folder = cache_dir("inversion", "corpus")
    files = sorted(folder.glob("texts-*.txt"), key=lambda p: p.stat().st_mtime)
    if not files:
        raise FileNotFoundError(f"no corpus in {folder}: run docs/experiments/inversion_corpus.py")
    texts = files[-1].read_text(encoding="utf-8").split("\n")
    emb = folder / f"emb-{_digest(texts)}"
    parts = []
    for c in range(-(-len(texts) // CHUNK)):
        f = emb / f"chunk_{c:04d}.npy"
        if not f.exists():
            break
        parts.append(np.load(f))
    if not parts:
        raise FileNotFoundError(f"no embedded chunk in {emb}: run inversion_corpus.py")
    X = np.concatenate(parts).astype(np.float64)
    texts = texts[: X.shape[0]]
    if limit:
        texts, X = texts[:limit], X[:limit]
    return texts, X


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--gcide", default=None, help="GCIDE folder (default: PRIVEMBED_GCIDE)")
    ap.add_argument(
        "--foldoc", type=Path, default=Path("/usr/share/dictd/foldoc.dict.dz"), help="FOLDOC data"
    )
    ap.add_argument("--pii", type=int, default=40_000, help="filled PII template sentences")
    ap.add_argument("--min-words", type=int, default=3)
    ap.add_argument("--max-words", type=int, default=32)
    ap.add_argument("--limit", type=int, default=0, help="keep the first N sentences (0: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-embed", action="store_true")
    args = ap.parse_args()
    texts = build(args)
    folder, digest = corpus_paths(texts)
    path = folder / f"texts-{digest}.txt"
    path.write_text("\n".join(texts), encoding="utf-8")
    print(f"{len(texts)} sentences -> {path}", flush=True)
    if not args.no_embed:
        from gcide_embed import embed_cached

        t0 = time.time()
        X = embed_cached(texts, folder, "emb")
        print(f"embedded {X.shape} in {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
