"""PII sentences from templates filled by Faker, with the ground truth (entity spans, types,
sensitive tokens).

Templates: presidio-evaluator's template file when that package is installed, otherwise
privembed's own templates in the same ``{{slot}}`` format (:data:`TEMPLATES`), or any file you
pass. Loaded through :mod:`privembed.evaluation.loaders` (:func:`pii_sentences`).
"""

from __future__ import annotations

import importlib.util
import io
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core._optional import require
from ..core._validation import DataError, check_int

__all__ = ["SLOTS", "TEMPLATES", "PIISentences", "pii_sentences", "presidio_templates_path"]

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
