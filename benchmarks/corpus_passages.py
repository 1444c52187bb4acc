"""Real passages with known relevant answers, from Debian packages (issue 38.4).

Writes ``passages.jsonl`` (``{"id", "text", "source"}``) and ``queries.jsonl``
(``{"qid", "text", "relevant", "source"}``: the id of the one passage that the query is known
to belong to) into an output folder, and ``manifest.json`` with the counts and the packages'
versions. Deterministic: the files are read in sorted order, every rule below is a fixed
function of the text, and no randomness is used.

Sources (install with ``apt-get install -y dict-gcide wordnet-base manpages``; every man page
installed under ``/usr/share/man/man[1-8]`` is read, whichever package put it there):

``gcide``
    The GNU Collaborative International Dictionary of English (dict-gcide,
    ``/usr/share/dictd/gcide.dict.dz``; an entry is a line at column 0 naming a headword and
    its ``\\pronunciation\\``, which skips the file's header and licence). A passage is one sense: a numbered sense's text, or an
    unnumbered entry's text with its headword, pronunciation, part of speech and etymology
    removed, or a usage note. Its quoted usages (the indented citations, ``--Milton.``) are
    the queries, relevant to the sense they illustrate.
``wordnet``
    WordNet 3.0's glosses (wordnet-base, ``/usr/share/wordnet/data.*``): a passage is a
    synset's definition (the gloss before its first quoted example), prefixed with its first
    lemma; the quoted examples are the queries. These are the 117,659 definitions of the
    project's held-out corpus: nothing is fitted on them (``bench_law.py`` fits its law on the
    other sources and only measures on this one).
``man``
    Manual pages (manpages and every other package's English pages): the roff source with its
    macros and escapes removed, one passage per paragraph, long paragraphs cut at sentence ends
    into pieces of at most 400 characters. The NAME line's description (``ls - list directory
    contents``) is the query, relevant to the page's first DESCRIPTION paragraph.

Rules: whitespace is collapsed; a passage under 25 characters or 4 words is dropped; exact
duplicates (case-folded, whitespace-collapsed) are dropped, the first in source order
(gcide, wordnet, man) kept; a query whose relevant passage was dropped is dropped; a query that
equals a passage's text is dropped.

Embedding (once, cached outside the repository): ``--chunks`` also writes
``chunks/q.jsonl`` (the evaluation and profile queries: from each source, every k-th query in
file order, up to 3,000) and the passages in files of at most ``--chunk-size`` lines, each
embedded on its own so that a crash loses one chunk, e.g. with two low-priority workers::

    nice -n 10 privembed embed chunks/<c>.jsonl -o vec/<c>.npy --backend onnx-int8

``bench_law.py`` loads every chunk that has its ``vec/<c>.npy`` and orders rows by passage id,
so how the passages were cut into chunks does not change the corpus, only which rows are
there while embedding is still under way.

Usage::

    python benchmarks/corpus_passages.py --out /work/data/passages --chunks
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

GCIDE = Path("/usr/share/dictd/gcide.dict.dz")
WORDNET = Path("/usr/share/wordnet")
MAN = Path("/usr/share/man")
MAX_CHARS = 400
MIN_CHARS = 25
MIN_WORDS = 4

_SPACE = re.compile(r"\s+")
_MARKER = re.compile(
    r"^\s*\[(1913 Webster|WordNet 1\.5|PJC|Webster 1913 Suppl\.|[A-Za-z0-9 .]+)\]\s*$"
)
_SENSE = re.compile(r"^   (?:\d+\.|\([a-z]\))\s")
_AUTHOR = re.compile(r"\s*--\s*[A-Z][^.]*(?:\.[^.]*){0,3}\.?\s*$")
_BRACES = re.compile(r"[{}]")


def _clean(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


def _keep(text: str) -> bool:
    return len(text) >= MIN_CHARS and len(text.split()) >= MIN_WORDS


def _strip_brackets(text: str) -> str:
    """Remove bracketed groups (nested), e.g. an etymology or ``[Obs.]``."""
    out, depth = [], 0
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]" and depth:
            depth -= 1
        elif not depth:
            out.append(ch)
    return "".join(out)


def _gcide_definition(lines: list[str]) -> str:
    text = _clean(" ".join(lines))
    text = _strip_brackets(text)
    text = _AUTHOR.sub("", text)
    return _clean(_BRACES.sub("", text))


def _gcide_head(lines: list[str]) -> str:
    """An unnumbered entry's first block, less headword, pronunciation, part of speech."""
    text = _clean(" ".join(lines))
    # headword \pron\, pos. [etym.] definition
    m = re.match(r"^[^\\]*\\[^\\]*\\\s*,?\s*", text)
    if m:
        text = text[m.end() :]
    text = _strip_brackets(text)
    # a pronunciation in parentheses, e.g. ``(hb"t*d),``
    text = re.sub(r'^\([^)]*["*`][^)]*\)\s*,?\s*', "", text)
    # part of speech: short comma/period-separated abbreviations before the definition
    text = re.sub(r"^(?:(?:[a-z]{1,5}\.\s*)+(?:&\s*)?,?\s*)+", "", text)
    text = _AUTHOR.sub("", text)
    return _clean(_BRACES.sub("", text))


def gcide() -> Iterator[tuple[str, list[str]]]:
    """(passage, its quotations) per sense of GCIDE, in file order."""
    with gzip.open(GCIDE, "rt", encoding="utf-8", errors="replace") as f:
        entry: list[str] = []
        for line in f:
            line = line.rstrip("\n")
            if line and not line[0].isspace() and entry:
                yield from _gcide_entry(entry)
                entry = []
            entry.append(line)
        if entry:
            yield from _gcide_entry(entry)


def _gcide_entry(lines: list[str]) -> Iterator[tuple[str, list[str]]]:
    # blocks separated by a blank line or a source marker
    blocks: list[list[str]] = [[]]
    for line in lines:
        if not line.strip() or _MARKER.match(line):
            if blocks[-1]:
                blocks.append([])
            continue
        blocks[-1].append(line)
    blocks = [b for b in blocks if b]
    if not blocks or "\\" not in lines[0]:  # the database header and licence, not an entry
        return
    current: str | None = None
    quotes: list[str] = []
    for i, block in enumerate(blocks):
        indent = len(block[0]) - len(block[0].lstrip())
        if indent >= 8:  # a quotation of the current sense
            q = _gcide_definition(block)
            if current is not None and _keep(q):
                quotes.append(q)
            continue
        if current is not None:
            yield current, quotes
        current, quotes = None, []
        if i == 0:
            text = _gcide_head(block)
        elif _SENSE.match(block[0]) or block[0].lstrip().startswith("Note:"):
            text = _gcide_definition(block)
            text = re.sub(r"^(?:\d+\.|\([a-z]\))\s*", "", text)
            text = re.sub(r"^Note:\s*", "", text)
        else:
            continue  # synonym lists, derived-form lines, other apparatus
        if text.startswith(("Syn.", "Syn:")):
            continue
        current = text
    if current is not None:
        yield current, quotes


_WN_FILES = ("data.noun", "data.verb", "data.adj", "data.adv")


def wordnet() -> Iterator[tuple[str, list[str]]]:
    """(lemma: definition, its quoted examples) per WordNet synset."""
    for name in _WN_FILES:
        with open(WORDNET / name, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("  "):
                    continue  # the licence header
                head, _, gloss = line.partition(" | ")
                fields = head.split()
                lemma = fields[4].replace("_", " ")
                examples = re.findall(r'"([^"]+)"', gloss)
                definition = gloss.split('; "')[0].split(' "')[0]
                definition = _clean(definition).rstrip(";")
                yield _clean(f"{lemma}: {definition}"), [_clean(e) for e in examples]


_ROFF_ESC = re.compile(
    r"\\(?:f\([A-Z]{2}|f\[[^\]]*\]|f.|f\[[^\]]*\]|s[+-]?\d+|\(..|\[[^\]]*\]|[&|^%:/,~ 0-]|\*.|e|-|.)"
)


#: roff requests that end a paragraph, and those whose argument is running text
_BREAKS = frozenset("PP P LP TP IP sp br HP RS RE Pp It Bl El".split())
_INLINE = frozenset("B I BR IR RB RI BI IB SM SB Nm Nd Ar Fl".split())


def _roff_text(line: str) -> str:
    line = line.replace("\\-", "-").replace("\\e", "\\")
    return _ROFF_ESC.sub(
        lambda m: {"\\(em": "--", "\\(en": "-", "\\ ": " "}.get(m.group(0), ""), line
    )


def _man_paragraphs(src: str) -> tuple[str, list[str]]:
    """(the NAME description, the DESCRIPTION paragraphs then the rest) of a page's roff."""
    name = ""
    section = ""
    desc: list[str] = []
    rest: list[str] = []
    para: list[str] = []

    def flush() -> None:
        if para:
            text = _clean(" ".join(para))
            (desc if section == "DESCRIPTION" else rest).append(text)
            para.clear()

    name_lines: list[str] = []
    for raw in src.splitlines():
        if raw.startswith(('.\\"', "'\\\"", '\\"')):
            continue
        if raw.startswith((".", "'")):
            macro = raw[1:].split(None, 1)
            tag = macro[0] if macro else ""
            arg = macro[1] if len(macro) > 1 else ""
            if tag in ("SH", "Sh"):
                flush()
                section = _clean(_roff_text(arg).strip('"')).upper()
                continue
            if tag in _BREAKS:
                flush()
                continue
            if tag in _INLINE:
                text = _roff_text(arg).replace('"', "")
            else:
                continue  # other requests: fonts, tables, definitions
        else:
            text = _roff_text(raw)
        if section == "NAME":
            name_lines.append(text)
        else:
            para.append(text)
    flush()
    name = _clean(" ".join(name_lines))
    if " - " in name:
        name = name.split(" - ", 1)[1]
    return name, desc + rest


def _chunks(text: str) -> Iterator[str]:
    if len(text) <= MAX_CHARS:
        yield text
        return
    piece = ""
    for sentence in re.split(r"(?<=[.!?])\s+", text):
        if piece and len(piece) + 1 + len(sentence) > MAX_CHARS:
            yield piece
            piece = ""
        piece = f"{piece} {sentence}".strip() if piece else sentence
        while len(piece) > MAX_CHARS:
            cut = piece.rfind(" ", 0, MAX_CHARS)
            cut = cut if cut > MAX_CHARS // 2 else MAX_CHARS
            yield piece[:cut]
            piece = piece[cut:].strip()
    if piece:
        yield piece


def man() -> Iterator[tuple[str, list[str]]]:
    """(passage, [the page's NAME description] for its first DESCRIPTION piece, else [])."""
    pages = sorted(p for p in MAN.glob("man[1-8]/*") if p.is_file() or p.is_symlink())
    seen: set[Path] = set()
    for page in pages:
        real = page.resolve()
        if real in seen or not real.is_file():
            continue
        seen.add(real)
        opener = gzip.open if real.suffix == ".gz" else open
        with opener(real, "rt", encoding="utf-8", errors="replace") as f:
            src = f.read()
        if src.lstrip().startswith(".so "):
            continue  # an alias of another page
        name, paragraphs = _man_paragraphs(src)
        first = True
        for paragraph in paragraphs:
            for piece in _chunks(paragraph):
                yield piece, ([name] if first and name else [])
                first = False


def _versions(packages: list[str]) -> dict[str, str]:
    out = {}
    for p in packages:
        r = subprocess.run(
            ["dpkg-query", "-W", "-f=${Version}", p], capture_output=True, text=True, check=False
        )
        out[p] = r.stdout.strip() or "not installed"
    return out


def build(out: Path) -> dict[str, object]:
    """Write passages.jsonl, queries.jsonl and manifest.json into ``out``."""
    for path in (GCIDE, WORDNET / "data.noun", MAN / "man1"):
        if not path.exists():
            raise SystemExit(
                f"error: {path} is missing (apt-get install -y dict-gcide wordnet-base manpages)"
            )
    out.mkdir(parents=True, exist_ok=True)
    seen: dict[str, int] = {}
    counts: dict[str, dict[str, int]] = {}
    tmp_p, tmp_q = out / "passages.jsonl.tmp", out / "queries.jsonl.tmp"
    pid = qid = 0
    digest = hashlib.sha256()
    with open(tmp_p, "w", encoding="utf-8") as fp, open(tmp_q, "w", encoding="utf-8") as fq:
        for source, items in (("gcide", gcide()), ("wordnet", wordnet()), ("man", man())):
            c = counts.setdefault(
                source, {"read": 0, "short": 0, "duplicate": 0, "passages": 0, "queries": 0}
            )
            for text, queries in items:
                c["read"] += 1
                if not _keep(text):
                    c["short"] += 1
                    continue
                key = text.casefold()
                if key in seen:
                    c["duplicate"] += 1
                    continue
                seen[key] = pid
                line = json.dumps({"id": pid, "text": text, "source": source}, ensure_ascii=False)
                fp.write(line + "\n")
                digest.update(line.encode())
                for q in queries:
                    if q.casefold() in seen or not _keep(q):
                        continue
                    rec = {"qid": qid, "text": q, "relevant": pid, "source": source}
                    fq.write(json.dumps(rec, ensure_ascii=False) + "\n")
                    qid += 1
                    c["queries"] += 1
                pid += 1
                c["passages"] += 1
    tmp_p.replace(out / "passages.jsonl")
    tmp_q.replace(out / "queries.jsonl")
    manifest = {
        "passages": pid,
        "queries": qid,
        "by_source": counts,
        "sha256_passages": digest.hexdigest(),
        "packages": _versions(["dict-gcide", "wordnet-base", "manpages"]),
        "rules": {"min_chars": MIN_CHARS, "min_words": MIN_WORDS, "max_chars": MAX_CHARS},
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def write_chunks(out: Path, size: int, per_source: int = 3000) -> None:
    """``chunks/q.jsonl`` and ``chunks/c<NNN>.jsonl`` (``size`` passages each) for embedding."""
    folder = out / "chunks"
    folder.mkdir(exist_ok=True)
    queries = [json.loads(x) for x in (out / "queries.jsonl").open(encoding="utf-8")]
    with open(folder / "q.jsonl", "w", encoding="utf-8") as f:
        for source in ("gcide", "wordnet", "man"):
            sub = [q for q in queries if q["source"] == source]
            for q in sub[:: max(1, len(sub) // per_source)][:per_source]:
                rec = {"id": q["qid"], "text": q["text"], "relevant": q["relevant"],
                       "source": source}  # fmt: skip
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    with open(out / "passages.jsonl", encoding="utf-8") as f:
        for j in range(10**9):
            lines = [line for _, line in zip(range(size), f, strict=False)]
            if not lines:
                break
            (folder / f"c{j:03d}.jsonl").write_text("".join(lines), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--out", type=Path, required=True, help="output folder")
    ap.add_argument("--chunks", action="store_true", help="also write chunks/ for embedding")
    ap.add_argument("--chunk-size", type=int, default=10_000)
    args = ap.parse_args(argv)
    if args.chunk_size < 1:
        raise SystemExit(f"error: --chunk-size must be >= 1, got {args.chunk_size}")
    manifest = build(args.out)
    if args.chunks:
        write_chunks(args.out, args.chunk_size)
    print(json.dumps(manifest, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
