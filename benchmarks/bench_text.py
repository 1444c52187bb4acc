"""Speed of word-level sanitisation: a 10,000-word document against GloVe 6B 50d (400,000 words).

Run: python benchmarks/bench_text.py [--words 10000] [--threads 2] [--epsilon 10]

Prints one markdown table (words/s for exact and HNSW search, the rank fix and the SanText
exponential mechanism) with the machine and library versions. The document is made of seeded
synthetic clinical notes (names, ages, places, diseases, drugs, punctuation); "words/s" counts
every word token of the document, and sanitisation is batched: one noise draw and one index
search for the whole document.
"""

from __future__ import annotations

import argparse
import os
import platform
import time


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def document(n_words: int) -> list[str]:
    """Lines of synthetic clinical notes holding at least ``n_words`` word tokens."""
    from privembed.datasets import synthetic_clinical_notes
    from privembed.text import tokenize

    lines: list[str] = []
    count, batch = 0, 0
    while count < n_words:
        for note in synthetic_clinical_notes(200, seed=batch):
            lines.append(note.text)
            count += sum(t.is_word for t in tokenize(note.text))
            if count >= n_words:
                break
        batch += 1
    return lines


def best_of(fn, repeat: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--words", type=int, default=10_000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--epsilon", type=float, default=10.0)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--hnsw-m", type=int, default=32)
    ap.add_argument("--ef-search", type=int, default=64)
    ap.add_argument("--limit", type=int, default=None, help="vocabulary size (default: all)")
    args = ap.parse_args()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(args.threads))

    import faiss
    import numpy as np

    from privembed.text import (
        ExponentialSanitizer,
        NearestNeighbourIndex,
        Vocabulary,
        WordSanitizer,
        tokenize,
    )

    faiss.omp_set_num_threads(args.threads)
    lines = document(args.words)
    tokens = [t.text for line in lines for t in tokenize(line) if t.is_word]
    voc = Vocabulary.glove(limit=args.limit)
    in_vocab = int((voc.lookup(tokens) >= 0).sum())
    n = len(tokens)

    rows = []
    t_exact, exact = best_of(lambda: NearestNeighbourIndex(voc.vectors), 1)
    t_hnsw, hnsw = best_of(
        lambda: NearestNeighbourIndex(
            voc.vectors, method="hnsw", hnsw_m=args.hnsw_m, ef_search=args.ef_search
        ),
        1,
    )
    outputs = {}
    for label, index, post, c in (
        ("Laplace + nearest, exact (FAISS flat)", exact, "nearest", None),
        (
            f"Laplace + nearest, HNSW (M={args.hnsw_m}, efSearch={args.ef_search})",
            hnsw,
            "nearest",
            None,
        ),
        ("Laplace + rank fix (c=0.04), exact", exact, "rank", 0.04),
    ):
        san = WordSanitizer(vocabulary=voc, epsilon=args.epsilon, post=post, c=c, index=index)
        t, out = best_of(lambda san=san: san.sanitize_many(lines, rng=1), args.repeat)
        outputs[label] = out
        rows.append((label, t))
    exp = ExponentialSanitizer(vocabulary=voc, epsilon=args.epsilon / 4)
    t, _ = best_of(lambda: exp.sanitize_many(lines, rng=1), 1)
    rows.append((f"SanText exponential (epsilon={args.epsilon / 4:g})", t))

    a, b = (outputs[k] for k in list(outputs)[:2])
    wa = [t.text for line in a for t in tokenize(line) if t.is_word]
    wb = [t.text for line in b for t in tokenize(line) if t.is_word]
    agree = float(np.mean([x == y for x, y in zip(wa, wb, strict=True)]))

    print(
        f"\n{n} word tokens ({in_vocab} in vocabulary) in {len(lines)} lines, "
        f"vocabulary {len(voc)} x {voc.dim}, epsilon={args.epsilon:g}\n"
    )
    print("| method | seconds | words/s |")
    print("|---|---:|---:|")
    for label, t in rows:
        print(f"| {label} | {t:.2f} | {n / t:,.0f} |")
    print(
        f"\nindex build: exact {t_exact:.2f} s, HNSW {t_hnsw:.1f} s; HNSW output equals the exact "
        f"output for {agree:.1%} of the words (same noise).\n"
        f"machine: {cpu_model()}, {os.cpu_count()} cores visible, {args.threads} thread(s), "
        f"load average {os.getloadavg()[0]:.1f} at the end; "
        f"Python {platform.python_version()}, numpy {np.__version__}, faiss {faiss.__version__}"
    )


if __name__ == "__main__":
    main()
