"""Concept definitions and built-in, seeded sentence sources.

A *concept* ([T26] §3.1) is what a user wants protected: a set of tokens or phrases, a set of
spaCy named-entity labels, regular expressions, or any mix of these. :func:`builtin_concept`
returns ready-made definitions for common personal and clinical concepts, and
:func:`generate_sentences` produces seeded sentences that contain a concept, for users who have no
corpus of their own (Faker and faker-healthcare-provider fill the templates; the ``data`` extra).

References
----------
.. [T26] Tsai, Hsiao, Chen, Lin (2026). Concept-aware privacy mechanisms for defending embedding
   inversion attacks (SPARSE). §3.1 "Training Dataset Construction".
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..core._optional import require
from ..core._validation import DataError, check_int
from ..core.rng import as_generator
from ..data.io import iter_json_lines, parse_json

__all__ = [
    "BUILTIN_CONCEPTS",
    "Concept",
    "builtin_concept",
    "generate_sentences",
    "read_tokens",
    "resolve_concept",
]

_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_MONTH_RE = "(?:" + "|".join(_MONTHS) + ")"

# Real cities (a curated public list; Faker's en_US cities are invented names).
_CITIES = (
    "Amsterdam", "Athens", "Atlanta", "Auckland", "Bangkok", "Barcelona", "Beijing", "Berlin",
    "Bogota", "Boston", "Brisbane", "Brussels", "Budapest", "Buenos Aires", "Cairo", "Calgary",
    "Cape Town", "Chicago", "Copenhagen", "Dallas", "Delhi", "Denver", "Detroit", "Dubai",
    "Dublin", "Edinburgh", "Frankfurt", "Geneva", "Glasgow", "Hamburg", "Helsinki", "Hong Kong",
    "Honolulu", "Houston", "Istanbul", "Jakarta", "Johannesburg", "Karachi", "Kyoto", "Lagos",
    "Lima", "Lisbon", "London", "Los Angeles", "Lyon", "Madrid", "Manchester", "Manila",
    "Marseille", "Melbourne", "Mexico City", "Miami", "Milan", "Minneapolis", "Montreal",
    "Moscow", "Mumbai", "Munich", "Nairobi", "Naples", "New Orleans", "New York", "Osaka",
    "Oslo", "Ottawa", "Paris", "Perth", "Philadelphia", "Phoenix", "Prague", "Rio de Janeiro",
    "Rome", "Rotterdam", "San Diego", "San Francisco", "Santiago", "Sao Paulo", "Seattle",
    "Seoul", "Shanghai", "Singapore", "Stockholm", "Sydney", "Taipei", "Tokyo", "Toronto",
    "Vancouver", "Venice", "Vienna", "Warsaw", "Zurich",
)  # fmt: skip

_GENDER = (
    "man", "woman", "men", "women", "male", "female", "boy", "girl", "boys", "girls",
    "he", "she", "him", "her", "his", "hers", "himself", "herself", "mr", "mrs", "ms",
    "gentleman", "lady", "husband", "wife", "father", "mother", "son", "daughter",
    "brother", "sister", "grandfather", "grandmother", "uncle", "aunt", "nephew", "niece",
)  # fmt: skip

_AGE_PATTERNS = (
    r"\b\d{1,3}[- ]years?[- ]old\b",
    r"\b\d{1,3}\s*(?:y/o|yo|yrs?)(?!\w)",
    r"\b(?:aged|age)(?::|\s+of)?\s+\d{1,3}\b",
)
_DATE_PATTERNS = (
    r"\b\d{4}-\d{2}-\d{2}\b",
    r"\b\d{1,2}/\d{1,2}/\d{2,4}\b",
    r"\b" + _MONTH_RE + r"\s+\d{1,2}(?:st|nd|rd|th)?(?:,?\s+\d{4})?\b",
    r"\b\d{1,2}\s+" + _MONTH_RE + r"(?:\s+\d{4})?\b",
)


@dataclass(frozen=True)
class Concept:
    """What must be protected: tokens/phrases, spaCy entity labels, regular expressions, or a mix.

    Parameters
    ----------
    name : str
        A short name (``"disease"``); recorded in concept profiles.
    tokens : sequence of str
        Words or phrases of the concept. A phrase matches the same sequence of words in a text,
        whatever the spaces or hyphens between them (``"New York"`` matches ``"New-York"``).
    entity_labels : sequence of str
        spaCy entity labels (``"PERSON"``, ``"GPE"``, ``"DATE"`` ...) whose spans belong to the
        concept; texts are then run through spaCy (the ``data`` extra).
    patterns : sequence of str
        Regular expressions whose matches belong to the concept (ages, dates).
    case_sensitive : bool, default False
        Match ``tokens`` case-sensitively (useful for proper nouns: ``"May"`` vs ``"may"``).
    description : str

    Examples
    --------
    >>> c = Concept(name="fruit", tokens=("apple", "blood orange"))
    >>> c.to_dict()["tokens"]
    ['apple', 'blood orange']
    >>> Concept.from_dict(c.to_dict()) == c
    True
    >>> Concept(name="nothing")
    Traceback (most recent call last):
    ...
    ValueError: concept 'nothing' needs tokens, entity_labels or patterns.
    """

    name: str
    tokens: tuple[str, ...] = ()
    entity_labels: tuple[str, ...] = ()
    patterns: tuple[str, ...] = ()
    case_sensitive: bool = False
    description: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError(f"name must be a non-empty string, got name={self.name!r}.")
        for attr in ("tokens", "entity_labels", "patterns"):
            value = getattr(self, attr)
            if isinstance(value, str):
                raise TypeError(f"{attr} must be a sequence of strings, got {attr}={value!r}.")
            items = tuple(value)
            bad = [t for t in items if not isinstance(t, str) or not t.strip()]
            if bad:
                raise ValueError(f"{attr} must hold non-empty strings, got {bad[0]!r} in {attr}.")
            object.__setattr__(self, attr, items)
        wordless = [t for t in self.tokens if not re.search(r"\w", t)]
        if wordless:
            raise ValueError(f"tokens must contain a word character, got {wordless[0]!r}.")
        for p in self.patterns:
            try:
                re.compile(p)
            except re.error as exc:
                raise ValueError(
                    f"patterns has an invalid regular expression {p!r}: {exc}."
                ) from None
        object.__setattr__(
            self, "entity_labels", tuple(lab.strip().upper() for lab in self.entity_labels)
        )
        if not (self.tokens or self.entity_labels or self.patterns):
            raise ValueError(f"concept {self.name!r} needs tokens, entity_labels or patterns.")

    def with_extra(
        self,
        *,
        tokens: Iterable[str] = (),
        entity_labels: Iterable[str] = (),
        patterns: Iterable[str] = (),
    ) -> Concept:
        """A copy with more tokens, entity labels or patterns (duplicates dropped, order kept)."""

        def merge(a: tuple[str, ...], b: Iterable[str]) -> tuple[str, ...]:
            return tuple(dict.fromkeys([*a, *b]))

        return Concept(
            name=self.name,
            tokens=merge(self.tokens, tokens),
            entity_labels=merge(self.entity_labels, (e.upper() for e in entity_labels)),
            patterns=merge(self.patterns, patterns),
            case_sensitive=self.case_sensitive,
            description=self.description,
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready definition (what a concept profile records)."""
        return {
            "name": self.name,
            "tokens": list(self.tokens),
            "entity_labels": list(self.entity_labels),
            "patterns": list(self.patterns),
            "case_sensitive": self.case_sensitive,
            "description": self.description,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Concept:
        """Inverse of :meth:`to_dict`."""
        return cls(
            name=d["name"],
            tokens=tuple(d.get("tokens", ())),
            entity_labels=tuple(d.get("entity_labels", ())),
            patterns=tuple(d.get("patterns", ())),
            case_sensitive=bool(d.get("case_sensitive", False)),
            description=str(d.get("description", "")),
        )


# ---------------------------------------------------------------------------------------------
# built-in concepts
# ---------------------------------------------------------------------------------------------

_ALIASES = {
    "person": "person",
    "persons": "person",
    "name": "person",
    "names": "person",
    "person_name": "person",
    "city": "city",
    "cities": "city",
    "location": "city",
    "locations": "city",
    "country": "country",
    "countries": "country",
    "date": "date",
    "dates": "date",
    "age": "age",
    "ages": "age",
    "disease": "disease",
    "diseases": "disease",
    "symptom": "symptom",
    "symptoms": "symptom",
    "drug": "drug",
    "drugs": "drug",
    "medication": "drug",
    "gender": "gender",
}

#: canonical names of the built-in concepts (aliases such as ``"location"`` map onto them)
BUILTIN_CONCEPTS = (
    "person",
    "city",
    "country",
    "date",
    "age",
    "disease",
    "symptom",
    "drug",
    "gender",
)


def _canonical(name: str) -> str | None:
    return _ALIASES.get(name.strip().lower())


@lru_cache(maxsize=1)
def _healthcare_lists() -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    faker_mod = require("faker", "data", purpose="built-in concepts")
    fh = require("faker_healthcare", "data", purpose="built-in clinical concepts")
    fake = faker_mod.Faker("en_US")
    fake.add_provider(fh.HealthcareProvider)
    prov = next(p for p in fake.providers if isinstance(p, fh.HealthcareProvider))
    return tuple(prov.diseases), tuple(prov.symptoms), tuple(prov.generic_drugs)


@lru_cache(maxsize=1)
def _person_tokens() -> tuple[str, ...]:
    require("faker", "data", purpose="built-in concepts")
    from faker.providers.person.en_US import Provider as Person

    # names that are also months, weekdays or words of the built-in places ("April",
    # "Francisco" in "San Francisco") would make the concepts collide: leave them out
    place_words = {w for place in (*_CITIES, *_countries()) for w in re.findall(r"\w+", place)}
    clash = {*_MONTHS, *_WEEKDAYS, *place_words}
    names = [n for n in (*Person.first_names, *Person.last_names) if n not in clash]
    return tuple(dict.fromkeys(names))


@lru_cache(maxsize=1)
def _countries() -> tuple[str, ...]:
    require("faker", "data", purpose="built-in concepts")
    from faker.providers.address.en_US import Provider as Address

    return tuple(Address.countries)


def builtin_concept(name: str) -> Concept:
    """The built-in definition of a concept (see :data:`BUILTIN_CONCEPTS`; aliases accepted).

    ==========  =========================================================  ===============
    concept     tokens / patterns                                          case-sensitive
    ==========  =========================================================  ===============
    person      Faker's en_US first and last names (1,690)                 yes
    city        91 real world cities                                       yes
    country     Faker's country list (245)                                 yes
    date        month and weekday names; ISO, US and written dates         yes
    age         "45-year-old", "45 y/o", "aged 45", "age of 45"            --
    disease     faker-healthcare-provider diseases (158)                   no
    symptom     faker-healthcare-provider symptoms (290)                   no
    drug        faker-healthcare-provider generic drugs (392)              no
    gender      gendered nouns and pronouns (38)                           no
    ==========  =========================================================  ===============

    Token lists are matched as whole words, so collisions are possible (the surname ``"Jackson"``
    is also a city); add or remove tokens with your own definition where that matters.

    Examples
    --------
    >>> c = builtin_concept("location")
    >>> c.name, "Paris" in c.tokens, c.case_sensitive
    ('city', True, True)
    >>> builtin_concept("mood")
    Traceback (most recent call last):
    ...
    ValueError: concept must be one of 'person', 'city', 'country', 'date', 'age', 'disease', 'symptom', 'drug', 'gender', got concept='mood'.
    """
    key = _canonical(name) if isinstance(name, str) else None
    if key is None:
        opts = ", ".join(repr(c) for c in BUILTIN_CONCEPTS)
        raise ValueError(f"concept must be one of {opts}, got concept={name!r}.")
    if key == "person":
        return Concept(
            name="person",
            tokens=_person_tokens(),
            case_sensitive=True,
            description="person names (Faker en_US first and last names)",
        )
    if key == "city":
        return Concept(
            name="city", tokens=_CITIES, case_sensitive=True, description="cities (real names)"
        )
    if key == "country":
        return Concept(
            name="country", tokens=_countries(), case_sensitive=True, description="countries"
        )
    if key == "date":
        return Concept(
            name="date",
            tokens=(*_MONTHS, *_WEEKDAYS),
            patterns=_DATE_PATTERNS,
            case_sensitive=True,
            description="dates, months and weekdays",
        )
    if key == "age":
        return Concept(name="age", patterns=_AGE_PATTERNS, description="ages")
    if key == "gender":
        return Concept(name="gender", tokens=_GENDER, description="gendered nouns and pronouns")
    diseases, symptoms, drugs = _healthcare_lists()
    lists = {"disease": diseases, "symptom": symptoms, "drug": drugs}
    return Concept(name=key, tokens=lists[key], description=f"{key}s (faker-healthcare-provider)")


# ---------------------------------------------------------------------------------------------
# seeded sentence generator
# ---------------------------------------------------------------------------------------------

# Slots: {person} {city} {country} {date} {age} {disease} {symptom} {drug} {gender}; every
# template has two or more, so the other slots vary inside both D+ and D- and the mask has to
# find the concept, not the template.
_TEMPLATES = (
    "{person}, a {age}-year-old {gender} from {city}, presented with {symptom}.",
    "Patient {person} was diagnosed with {disease} on {date} and started on {drug}.",
    "{person} flew from {city} to {country} on {date}.",
    "The {age}-year-old {gender} reports {symptom} and a history of {disease}.",
    "On {date}, {person} was admitted to a hospital in {city} with {disease}.",
    "Follow-up in {city}: the {symptom} improved after two weeks of {drug}.",
    "{person} moved to {country} in {date} to work as a nurse.",
    "Discharge note: {gender}, aged {age}, treated for {disease}; continue {drug}.",
    "My neighbour {person} says the weather in {city} was terrible on {date}.",
    "The clinic in {country} reported more cases of {disease} than last year.",
    "{drug} was prescribed for {symptom} by a doctor in {city}.",
    "{person} ({age} y/o) has complained of {symptom} since {date}.",
    "We met {person} at a conference in {city} last {date}.",
    "A {gender} patient from {country} with {disease} was referred to cardiology.",
    "Lab results for {person} on {date} were consistent with {disease}.",
    "Switching to {drug} reduced the {symptom} within days, the {gender} said.",
    "The {age}-year-old was seen in {city} for {symptom}.",
    "{person} booked a hotel in {city}, {country}, for {date}.",
    "Known {disease}; currently taking {drug}; reports {symptom}.",
    "The {gender} from {city} declined treatment with {drug}.",
    "Census data from {country} show that the average {gender} there marries at the age of {age}.",
    "The appointment with {person} was moved to {date} because of {symptom}.",
    "The report, filed in {city} on {date}, lists {disease} as the cause.",
    "{person} is a {age}-year-old {gender} who travels to {country} every {date}.",
    "Travellers returning from {country} with {symptom} should be tested for {disease}.",
    "Dr. {person} in {city} stopped the {drug} after the {symptom} got worse.",
    "The {gender}, aged {age}, lives in {city} and takes {drug} daily.",
    "{person} sent the invoice to the office in {country} on {date}.",
)
_SLOT_RE = re.compile(r"\{(\w+)\}")


def _date_value(rng: Any) -> str:
    kind = int(rng.integers(6))
    year, month, day = (
        int(rng.integers(1990, 2026)),
        int(rng.integers(1, 13)),
        int(rng.integers(1, 29)),
    )
    if kind == 0:
        return _MONTHS[month - 1]
    if kind == 1:
        return _WEEKDAYS[int(rng.integers(7))]
    if kind == 2:
        return f"{_MONTHS[month - 1]} {day}, {year}"
    if kind == 3:
        return f"{day} {_MONTHS[month - 1]} {year}"
    if kind == 4:
        return f"{year:04d}-{month:02d}-{day:02d}"
    return f"{month:02d}/{day:02d}/{year}"


_GENDER_NOUNS = ("man", "woman", "male", "female", "boy", "girl")


@lru_cache(maxsize=1)
def _simple_countries() -> tuple[str, ...]:
    return tuple(c for c in _countries() if not re.search(r"[(),]", c))


def _name(fake: Any) -> str:
    allowed = set(_person_tokens())
    for _ in range(100):
        name = str(fake.name())
        words = re.findall(r"\w+", name)
        if sum(w in allowed for w in words) >= 2:  # first and last name both in the concept
            return name
    return name  # pragma: no cover - Faker always finds one


def generate_sentences(concept: str, n: int = 2000, *, rng: Any = None) -> list[str]:
    """Seeded sentences that each contain the built-in ``concept`` (requires the ``data`` extra).

    Templates mix several slots (names, cities, countries, dates, ages, diseases, symptoms, drugs,
    gender terms), filled by Faker and faker-healthcare-provider; only templates that contain the
    concept's slot are used.

    Parameters
    ----------
    concept : str
        A built-in concept name (or alias).
    n : int, >= 1
    rng : int, numpy.random.Generator or None
        An int gives the same sentences every time.

    Examples
    --------
    >>> s = generate_sentences("disease", 3, rng=0)
    >>> len(s), s == generate_sentences("disease", 3, rng=0)
    (3, True)
    """
    key = _canonical(concept) if isinstance(concept, str) else None
    if key is None:
        builtin_concept(str(concept))  # raises the standard message
        raise AssertionError  # pragma: no cover
    n = check_int("n", n, ge=1)
    gen = as_generator(rng)
    faker_mod = require("faker", "data", purpose="built-in concept sentences")
    fh = require("faker_healthcare", "data", purpose="built-in concept sentences")
    fake = faker_mod.Faker("en_US")
    fake.add_provider(fh.HealthcareProvider)
    fake.seed_instance(int(gen.integers(2**31)))
    templates = [t for t in _TEMPLATES if "{" + key + "}" in t]
    fillers = {
        "person": lambda: _name(fake),
        "city": lambda: _CITIES[int(gen.integers(len(_CITIES)))],
        "country": lambda: _simple_countries()[int(gen.integers(len(_simple_countries())))],
        "date": lambda: _date_value(gen),
        "age": lambda: str(int(gen.integers(18, 93))),
        "disease": fake.disease,
        "symptom": lambda: fake.symptom().lower(),
        "drug": fake.generic_drug,
        "gender": lambda: _GENDER_NOUNS[int(gen.integers(len(_GENDER_NOUNS)))],
    }
    out = []
    for _ in range(n):
        t = templates[int(gen.integers(len(templates)))]
        # slots in template order (a set's order follows PYTHONHASHSEED: other sentences)
        values = {slot: fillers[slot]() for slot in dict.fromkeys(_SLOT_RE.findall(t))}
        s = t.format(**values)
        out.append(s[0].upper() + s[1:])
    return out


# ---------------------------------------------------------------------------------------------
# user definitions
# ---------------------------------------------------------------------------------------------


def read_tokens(path: str | Path) -> list[str]:
    """Read concept tokens: ``.txt`` (one per line, ``#`` comments), ``.json`` (a list of strings)
    or ``.jsonl`` (``{"token": ...}`` or a bare JSON string per line).

    Raises
    ------
    FileNotFoundError
        ``path`` does not exist.
    privembed.DataError
        Invalid or too deeply nested JSON (JSONL: naming the line), an entry that is not a
        string, or no tokens at all.
    """
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"file not found: {p}")
    suffix = p.suffix.lower()
    if suffix == ".json":
        data = parse_json(p.read_text(encoding="utf-8"), p)
        if not isinstance(data, list) or not all(isinstance(t, str) for t in data):
            raise DataError(f"{p}: expected a JSON list of strings.")
        tokens = data
    elif suffix in (".jsonl", ".ndjson"):
        tokens = []
        for lineno, obj in iter_json_lines(p):
            tok = obj.get("token") if isinstance(obj, dict) else obj
            if not isinstance(tok, str):
                raise DataError(f"{p}:{lineno}: expected a string or {{'token': ...}}.")
            tokens.append(tok)
    else:
        tokens = [
            ln.strip()
            for ln in p.read_text(encoding="utf-8").splitlines()
            if ln.strip() and not ln.lstrip().startswith("#")
        ]
    tokens = [t.strip() for t in tokens if t.strip()]
    if not tokens:
        raise DataError(f"{p} contains no tokens.")
    return tokens


def resolve_concept(
    name: str,
    *,
    tokens: Iterable[str] = (),
    entity_labels: Iterable[str] = (),
    patterns: Iterable[str] = (),
    case_sensitive: bool | None = None,
) -> Concept:
    """A built-in concept (extended with any extra tokens/labels/patterns) or a custom one.

    Examples
    --------
    >>> resolve_concept("disease", tokens=["long covid"]).tokens[-1]
    'long covid'
    >>> resolve_concept("employer", entity_labels=["org"]).entity_labels
    ('ORG',)
    >>> resolve_concept("employer")
    Traceback (most recent call last):
    ...
    ValueError: concept 'employer' is not built in; give its tokens, entity labels or patterns.
    """
    tokens, entity_labels, patterns = list(tokens), list(entity_labels), list(patterns)
    if _canonical(name) is not None:
        c = builtin_concept(name).with_extra(
            tokens=tokens, entity_labels=entity_labels, patterns=patterns
        )
    elif tokens or entity_labels or patterns:
        c = Concept(
            name=name,
            tokens=tuple(tokens),
            entity_labels=tuple(entity_labels),
            patterns=tuple(patterns),
        )
    else:
        raise ValueError(
            f"concept {name!r} is not built in; give its tokens, entity labels or patterns."
        )
    if case_sensitive is not None and case_sensitive != c.case_sensitive:
        c = Concept(**{**c.to_dict(), "case_sensitive": bool(case_sensitive)})
    return c
