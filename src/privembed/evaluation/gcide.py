"""GCIDE: a held-out retrieval task built from the GNU Collaborative International Dictionary of
English (Debian's ``dict-gcide``).

Queries are quoted usage examples with the headword masked; the relevant document is the
definition they illustrate. Headwords are split into train, dev and test by a salted hash
(:func:`gcide_split`), so a split never depends on any system's results. Loaded through
:mod:`privembed.evaluation.loaders` (:func:`gcide_retrieval`).
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..core._validation import DataError, check_choice, check_int
from .mteb import MTEBRetrieval

__all__ = ["GCIDE_ENV", "gcide_retrieval", "gcide_split"]


#: environment variable naming the folder that holds ``gcide.index`` and ``gcide.dict(.dz)``
GCIDE_ENV = "PRIVEMBED_GCIDE"
_GCIDE_DEFAULT = Path("/usr/share/dictd")
_GCIDE_HOWTO = (
    "get it with `apt-get install dict-gcide`, or without root: `cd /tmp && apt-get download "
    "dict-gcide && dpkg-deb -x dict-gcide_*.deb gcide` and pass "
    f"path='/tmp/gcide/usr/share/dictd' (or set {GCIDE_ENV})"
)
#: split rule version: part of the hashed string, so a change of rule changes every split
_GCIDE_SPLIT_SALT = b"privembed-gcide-split-v1:"
#: (upper bound of the hash fraction, split name): 60% train, 20% dev, 20% test
_GCIDE_SPLITS = ((0.6, "train"), (0.8, "dev"), (1.0, "test"))
_GCIDE_MASK = "___"
_B64 = {
    c: i for i, c in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
}

# source tags at the end of a paragraph: [1913 Webster], [WordNet 1.5 +PJC], [PJC], ...
_SOURCE_TAG = re.compile(r"\[(?:[^\]\n]*(?:Webster|WordNet|Century)[^\]\n]*|PJC\.?|RDH|AS)\]")
# GCIDE's ASCII accent codes inside words: [a^], [=e], ['e], [aum], [imac], [asl], ...
_ACCENT = re.compile(
    r"\[(?:[=\-~^`'\".,*]([A-Za-z]{1,2})|([A-Za-z]{1,2})(?:\^|um|dd|sl|mac))\]|\[(ae|oe|AE|OE)\]"
)
_ACCENT_WORDS = {"[eth]": "th", "[thorn]": "th", "[ng]": "ng", "[yogh]": "gh"}
_SENSE_START = re.compile(r"^ {3}(\d+)\.\s")
_PHRASE_START = re.compile(r"^ {3}\{([^}]+)\}")
# an attribution after a quote: "   --Milton." (spaces, two dashes, then a name or a reference)
_ATTRIBUTION = re.compile(r"\s--(?=[^\s-]).*$")
# an inflection listed in a header: "[imp. & p. p. {Accrued}; p. pr. & vb. n. {Accruing}.]",
# "n.; pl. {Mice}", "superl. {Ruddiest}"
_INFLECTION = re.compile(
    r"(?:\bpl|\bimp|\bp\. ?p|\bp\. ?pr|\bvb\. n|\bsuperl|\bcompar|\bpres)\.[^{}\[\]]{0,24}\{([^}]+)\}"
)
_WORD = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)?")


def _b64(text: str) -> int:
    v = 0
    for c in text:
        v = v * 64 + _B64[c]
    return v


def gcide_split(headword: str) -> str:
    """The split (``"train"``, ``"dev"`` or ``"test"``) of a GCIDE headword.

    The rule: ``h = sha256(b"privembed-gcide-split-v1:" + headword.lower().encode())``; the first
    8 bytes of ``h`` as a big-endian integer divided by 2**64 give ``u`` in [0, 1); ``u < 0.6``
    is train, ``u < 0.8`` dev, the rest test. Every sense and every quote of a headword (all its
    articles, parts of speech and sub-phrases) fall in the same split, so a test quote never
    shares its headword with a tuning quote.

    Examples
    --------
    >>> [gcide_split(w) for w in ("Lark", "lark", "Cave", "House")]
    ['train', 'train', 'dev', 'test']
    """
    h = hashlib.sha256(_GCIDE_SPLIT_SALT + headword.strip().lower().encode("utf-8")).digest()
    u = int.from_bytes(h[:8], "big") / 2.0**64
    return next(name for bound, name in _GCIDE_SPLITS if u < bound)


def _gcide_files(path: str | Path | None) -> tuple[Path, Path]:
    if path is None:
        env = os.environ.get(GCIDE_ENV)
        root = Path(env) if env else _GCIDE_DEFAULT
        origin = f"{GCIDE_ENV}={env}" if env else str(_GCIDE_DEFAULT)
    else:
        root, origin = Path(path), f"path={str(path)!r}"
    if root.is_file():  # the index itself, or the .dict(.dz)
        stem = root.name.split(".")[0]
        root = root.parent
    else:
        stem = "gcide"
    index = root / f"{stem}.index"
    data = next(
        (root / f"{stem}{s}" for s in (".dict.dz", ".dict") if (root / f"{stem}{s}").is_file()),
        None,
    )
    if not index.is_file() or data is None:
        raise FileNotFoundError(f"GCIDE dictionary data not found at {origin}; {_GCIDE_HOWTO}.")
    return index, data


def _gcide_clean(text: str) -> str:
    text = _SOURCE_TAG.sub(" ", text)
    for code, plain in _ACCENT_WORDS.items():
        text = text.replace(code, plain)
    text = _ACCENT.sub(lambda m: m.group(1) or m.group(2) or m.group(3), text)
    text = text.replace("{", "").replace("}", "")
    return " ".join(text.split())


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _header_end(lines: list[str]) -> tuple[int, str]:
    """Index of the first line after an article's header and the header's text.

    The header is the first line plus the lines that continue an open ``[...]`` bracket
    (inflections and etymology). A trailing field label such as ``(Zool.)`` stays in the header.
    """
    depth, i = 0, 0
    while i < len(lines):
        depth += lines[i].count("[") - lines[i].count("]")
        i += 1
        if depth <= 0:
            return i, "\n".join(lines[:i])
    return 1, lines[0]  # an unclosed bracket: keep only the first line as the header


def _mask_forms(headword: str, header: str) -> tuple[set[str], set[str]]:
    """Exact word forms and stems to mask in a quote of ``headword``.

    Exact forms: every word of the headword (function words of a several-word headword such as
    ``A cheval`` excepted) and the inflections the header lists in braces
    after ``pl.``, ``imp.``, ``p. p.``, ``p. pr.``, ``vb. n.``, ``superl.``, ``compar.``
    (``[imp. & p. p. {Accrued}; p. pr. & vb. n. {Accruing}]``, ``n.; pl. {Mice}``). Stems: every
    headword word of 4 letters or more, less a final ``e`` or ``y``; a word made of a stem (its
    last letter possibly doubled) and one of the endings in ``_SUFFIXES`` is masked too
    (``accumulat`` -> accumulates, accumulation; ``cav`` -> caves but not cavern).
    """
    words = [w.lower() for w in _WORD.findall(headword)]
    if len(words) > 1:  # "A cheval", "To fall upon": function words are not the headword
        from ..attacks.corpus import FUNCTION_WORDS

        words = [w for w in words if len(w) > 1 and w not in FUNCTION_WORDS] or words
    exact = set(words)
    for form in _INFLECTION.findall(header):
        exact.update(w.lower() for w in _WORD.findall(_gcide_clean(form)) if len(w) > 1)
    stems = {w[:-1] if w[-1] in "ey" else w for w in words if len(w) >= 4}
    return exact, stems


#: endings a word may add to a headword stem and still be a form of the headword
_SUFFIXES = frozenset(
    ("", "e", "s", "es", "ed", "d", "ing", "ings", "er", "ers", "est", "ly", "y", "ies", "ied",
     "ier", "iest", "ily", "ion", "ions", "ation", "ations", "ment", "ments", "ness")
)  # fmt: skip


def _is_form(word: str, stem: str) -> bool:
    if not word.startswith(stem):
        return False
    rest = word[len(stem) :]
    if rest[:1] == stem[-1]:  # a doubled final consonant: stop -> stopped
        return rest[1:] in _SUFFIXES or rest in _SUFFIXES
    return rest in _SUFFIXES


def _mask(text: str, exact: set[str], stems: set[str]) -> tuple[str, int]:
    count = 0

    def sub(m: re.Match[str]) -> str:
        nonlocal count
        w = m.group(0).lower()
        if w in exact or any(_is_form(w, s) for s in stems):
            count += 1
            return _GCIDE_MASK
        return m.group(0)

    return _WORD.sub(sub, text), count


@dataclass
class _Unit:
    headword: str
    lines: list[str]
    quotes: list[str]


def _gcide_units(article: str, headword: str) -> list[_Unit]:
    """Split one dictd article into definition units (senses, sub-phrases) with their quotes.

    * a unit starts after the header, at each numbered sense (``   2. ...``) and at each
      sub-phrase paragraph (``   {Lark bunting} (Zool.), ...``);
    * a paragraph (after a blank line) whose first line is indented 9 spaces or more is a block
      quote of the current unit; it runs until a line indented less than its first line;
    * ``Note:`` and ``Syn:`` paragraphs are left out (usage notes and synonym lists);
    * source tags, braces and accent codes are cleaned; the attribution (``--Milton.``) is cut
      from quotes.
    """
    lines = article.split("\n")
    start, _ = _header_end(lines)
    units = [_Unit(headword, [], [])]
    # the remainder of the header's last line after its brackets can hold the definition
    # (short articles: "Accrual \\Ac*cru"al\\, n.\n   Accrument. [R.]" keep their text below it)
    i, n = start, len(lines)
    after_blank = True
    skipping = False
    while i < n:
        line = lines[i]
        if not line.strip():
            after_blank, skipping = True, False
            i += 1
            continue
        ind = _indent(line)
        body = line.strip()
        new_sense = _SENSE_START.match(line)
        new_phrase = _PHRASE_START.match(line) if after_blank else None
        if skipping and not (new_sense or new_phrase):
            i += 1
            continue
        skipping = False
        if after_blank and ind >= 9:  # a block quote
            q_lines = []
            while i < n and lines[i].strip() and _indent(lines[i]) >= ind:
                q_lines.append(lines[i])
                i += 1
            text = " ".join(_ATTRIBUTION.sub("", ql.strip()) for ql in q_lines if _indent(ql) < 40)
            units[-1].quotes.append(_gcide_clean(text))
            after_blank = False
            continue
        after_blank = False
        if ind == 3 and body.startswith(("Note:", "Syn:")):
            skipping = True
        elif new_sense:
            units.append(_Unit(headword, [line[new_sense.end() :]], []))
        elif new_phrase:
            rest = line[new_phrase.end() :].lstrip(" ,.")
            units.append(_Unit(_gcide_clean(new_phrase.group(1)), [rest], []))
        else:
            tag = _SOURCE_TAG.match(body)
            if tag and len(body[tag.end() :].split()) <= 2:  # "[1913 Webster] egg beater"
                line = body[: tag.end()]
            units[-1].lines.append(line)
        i += 1
    return units


def _gcide_articles(index: Path, data: Path) -> Iterator[tuple[str, str]]:
    raw = gzip.open(data, "rb").read() if data.name.endswith(".dz") else data.read_bytes()
    seen: set[tuple[int, int]] = set()
    with index.open(encoding="utf-8", errors="replace") as fh:
        for ln, line in enumerate(fh):
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 3:
                raise DataError(f"{index}: line {ln + 1} is not 'headword<TAB>offset<TAB>length'.")
            head, off, size = parts
            if head.startswith("00-"):  # dictd's database info entries
                continue
            try:
                where = (_b64(off), _b64(size))
            except KeyError:
                raise DataError(f"{index}: line {ln + 1} has a bad base64 offset/length.") from None
            if where in seen:
                continue
            seen.add(where)
            if where[0] + where[1] > len(raw):
                raise DataError(f"{index}: line {ln + 1} points past the end of {data.name}.")
            yield head, raw[where[0] : where[0] + where[1]].decode("utf-8", errors="replace")


def _unit_mask_forms(unit: _Unit, head: str, header: str) -> tuple[set[str], set[str]]:
    """The word forms to mask in a unit: its own headword's, and the article's if different."""
    exact, stems = _mask_forms(unit.headword, header)
    if unit.headword != head:
        more = _mask_forms(head, header)
        exact, stems = exact | more[0], stems | more[1]
    return exact, stems


@dataclass
class _GcideCorpus:
    """The documents and queries of :func:`gcide_retrieval`, gathered article by article."""

    index: Path
    split: str
    mask: str
    min_words: int
    max_words: int
    doc_ids: list[str] = field(default_factory=list)
    doc_texts: list[str] = field(default_factory=list)
    #: document text -> its id (documents with identical text are one)
    by_text: dict[str, str] = field(default_factory=dict)
    #: query text -> (query id, relevant doc ids)
    queries: dict[str, tuple[str, set[str]]] = field(default_factory=dict)
    #: articles seen so far per headword (lower case)
    article_count: dict[str, int] = field(default_factory=dict)

    def read(self, articles: Iterable[tuple[str, str]]) -> None:
        """Add every (index headword, article text) pair."""
        for index_head, article in articles:
            self.add_article(index_head, article)

    def add_article(self, index_head: str, article: str) -> None:
        """Add an article's units as documents and, in the split, their quotes as queries."""
        # the article's own headword ("Say \\Say\\, v. t."): the index also lists phrases
        # and inflections ("It is said") that point into the same article
        first = article.lstrip("\n").split("\n", 1)[0]
        head = first.split(" \\", 1)[0] if " \\" in first else index_head
        head = " ".join(_gcide_clean(head).split()) or index_head
        a = self.article_count[head.lower()] = self.article_count.get(head.lower(), 0) + 1
        _, header = _header_end(article.split("\n"))
        in_split = self.split == "all" or gcide_split(head) == self.split
        for u, unit in enumerate(_gcide_units(article, head)):
            definition = _gcide_clean(" ".join(ln.strip() for ln in unit.lines))
            if not definition:
                continue
            exact, stems = _unit_mask_forms(unit, head, header)
            if self.mask == "document":
                text = _mask(definition, exact, stems)[0]
            else:
                text = f"{unit.headword}: {definition}"
            doc_id = self.document(text, f"{head}#{a}.{u}")
            if in_split:
                self.add_queries(unit.quotes, doc_id, exact, stems)

    def document(self, text: str, new_id: str) -> str:
        """The id of the document with this text; a new text is added as ``new_id``."""
        doc_id = self.by_text.get(text)
        if doc_id is None:
            doc_id = new_id
            self.by_text[text] = doc_id
            self.doc_ids.append(doc_id)
            self.doc_texts.append(text)
        return doc_id

    def add_queries(
        self, quotes: Sequence[str], doc_id: str, exact: set[str], stems: set[str]
    ) -> None:
        """Add a unit's quotes of allowed length as queries to which ``doc_id`` is relevant."""
        for k, quote in enumerate(quotes):
            query = _mask(quote, exact, stems)[0] if self.mask == "query" else quote
            words = len(_WORD.findall(query.replace(_GCIDE_MASK, "")))
            if not self.min_words <= words <= self.max_words:
                continue
            entry = self.queries.setdefault(query, (f"q:{doc_id}:{k}", set()))
            entry[1].add(doc_id)

    def task(self, max_queries: int | None) -> MTEBRetrieval:
        """The task: every document and the split's queries, at most ``max_queries``."""
        if not self.queries:
            raise DataError(
                f"{self.index}: the {self.split!r} split has no quote of {self.min_words} to "
                f"{self.max_words} words."
            )
        items = sorted(self.queries.items(), key=lambda kv: kv[1][0])
        if max_queries is not None and max_queries < len(items):
            items = sorted(items, key=lambda kv: hashlib.sha256(kv[1][0].encode()).digest())
            items = sorted(items[:max_queries], key=lambda kv: kv[1][0])
        return MTEBRetrieval(
            name=f"gcide-{self.split}",
            doc_ids=self.doc_ids,
            doc_texts=self.doc_texts,
            query_ids=[qid for _, (qid, _) in items],
            query_texts=[text for text, _ in items],
            qrels={qid: dict.fromkeys(sorted(rel), 1.0) for _, (qid, rel) in items},
        )


def gcide_retrieval(
    path: str | Path | None = None,
    *,
    split: str = "test",
    max_queries: int | None = None,
    min_words: int = 4,
    max_words: int = 64,
    mask: str = "document",
) -> MTEBRetrieval:
    """A held-out retrieval task from GCIDE: find the definition a usage quote illustrates.

    The data is Debian's ``dict-gcide`` (dictd format: ``gcide.index`` + ``gcide.dict.dz``;
    GNU GPL, from Webster's 1913 dictionary and WordNet 1.5).

    **Documents** are the definition units of every article: each numbered sense, the
    unnumbered definition of a one-sense article, and each sub-phrase paragraph
    (``{Lark bunting} (Zool.), a fringilline bird ...``). Block quotes, ``Note:`` and ``Syn:``
    paragraphs, the article header (headword, pronunciation, inflections, etymology) and the
    source tags (``[1913 Webster]``) are removed, GCIDE's accent codes are replaced by plain
    letters, and documents with identical text are merged (the first keeps its id). The corpus
    is the same for every split (as in BEIR).

    **Queries** are the indented block quotes (usage examples, e.g. ``And though power failed,
    her courage did accrue. --Spenser.``) with the attribution cut. A query's one relevant
    document (relevance 1) is the unit the quote stands under (other senses of the same word
    are hard negatives); quotes of fewer than ``min_words`` or more than ``max_words`` words
    (after masking) are left out (a few contributed entries quote whole essays) and identical
    quote texts are merged (all their units are relevant).

    **Masking** keeps the task from being string matching on the headword. The headword's word
    forms -- its words, the inflections the header lists, and a headword stem plus a common
    ending (see :func:`_mask_forms`) -- are replaced by ``___``:

    * ``mask="document"`` (default): in the document, which never names its headword; the
      query keeps the word, so the task is "what does this word mean in this sentence" and the
      model has to know the word's meaning (a definition that uses a form of its own headword,
      ``Something that accrues``, reads ``Something that ___``).
    * ``mask="query"``: in the query; the document is ``"<headword>: <definition>"``, so the
      model must guess the word from its context. On 400 dev queries against 6,384 documents
      with all-MiniLM-L6-v2 this variant reaches NDCG@10 0.049 against 0.106 for
      ``"document"`` (0.500 with no masking at all: the headword then matches itself;
      ``docs/experiments/gcide_variants.py``), too close to zero to measure what protection
      costs, hence the default.

    Irregular forms the header does not list (``went`` for ``go``) are not masked.

    **Splits** are by headword (:func:`gcide_split`: sha256 hash, 60/20/20). The rule for
    experiments: tune anything (k', epsilon grids, thresholds) on ``"dev"`` only and report on
    ``"test"``; ``"train"`` is for fitting (e.g. concept probes); ``"all"`` takes every query.

    Parameters
    ----------
    path : folder or file, optional
        Folder with ``gcide.index`` and ``gcide.dict.dz`` (or ``gcide.dict``), or the index file.
        Default: the ``PRIVEMBED_GCIDE`` environment variable, else ``/usr/share/dictd``.
    split : {"train", "dev", "test", "all"}, default "test"
    max_queries : int, optional
        Keep this many queries of the split: those with the smallest sha256 of their query id
        (a deterministic sample that does not depend on file order).
    min_words, max_words : int, default 4 and 64
    mask : {"document", "query"}, default "document"
        Where the headword's forms are masked (see above).

    Returns
    -------
    MTEBRetrieval
        ``name="gcide-<split>"``; doc ids ``"<headword>#<article>.<unit>"``, query ids
        ``"q:<doc id>:<quote>"``.

    Raises
    ------
    FileNotFoundError
        The data is not installed; the message says how to get it.
    privembed.DataError
        A malformed index, or a split without queries.

    Examples
    --------
    >>> import pathlib
    >>> here = pathlib.Path(__file__).resolve()
    >>> fixture = here.parents[3] / "tests" / "evaluation" / "data" / "gcide"
    >>> task = gcide_retrieval(fixture, split="all") if fixture.is_dir() else None
    >>> task is None or task.doc_texts[:3] == [
    ...     "To increase; to augment.",
    ...     "To come to by way of increase; to arise or spring as a growth or result; to be "
    ...     "added as increase, profit, or damage, especially as the produce of money lent.",
    ...     "Something that ___; advantage ___. [Obs.]"]
    True
    """
    split = check_choice("split", split, ("train", "dev", "test", "all"))
    mask = check_choice("mask", mask, ("document", "query"))
    min_words = check_int("min_words", min_words, ge=1)
    max_words = check_int("max_words", max_words, ge=min_words)
    if max_queries is not None:
        max_queries = check_int("max_queries", max_queries, ge=1)
    index, data = _gcide_files(path)
    corpus = _GcideCorpus(index, split, mask, min_words, max_words)
    corpus.read(_gcide_articles(index, data))
    return corpus.task(max_queries)
