"""Which side of the GCIDE task to mask: measured on dev queries only (the task design choice).

400 dev quotes (one per definition unit, sampled with seed 0) against a 6,400-document corpus
(their relevant units plus 6,000 random units), all-MiniLM-L6-v2 (ONNX backend when present):
NDCG@10 of exact cosine search for

* V1 ``mask="query"``: the quote with the headword's forms masked, documents "<headword>: <def>";
* V2 ``mask="document"`` (the loader's default): the quote as is, the definition with the
  headword's forms masked and no headword;
* V3 both masked; V4 nothing masked (the headword then matches itself).

Run: ``PRIVEMBED_GCIDE=... nice -n 10 python docs/experiments/gcide_variants.py``
"""

from __future__ import annotations

import numpy as np
from gcide_embed import make_embedder

from privembed.evaluation import loaders as L


def main() -> None:
    index, data = L._gcide_files(None)
    rows = []  # (headword, unit headword, definition, exact forms, stems, quotes)
    for index_head, article in L._gcide_articles(index, data):
        first = article.lstrip("\n").split("\n", 1)[0]
        head = first.split(" \\", 1)[0] if " \\" in first else index_head
        head = " ".join(L._gcide_clean(head).split()) or index_head
        _, header = L._header_end(article.split("\n"))
        for u in L._gcide_units(article, head):
            definition = L._gcide_clean(" ".join(ln.strip() for ln in u.lines))
            if definition:
                exact, stems = L._mask_forms(u.headword, header)
                rows.append((head, u.headword, definition, exact, stems, u.quotes))
    rng = np.random.default_rng(0)
    ok = [
        i
        for i, r in enumerate(rows)
        if L.gcide_split(r[0]) == "dev" and any(4 <= len(q.split()) <= 64 for q in r[5])
    ]
    pick = rng.choice(ok, 400, replace=False)
    docs = sorted(set(pick) | set(rng.choice(len(rows), 6000, replace=False)))
    where = {d: i for i, d in enumerate(docs)}
    quotes = [next(q for q in rows[i][5] if 4 <= len(q.split()) <= 64) for i in pick]
    rel = np.array([where[i] for i in pick])
    e = make_embedder()

    def masked(text, i):
        return L._mask(text, rows[i][3], rows[i][4])[0]

    q_plain = e.encode(quotes)
    q_masked = e.encode([masked(q, i) for q, i in zip(quotes, pick, strict=True)])
    d_head = e.encode([f"{rows[d][1]}: {rows[d][2]}" for d in docs])
    d_masked = e.encode([masked(rows[d][2], d) for d in docs])

    def ndcg(Q, D):
        C = Q @ D.T
        r = (C > C[np.arange(len(rel)), rel][:, None]).sum(axis=1)
        return float(np.mean(np.where(r < 10, 1 / np.log2(r + 2), 0.0)))

    print(f"corpus {len(docs)} documents, {len(pick)} dev queries")
    print(
        f"V1 mask='query'    (masked quote, '<headword>: <def>') NDCG@10 {ndcg(q_masked, d_head):.3f}"
    )
    print(
        f"V2 mask='document' (quote, masked definition)          NDCG@10 {ndcg(q_plain, d_masked):.3f}"
    )
    print(
        f"V3 both masked                                         NDCG@10 {ndcg(q_masked, d_masked):.3f}"
    )
    print(
        f"V4 nothing masked                                      NDCG@10 {ndcg(q_plain, d_head):.3f}"
    )


if __name__ == "__main__":
    main()
