"""Which family auditor audits which mechanism: the registry, by the mechanism's registry ``name``.

One small class per mechanism family (:mod:`._gaussian`, :mod:`._laplace`, :mod:`._purkayastha`,
:mod:`._subspace`) on the base :class:`~._family.Family` (:mod:`._family`: the claim, the pair,
the generic black-box auditor), with the white box's shared fits and verdict in
:mod:`._whitebox` and the exact laws in :mod:`._laws`. Selection is by registry ``name``, so a
subclass with a planted bug is audited as the family it claims to be; a mechanism with no
registered family gets the generic black-box one.
"""

from __future__ import annotations

from ..mechanisms.base import Mechanism
from ._family import Claim, Family, Pair
from ._gaussian import GaussianFamily, ProjectionFamily
from ._laplace import LaplaceFamily, MahalanobisFamily
from ._laws import AngleLaw
from ._purkayastha import PurkayasthaFamily
from ._subspace import SubspaceFamily

__all__ = [
    "AUDITORS",
    "AngleLaw",
    "Claim",
    "Family",
    "Pair",
    "auditor_for",
    "register_auditor",
]

#: family auditors by mechanism registry name
AUDITORS: dict[str, Family] = {
    "gaussian": GaussianFamily(),
    "empirical": GaussianFamily(),
    "projection": ProjectionFamily(),
    "laplace": LaplaceFamily(),
    "mahalanobis": MahalanobisFamily(),
    "purkayastha": PurkayasthaFamily(),
    "subspace": SubspaceFamily(),
}


def register_auditor(name: str, family: Family) -> None:
    """Use ``family`` to audit mechanisms whose registry ``name`` is ``name``."""
    if not isinstance(family, Family):
        raise TypeError(f"family must be a Family instance, got family={family!r}.")
    AUDITORS[name] = family


def auditor_for(mech: Mechanism) -> Family:
    """The family auditor of a mechanism (the generic black-box one when none is registered)."""
    if not isinstance(mech, Mechanism):
        raise TypeError(f"mechanism must be a privembed Mechanism, got mechanism={mech!r}.")
    return AUDITORS.get(mech.name, Family())
