"""Vector mechanisms: one module per family, all on the shared :class:`Mechanism` base.

Use :func:`build_mechanism` to build one by name (every front end does).
"""

from __future__ import annotations

import typing
from os import PathLike
from pathlib import Path
from types import UnionType as _UnionType
from typing import Any

import numpy as np

from ..core._validation import DataError
from ..core.rng import GeneratorSource, NoiseSource
from .base import Mechanism
from .gaussian import EmpiricalGaussianMechanism, GaussianMechanism
from .jl import JLProjection
from .laplace import LaplaceMechanism
from .mahalanobis import MahalanobisMechanism
from .projection import PrivateProjection
from .purkayastha import PurkayasthaMechanism
from .sketches import JLSketch
from .subspace import SubspaceBasis, SubspaceMechanism

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
    "SubspaceBasis",
    "SubspaceMechanism",
    "build_mechanism",
    "get_mechanism",
    "parse_parameter",
    "register_mechanism",
]

MECHANISMS: dict[str, type[Mechanism]] = {
    "gaussian": GaussianMechanism,
    "empirical": EmpiricalGaussianMechanism,
    "laplace": LaplaceMechanism,
    "mahalanobis": MahalanobisMechanism,
    "purkayastha": PurkayasthaMechanism,
    "projection": PrivateProjection,
    "subspace": SubspaceMechanism,
}


def register_mechanism(name: str, cls: type[Mechanism]) -> None:
    """Add a mechanism class to the registry used by :func:`get_mechanism` and the CLI."""
    if not (isinstance(cls, type) and issubclass(cls, Mechanism)):
        raise TypeError(f"cls must be a Mechanism subclass, got cls={cls!r}.")
    MECHANISMS[name] = cls


def _user_terms(names: list[str]) -> str:
    """``a, b and c`` with the command-line spelling of each (``--mask-delta``)."""
    quoted = [f"{n} (--{n.replace('_', '-')})" for n in names]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]


def _load_array(mechanism: str, param: str, value: Any) -> Any:
    """An array parameter given as an array, a list, a ``.npy`` file or a profile ``.npz``."""
    if isinstance(value, dict) and set(value) == {"sha256", "shape"}:
        raise ValueError(
            f"the {mechanism} configuration records {param} only by its SHA-256 "
            f"({value['sha256'][:12]}...); pass {param}=ARRAY or a file (--{param} FILE)."
        )
    if not isinstance(value, str | PathLike):
        return value
    path = Path(value)
    if not path.exists():
        raise FileNotFoundError(f"{param} file not found: {path}")
    try:
        loaded = np.load(path, allow_pickle=False)
        if isinstance(loaded, np.lib.npyio.NpzFile):  # a profile (.npz, whatever its suffix)
            with loaded as z:
                if param not in z.files:
                    raise DataError(
                        f"{path} has no {param!r} array (arrays: {', '.join(z.files) or 'none'})."
                    )
                return np.array(z[param])
        return loaded
    except DataError:
        raise
    except (OSError, ValueError) as exc:
        raise DataError(f"cannot read {param} from {path}: {str(exc).splitlines()[0]}") from None


def build_mechanism(name: str | None = None, /, **params: Any) -> Mechanism:
    """Build a mechanism by registry name -- the one factory every front end uses.

    ``None``-valued parameters are dropped (an option that was not given). Array parameters
    (a Mahalanobis ``mask`` or ``covariance``) may be arrays, lists, ``.npy`` files or concept
    profiles (``.npz``). A :attr:`Mechanism.config` rebuilds its mechanism:
    ``build_mechanism(**m.config)``.

    Raises
    ------
    ValueError
        Unknown mechanism, unknown or missing parameters -- each named in the terms of the
        command line, with what the mechanism takes.

    Examples
    --------
    >>> build_mechanism("laplace", epsilon=5, delta=None)
    LaplaceMechanism(epsilon=5.0)
    >>> m = build_mechanism("gaussian", epsilon=2.0, delta=1e-6)
    >>> build_mechanism(**m.config).fingerprint == m.fingerprint
    True
    >>> build_mechanism("gaussian", epsilon=5)
    Traceback (most recent call last):
    ...
    ValueError: mechanism 'gaussian' needs delta (--delta).
    >>> build_mechanism("laplace", epsilon=5, delta=1e-5)
    Traceback (most recent call last):
    ...
    ValueError: mechanism 'laplace' does not take delta (--delta); it takes epsilon, input_norm, renormalize.
    >>> build_mechanism("laplas", epsilon=5)
    Traceback (most recent call last):
    ...
    ValueError: mechanism must be one of 'empirical', 'gaussian', 'laplace', 'mahalanobis', 'projection', 'purkayastha', 'subspace', got mechanism='laplas'.
    """
    stored = params.pop("mechanism", None)
    if name is None:
        name = stored
    elif stored is not None and stored != name:
        raise ValueError(f"mechanism {name!r} was given a configuration of {stored!r}.")
    if name not in MECHANISMS:
        opts = ", ".join(repr(k) for k in sorted(MECHANISMS))
        raise ValueError(f"mechanism must be one of {opts}, got mechanism={name!r}.")
    cls = MECHANISMS[name]
    clean = {k: v for k, v in params.items() if v is not None}
    allowed = cls.parameter_names()
    unknown = [k for k in clean if k not in allowed]
    if unknown:
        raise ValueError(
            f"mechanism {name!r} does not take {_user_terms(unknown)}; it takes "
            f"{', '.join(allowed)}."
        )
    missing = [k for k in cls.required_parameters() if k not in clean]
    if missing:
        raise ValueError(f"mechanism {name!r} needs {_user_terms(missing)}.")
    for k in cls.array_params:
        if k in clean:
            clean[k] = _load_array(name, k, clean[k])
    return cls(**clean)


def parse_parameter(mechanism: str, name: str, text: str) -> Any:
    """A mechanism parameter given as text (``-p NAME=VALUE``), converted by the type its
    constructor declares -- not guessed from the text: ``"nan"`` for a ``str`` parameter stays a
    string, ``"5"`` for a ``float`` is 5.0, a ``bool`` takes only true/false (1/0, yes/no), a
    choice (``Literal``) only its values, and ``none`` is None where the type allows it.

    Examples
    --------
    >>> parse_parameter("projection", "k", "64"), parse_parameter("projection", "kind", "srht")
    (64, 'srht')
    >>> parse_parameter("laplace", "renormalize", "False")
    False
    >>> parse_parameter("projection", "k", "6.5")
    Traceback (most recent call last):
    ...
    ValueError: mechanism 'projection': k (-p k=...) must be an int, got '6.5'.
    """
    if mechanism not in MECHANISMS:
        opts = ", ".join(repr(k) for k in sorted(MECHANISMS))
        raise ValueError(f"mechanism must be one of {opts}, got mechanism={mechanism!r}.")
    cls = MECHANISMS[mechanism]
    allowed = cls.parameter_names()
    if name not in allowed:
        raise ValueError(
            f"mechanism {mechanism!r} does not take {_user_terms([name])}; it takes "
            f"{', '.join(allowed)}."
        )
    hint = typing.get_type_hints(cls.__init__).get(name, str)
    options = (
        typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, _UnionType) else (hint,)
    )
    if type(None) in options and text.strip().lower() == "none":
        return None
    wanted = [t for t in options if t is not type(None)]
    for t in wanted:
        try:
            return _convert(t, text)
        except ValueError:
            continue
    names = " or ".join(_type_name(t) for t in wanted)
    raise ValueError(
        f"mechanism {mechanism!r}: {name} (-p {name}=...) must be {names}, got {text!r}."
    )


def _type_name(t: Any) -> str:
    if typing.get_origin(t) is typing.Literal:
        return "one of " + ", ".join(repr(v) for v in typing.get_args(t))
    name = getattr(t, "__name__", str(t))
    return ("an " if name[:1] in "aeiou" else "a ") + name


def _convert(t: Any, text: str) -> Any:
    if typing.get_origin(t) is typing.Literal:
        for v in typing.get_args(t):
            if str(v) == text:
                return v
        raise ValueError(text)
    if t is bool:
        low = text.strip().lower()
        if low in ("true", "1", "yes"):
            return True
        if low in ("false", "0", "no"):
            return False
        raise ValueError(text)
    if t is int:
        return int(text)
    if t is float:
        return float(text)
    if t is str:
        return text
    return text  # arrays and paths: build_mechanism loads them from the text


def get_mechanism(name: str, **params: Any) -> Mechanism:
    """Alias of :func:`build_mechanism` (kept for existing code)."""
    return build_mechanism(name, **params)
