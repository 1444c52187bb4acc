"""Built-in corpora that work offline: seeded synthetic clinical notes with PII.

The notes are generated from templates filled by Faker (names, ages, cities, dates) and
faker-healthcare-provider (diseases, symptoms, drugs). Every note records which sensitive values
it contains, so attacks can be scored against ground truth.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ..core._optional import require
from ..core._validation import check_int

__all__ = ["ClinicalNote", "synthetic_clinical_notes"]

_TEMPLATES = (
    "{name}, a {age}-year-old from {city}, presented with {symptom}. Diagnosis: {disease}. "
    "Started on {drug}.",
    "Patient {name} ({age} y/o) reports {symptom} since {month}. History of {disease}; "
    "currently taking {drug}.",
    "Follow-up for {name}, age {age}. {disease} remains stable. Continue {drug}. "
    "New complaint: {symptom}.",
    "{age}-year-old patient {name} was admitted in {city} with {symptom}, consistent with "
    "{disease}. Prescribed {drug}.",
    "Discharge summary: {name}, {age}, treated for {disease}. Symptoms of {symptom} resolved "
    "on {drug}. Seen on {weekday}.",
    "Telehealth visit with {name} from {city}: {symptom} worsening; known {disease}. "
    "Dose of {drug} adjusted.",
)


@dataclass(frozen=True)
class ClinicalNote:
    """One synthetic note and the sensitive values it contains."""

    id: str
    text: str
    name: str
    age: int
    city: str
    disease: str
    symptom: str
    drug: str
    template: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def synthetic_clinical_notes(n: int = 200, *, seed: int = 0) -> list[ClinicalNote]:
    """Generate ``n`` seeded synthetic clinical notes (requires the ``data`` extra).

    Examples
    --------
    >>> notes = synthetic_clinical_notes(3, seed=1)
    >>> len(notes), notes[0].id
    (3, 'note-00000')
    >>> notes == synthetic_clinical_notes(3, seed=1)
    True
    """
    n = check_int("n", n, ge=1)
    faker_mod = require("faker", "data", purpose="synthetic corpora")
    fh = require("faker_healthcare", "data", purpose="synthetic clinical terms")
    fake = faker_mod.Faker("en_US")
    fake.add_provider(fh.HealthcareProvider)
    fake.seed_instance(int(seed))
    notes = []
    for i in range(n):
        t = fake.random_int(0, len(_TEMPLATES) - 1)
        values = {
            "name": fake.name(),
            "age": fake.random_int(18, 92),
            "city": fake.city(),
            "disease": fake.disease(),
            "symptom": fake.symptom().lower(),
            "drug": fake.generic_drug(),
            "month": fake.month_name(),
            "weekday": fake.day_of_week(),
        }
        text = _TEMPLATES[t].format(**values)
        notes.append(
            ClinicalNote(
                id=f"note-{i:05d}",
                text=text,
                name=values["name"],
                age=int(values["age"]),
                city=values["city"],
                disease=values["disease"],
                symptom=values["symptom"],
                drug=values["drug"],
                template=t,
            )
        )
    return notes
