"""Vector mechanisms: one module per family, all on the shared :class:`Mechanism` base.

Use :func:`get_mechanism` to build one by name (as the command line does).
"""

from __future__ import annotations

from typing import Any

from .base import GeneratorSource, Mechanism, NoiseSource
from .gaussian import EmpiricalGaussianMechanism, GaussianMechanism
from .laplace import LaplaceMechanism
from .mahalanobis import MahalanobisMechanism
from .projection import JLProjection, JLSketch, PrivateProjection
from .purkayastha import PurkayasthaMechanism

__all__ = [
    "MECHANISMS",
    "EmpiricalGaussianMechanism",
    "GaussianMechanism",
    "GeneratorSource",
    "JLProjection",
    "JLSketch",
    "LaplaceMechanism",
    "MahalanobisMechanism",
    "Mechanism",
    "NoiseSource",
    "PrivateProjection",
    "PurkayasthaMechanism",
    "get_mechanism",
    "register_mechanism",
]

MECHANISMS: dict[str, type[Mechanism]] = {
    "gaussian": GaussianMechanism,
    "empirical": EmpiricalGaussianMechanism,
    "laplace": LaplaceMechanism,
    "mahalanobis": MahalanobisMechanism,
    "purkayastha": PurkayasthaMechanism,
    "projection": PrivateProjection,
}


def register_mechanism(name: str, cls: type[Mechanism]) -> None:
    """Add a mechanism class to the registry used by :func:`get_mechanism` and the CLI."""
    if not (isinstance(cls, type) and issubclass(cls, Mechanism)):
        raise TypeError(f"cls must be a Mechanism subclass, got cls={cls!r}.")
    MECHANISMS[name] = cls


def get_mechanism(name: str, **params: Any) -> Mechanism:
    """Build a mechanism by registry name; ``None``-valued parameters are dropped.

    Examples
    --------
    >>> get_mechanism("laplace", epsilon=5, delta=None)
    LaplaceMechanism(epsilon=5.0)
    >>> get_mechanism("laplas", epsilon=5)
    Traceback (most recent call last):
    ...
    ValueError: mechanism must be one of 'empirical', 'gaussian', 'laplace', 'mahalanobis', 'projection', 'purkayastha', got mechanism='laplas'.
    """
    if name not in MECHANISMS:
        opts = ", ".join(repr(k) for k in sorted(MECHANISMS))
        raise ValueError(f"mechanism must be one of {opts}, got mechanism={name!r}.")
    cls = MECHANISMS[name]
    clean = {k: v for k, v in params.items() if v is not None}
    try:
        return cls(**clean)
    except TypeError as exc:
        if "unexpected keyword argument" in str(exc) or "missing" in str(exc):
            raise ValueError(f"{name}: {exc}") from None
        raise
