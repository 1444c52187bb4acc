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

References
----------
.. [T26] Tsai, Hsiao, Chen, Lin (2026). Concept-aware privacy mechanisms for defending embedding
   inversion attacks (SPARSE). App. D (STS), Table 6 (retrieval), Table 1 (PII leakage).
"""

from __future__ import annotations

import gzip
import importlib.util
import io
import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._optional import require
from .._validation import DataError, check_int
from .utility import STSTask

__all__ = [
    "MTEBSTS",
    "TEMPLATES",
    "LeeCorpus",
    "MTEBRetrieval",
    "PIISentences",
    "WordPairs",
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
