r"""Evaluation data: the Lee corpus, word similarity, a PII sentence corpus and MTEB tasks.

Everything here loads offline from what ships with the environment, except the MTEB loaders,
which read a local folder in MTEB's hub layout or download one where a hub is reachable.

* :func:`lee_corpus` -- the 50 Lee news documents with human similarity judgments for all 1,225
  pairs (gensim's bundled test data; Lee, Pincombe & Welsh 2005), as an STS task.
  :func:`lee_background` -- the 300 background documents (or their sentences).
* :func:`word_similarity` -- WordSim353 / SimLex-999 (gensim's copies) for word vectors.
* :func:`pii_sentences` -- PII sentences from templates filled by Faker, with the ground truth
  (entity spans, types, sensitive tokens). Templates: presidio-evaluator's template file when
  that package is installed, otherwise privembed's own templates in the same ``{{slot}}``
  format (:data:`TEMPLATES`), or any file you pass.
* :func:`load_mteb_sts`, :func:`load_mteb_retrieval` -- MTEB / BEIR tasks (STS12, FiQA, ...,
  as used by [T26]) from a folder in the hub layout or by hub name.
* :func:`gcide_retrieval` -- a held-out retrieval task built from the GNU Collaborative
  International Dictionary of English (Debian's ``dict-gcide``): queries are quoted usage
  examples with the headword masked, the relevant document is the definition they illustrate.

References
----------
.. [T26] Tsai, Hsiao, Chen, Lin (2026). Concept-aware privacy mechanisms for defending embedding
   inversion attacks (SPARSE). App. D (STS), Table 6 (retrieval), Table 1 (PII leakage).
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import io
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core._optional import require
from ..core._validation import DataError, check_choice, check_int
from .utility import STSTask

__all__ = [
    "GCIDE_ENV",
    "MTEBSTS",
    "TEMPLATES",
    "LeeCorpus",
    "MTEBRetrieval",
    "PIISentences",
    "WordPairs",
    "gcide_retrieval",
    "gcide_split",
    "gensim_data_dir",
    "lee_background",
    "lee_corpus",
    "load_mteb_retrieval",
    "load_mteb_sts",
    "pii_sentences",
    "presidio_templates_path",
    "word_similarity",
]


# ---------------------------------------------------------------------------------------------
# gensim's bundled test data
# ---------------------------------------------------------------------------------------------


def gensim_data_dir() -> Path:
    """gensim's bundled ``test_data`` folder (Lee corpus, WordSim353, SimLex-999)."""
    spec = importlib.util.find_spec("gensim")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            "gensim is required for the bundled Lee corpus and word-similarity data but not "
            "installed; install it with: pip install gensim (or pass path=...)"
        )
    d = Path(next(iter(spec.submodule_search_locations))) / "test" / "test_data"
    if not d.is_dir():
        raise FileNotFoundError(f"gensim's test data folder is missing: {d}")
    return d


def _data_file(name: str, path: str | Path | None) -> Path:
    p = Path(path) / name if path is not None else gensim_data_dir() / name
    if not p.exists():
        raise FileNotFoundError(f"evaluation data file not found: {p}")
    return p


@dataclass(frozen=True)
class LeeCorpus:
    """The Lee corpus: 50 documents and human similarity of every pair.

    Attributes
    ----------
    documents : list of str
    ids : list of str
    pairs : ndarray of int, shape (1225, 2)
        Document index pairs (i < j), upper triangle in row-major order.
    scores : ndarray of float, shape (1225,)
        Mean human similarity (0..1) of each pair.
    """

    documents: list[str]
    ids: list[str]
    pairs: NDArray[np.int64]
    scores: NDArray[np.float64]

    def sts_task(self) -> STSTask:
        """The pairs as an :class:`~privembed.evaluation.STSTask` over embeddings of ``documents``."""
        return STSTask(self.pairs, self.scores, name="lee")


def lee_corpus(path: str | Path | None = None) -> LeeCorpus:
    """Load the 50 Lee documents (``lee.cor``) and the judgments (``similarities0-1.txt``).

    Parameters
    ----------
    path : folder, optional
        Where the two files are (default: gensim's bundled test data).

    Examples
    --------
    >>> lee = lee_corpus()
    >>> len(lee.documents), lee.pairs.shape, round(float(lee.scores.mean()), 3)
    (50, (1225, 2), 0.327)
    """
    docs = [
        line.strip()
        for line in _data_file("lee.cor", path).read_text(encoding="latin-1").splitlines()
        if line.strip()
    ]
    S = np.loadtxt(_data_file("similarities0-1.txt", path), dtype=np.float64)
    if S.shape != (len(docs), len(docs)):
        raise DataError(
            f"the similarity matrix is {S.shape} but lee.cor has {len(docs)} documents."
        )
    iu = np.triu_indices(len(docs), 1)
    return LeeCorpus(
        documents=docs,
        ids=[f"lee-{i:02d}" for i in range(len(docs))],
        pairs=np.stack(iu, axis=1).astype(np.int64),
        scores=S[iu],
    )


def lee_background(
    path: str | Path | None = None, *, sentences: bool = False, min_words: int = 5
) -> list[str]:
    """The 300 Lee background documents, or their distinct sentences of >= ``min_words`` words.

    Examples
    --------
    >>> len(lee_background()), len(lee_background(sentences=True)) > 2000
    (300, True)
    """
    text = _data_file("lee_background.cor", path).read_text(encoding="latin-1")
    docs = [line.strip() for line in text.splitlines() if line.strip()]
    if not sentences:
        return docs
    min_words = check_int("min_words", min_words, ge=1)
    seen: dict[str, None] = {}
    for doc in docs:
        for s in re.split(r"(?<=[.!?])\s+", doc):
            s = s.strip()
            if len(s.split()) >= min_words:
                seen.setdefault(s, None)
    return list(seen)


@dataclass(frozen=True)
class WordPairs:
    """Word pairs with human similarity (WordSim353, SimLex-999)."""

    name: str
    word1: list[str]
    word2: list[str]
    scores: NDArray[np.float64]

    def __len__(self) -> int:
        return len(self.word1)

    def sts_task(self, vocabulary: Sequence[str]) -> tuple[STSTask, float]:
        """The pairs whose words are both in ``vocabulary`` (rows of a word-vector matrix).

        Returns the task over those rows and the coverage (share of pairs kept).
        """
        index = {w: i for i, w in enumerate(vocabulary)}
        keep = [
            (index[a], index[b], s)
            for a, b, s in zip(self.word1, self.word2, self.scores, strict=True)
            if a in index and b in index
        ]
        if len(keep) < 2:
            raise DataError(f"fewer than 2 {self.name} pairs are in the vocabulary.")
        pairs = np.array([(a, b) for a, b, _ in keep], dtype=np.int64)
        scores = np.array([s for _, _, s in keep], dtype=np.float64)
        return STSTask(pairs, scores, name=self.name), len(keep) / len(self)


_WORD_FILES = {"wordsim353": "wordsim353.tsv", "simlex999": "simlex999.txt"}


def word_similarity(name: str = "wordsim353", path: str | Path | None = None) -> WordPairs:
    """WordSim353 (``"wordsim353"``) or SimLex-999 (``"simlex999"``), lower-cased.

    Examples
    --------
    >>> ws = word_similarity("wordsim353"); len(ws), ws.word1[0], ws.word2[0], float(ws.scores[0])
    (353, 'love', 'sex', 6.77)
    >>> len(word_similarity("simlex999"))
    999
    """
    if name not in _WORD_FILES:
        raise ValueError(f"name must be one of {sorted(_WORD_FILES)}, got name={name!r}.")
    w1, w2, sc = [], [], []
    for line in _data_file(_WORD_FILES[name], path).read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) < 3:
            raise DataError(f"{name}: bad line {line!r} (expected word1<TAB>word2<TAB>score).")
        w1.append(parts[0].strip().lower())
        w2.append(parts[1].strip().lower())
        sc.append(float(parts[2]))
    return WordPairs(name, w1, w2, np.array(sc))


# ---------------------------------------------------------------------------------------------
# PII sentences from templates
# ---------------------------------------------------------------------------------------------

#: privembed's own PII templates (used when presidio-evaluator is not installed); slots are
#: Faker-backed names of :data:`SLOTS`, in presidio-evaluator's ``{{slot}}`` syntax
TEMPLATES: tuple[str, ...] = (
    "My name is {{person}} and I live at {{address}}.",
    "Please send the invoice to {{email}}, attention {{person}}.",
    "{{person}} called from {{phone_number}} about the delayed refund.",
    "I lost my card {{credit_card_number}} yesterday in {{city}}.",
    "Transfer 500 euros from {{iban}} to my savings account, signed {{first_name}} {{last_name}}.",
    "Patient {{person}}, aged {{age}}, was admitted to the clinic in {{city}} on {{date}}.",
    "Dr. {{last_name}} prescribed the new medication to {{person}} after the visit on {{date}}.",
    "Can you update my address to {{address}}? My account is under {{person}}.",
    "Our new hire {{person}} will start as {{job}} at {{organization}} next month.",
    "{{person}} works for {{organization}} in {{city}}, {{country}}.",
    "The parcel for {{person}} should go to {{street_address}}, {{city}} {{postcode}}.",
    "My social security number is {{ssn}}; please do not share it.",
    "Reach me at {{phone_number}} or write to {{email}}.",
    "I was born on {{date_of_birth}} in {{city}}.",
    "{{first_name}} is flying to {{country}} on {{date}} and needs a visa letter.",
    "The login from {{ipv4}} was not me; my username is {{user_name}}.",
    "Please cancel the subscription of {{person}}, customer since {{year}}.",
    "{{person}} ({{age}} years old) reported chest pain at {{organization}}.",
    "Card ending {{credit_card_number}} was charged twice by {{organization}}.",
    "Ship the documents to {{person}} at {{address}} before {{date}}.",
    "Meeting with {{person}} from {{organization}} moved to {{day_of_week}}.",
    "The tenant {{person}} at {{street_address}} has not paid since {{month}}.",
    "I am a {{job}} living in {{city}} and my number is {{phone_number}}.",
    "Contact {{first_name}} {{last_name}} at {{email}} for the keys.",
    "My daughter {{first_name}} was treated at {{organization}} in {{city}}.",
    "Account holder: {{person}}; IBAN: {{iban}}; branch: {{city}}.",
    "{{person}} renewed the passport in {{country}} on {{date}}.",
    "Could {{person}} confirm the appointment on {{date}} at the {{city}} office?",
    "The driver {{person}} was stopped near {{street_address}} at night.",
    "Send the lab results of {{person}}, born {{date_of_birth}}, to {{email}}.",
    "Visit our store at {{address}} or call {{phone_number}}.",
    "{{first_name}} from {{city}} asked to close the account at {{organization}}.",
    "The nurse {{person}} is on call this {{day_of_week}} in {{city}}.",
    "Employee {{person}}, {{job}}, reports to {{first_name}} {{last_name}}.",
    "We refunded {{person}} to the card {{credit_card_number}}.",
    "Please verify that {{user_name}} belongs to {{person}}.",
    "{{person}} and {{first_name}} moved from {{city}} to {{country}} in {{year}}.",
    "Her doctor, {{person}}, works at {{organization}} near {{street_address}}.",
    "I want to change my phone from {{phone_number}} to {{phone_number}}.",
    "My email {{email}} was used to open an account in {{country}}.",
)

_NATIONALITIES = (
    "American", "British", "Canadian", "French", "German", "Indian", "Italian", "Japanese",
    "Mexican", "Nigerian", "Polish", "Spanish",
)  # fmt: skip
#: slot -> (entity type, Faker method or callable(faker) -> str)
SLOTS: dict[str, tuple[str, Any]] = {
    "person": ("PERSON", "name"),
    "name": ("PERSON", "name"),
    "name_female": ("PERSON", "name_female"),
    "name_male": ("PERSON", "name_male"),
    "first_name": ("PERSON", "first_name"),
    "first_name_female": ("PERSON", "first_name_female"),
    "first_name_male": ("PERSON", "first_name_male"),
    "first_name_nonbinary": ("PERSON", "first_name_nonbinary"),
    "last_name": ("PERSON", "last_name"),
    "last_name_female": ("PERSON", "last_name_female"),
    "last_name_male": ("PERSON", "last_name_male"),
    "prefix": ("TITLE", "prefix"),
    "prefix_female": ("TITLE", "prefix_female"),
    "prefix_male": ("TITLE", "prefix_male"),
    "address": ("LOCATION", lambda f: f.address().replace("\n", ", ")),
    "street_address": ("LOCATION", "street_address"),
    "street_name": ("LOCATION", "street_name"),
    "building_number": ("LOCATION", "building_number"),
    "secondary_address": ("LOCATION", "secondary_address"),
    "city": ("LOCATION", "city"),
    "country": ("LOCATION", "country"),
    "state_abbr": ("LOCATION", "state_abbr"),
    "postcode": ("LOCATION", "postcode"),
    "zipcode": ("LOCATION", "zipcode"),
    "nationality": ("NRP", lambda f: f.random_element(_NATIONALITIES)),
    "organization": ("ORGANIZATION", "company"),
    "job": ("TITLE", "job"),
    "email": ("EMAIL_ADDRESS", "email"),
    "url": ("URL", "url"),
    "user_name": ("USERNAME", "user_name"),
    "ipv4": ("IP_ADDRESS", "ipv4"),
    "ip_address": ("IP_ADDRESS", "ipv4"),
    "phone_number": ("PHONE_NUMBER", "phone_number"),
    "credit_card_number": ("CREDIT_CARD", "credit_card_number"),
    "iban": ("IBAN_CODE", "iban"),
    "ssn": ("US_SSN", "ssn"),
    "us_driver_license": ("US_DRIVER_LICENSE", lambda f: f.bothify("?#######").upper()),
    "age": ("AGE", lambda f: str(f.random_int(18, 92))),
    "year": ("DATE_TIME", "year"),
    "month": ("DATE_TIME", "month_name"),
    "day_of_week": ("DATE_TIME", "day_of_week"),
    "date": ("DATE_TIME", lambda f: f.date(pattern="%B %d, %Y")),
    "date_time": ("DATE_TIME", lambda f: f.date_time().strftime("%B %d, %Y %H:%M")),
    "date_of_birth": ("DATE_TIME", lambda f: f.date_of_birth().strftime("%B %d, %Y")),
}
_SLOT = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


def presidio_templates_path() -> Path | None:
    """presidio-evaluator's template file if that package is installed (not imported), else None."""
    spec = importlib.util.find_spec("presidio_evaluator")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations)))
    p = root / "data_generator" / "raw_data" / "templates.txt"
    return p if p.exists() else None


def _load_templates(source: str | Path | Sequence[str] | None) -> tuple[list[str], str]:
    if source is None:
        p = presidio_templates_path()
        if p is None:
            return list(TEMPLATES), "privembed"
        source, name = p, "presidio-evaluator"
    elif isinstance(source, str | Path) and Path(source).exists():
        name = str(source)
    elif isinstance(source, str | Path):
        raise FileNotFoundError(f"templates file not found: {source}")
    else:
        return [str(t) for t in source], "custom"
    lines = Path(source).read_text(encoding="utf-8", errors="replace").splitlines()
    return [ln.strip() for ln in lines if ln.strip()], name


@dataclass(frozen=True)
class PIISentences:
    """Sentences with personal information and their ground truth.

    Attributes
    ----------
    ids, texts : list of str
    entities : list of list of (start, end, type, value)
        Character spans of the filled slots.
    sensitive : list of frozenset of str
        Lower-cased word tokens of the filled values (function words dropped): what Leakage
        ([T26] eq. 13) counts.
    template_ids : list of int
    source : str
        Where the templates came from (``"presidio-evaluator"``, ``"privembed"``, a path, ...).
    skipped_templates : int
        Templates with a slot that has no Faker generator (or no slot at all), left out.
    """

    ids: list[str]
    texts: list[str]
    entities: list[list[tuple[int, int, str, str]]]
    sensitive: list[frozenset[str]]
    template_ids: list[int]
    source: str
    skipped_templates: int = 0

    def __len__(self) -> int:
        return len(self.texts)

    def to_attack_corpus(self) -> Any:
        """As a :class:`privembed.attacks.PIICorpus` (ids, texts, sensitive)."""
        from ..attacks import PIICorpus

        return PIICorpus(ids=list(self.ids), texts=list(self.texts), sensitive=list(self.sensitive))

    def subset(self, index: Sequence[int]) -> PIISentences:
        idx = [int(i) for i in index]
        return PIISentences(
            ids=[self.ids[i] for i in idx],
            texts=[self.texts[i] for i in idx],
            entities=[self.entities[i] for i in idx],
            sensitive=[self.sensitive[i] for i in idx],
            template_ids=[self.template_ids[i] for i in idx],
            source=self.source,
            skipped_templates=self.skipped_templates,
        )


def _generator(fake: Any, slot: str) -> Callable[[], str] | None:
    spec = SLOTS.get(slot)
    if spec is None:
        return None
    how = spec[1]
    if callable(how):
        return lambda: str(how(fake))
    fn = getattr(fake, how, None)
    return (lambda: str(fn())) if callable(fn) else None


def pii_sentences(
    n: int = 1000,
    *,
    seed: int = 0,
    templates: str | Path | Sequence[str] | None = None,
    locale: str = "en_US",
) -> PIISentences:
    """``n`` sentences filled from PII templates with seeded Faker values (extra ``data``).

    Parameters
    ----------
    n : int
    seed : int
        Seeds the template choice and Faker.
    templates : path or sequence of str, optional
        Default: presidio-evaluator's ``templates.txt`` when installed, else :data:`TEMPLATES`.
        Slots use the ``{{slot}}`` syntax; templates with an unknown slot (see ``SLOTS``) or no
        slot are skipped.
    locale : str, default "en_US"

    Examples
    --------
    >>> c = pii_sentences(3, seed=1, templates=["Hi {{first_name}}, call {{phone_number}}."])
    >>> t, (s, e, kind, value) = c.texts[0], c.entities[0][0]
    >>> t[s:e] == value, kind
    (True, 'PERSON')
    >>> c == pii_sentences(3, seed=1, templates=["Hi {{first_name}}, call {{phone_number}}."])
    True
    """
    from ..attacks import word_tokens
    from ..attacks.corpus import FUNCTION_WORDS

    n = check_int("n", n, ge=1)
    faker_mod = require("faker", "data", purpose="PII sentence corpora")
    fake = faker_mod.Faker(locale)
    fake.seed_instance(int(seed))
    raw, source = _load_templates(templates)
    usable: list[tuple[int, str]] = []
    for i, t in enumerate(raw):
        slots = _SLOT.findall(t)
        if slots and all(_generator(fake, s) is not None for s in slots):
            usable.append((i, t))
    if not usable:
        raise DataError(f"no usable template in {source} (every one has an unknown slot).")
    ids, texts, ents, sens, tids = [], [], [], [], []
    for k in range(n):
        tid, tmpl = usable[fake.random_int(0, len(usable) - 1)]
        out = io.StringIO()
        spans: list[tuple[int, int, str, str]] = []
        pos = 0
        for m in _SLOT.finditer(tmpl):
            out.write(tmpl[pos : m.start()])
            gen = _generator(fake, m.group(1))
            assert gen is not None
            value = " ".join(gen().split())
            start = out.tell()
            out.write(value)
            spans.append((start, start + len(value), SLOTS[m.group(1)][0], value))
            pos = m.end()
        out.write(tmpl[pos:])
        text = out.getvalue()
        tokens = {t for _, _, _, v in spans for t in word_tokens(v)} - FUNCTION_WORDS
        ids.append(f"pii-{k:05d}")
        texts.append(text)
        ents.append(spans)
        sens.append(frozenset(tokens))
        tids.append(tid)
    return PIISentences(ids, texts, ents, sens, tids, source, len(raw) - len(usable))


# ---------------------------------------------------------------------------------------------
# MTEB tasks
# ---------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------
# GCIDE: a held-out retrieval task from a real dictionary
# ---------------------------------------------------------------------------------------------

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
