"""The rules of a release, written once: what describes a protection in file metadata, refusing
input that is already protected, a key or a seed (never both), ids derived from content (keyed
only), what one release charges, and the one way a front end opens its ledger."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..core.accounting import Cost, MetricDP, PureDP, cost_of
from ..core.rng import bit_generator_name
from ..keys.keyed import content_ids as _keyed_content_ids
from ..keys.keyed import resolve_key
from ..keys.ledger import Ledger, ledger_for_command
from ..mechanisms.base import Mechanism

#: the entries of file metadata that describe a protection
PROTECTION_KEYS = (
    "protected",
    "privembed_version",
    "mechanism",
    "guarantee",
    "guarantee_text",
    "randomness",
    "key_id",
    "keyed_generator",
    "projection",
    "previous_protection",
)


#: bit generators of :mod:`privembed.core.rng` that are cryptographic: keyed noise then uses AES
_CSPRNGS = ("aes", "chacha")


def default_keyed_generator() -> str:
    """``"aes"`` when the randomness policy is a CSPRNG (:func:`privembed.core.rng.set_bit_generator`),
    else ``"philox"``: the CSPRNG choice reaches keyed noise too."""
    return "aes" if bit_generator_name() in _CSPRNGS else "philox"


def content_ids(*, key: Any, texts: Sequence[str] | None = None, X: Any = None) -> list[str]:
    """Record ids derived from content, for inputs that carry none (explicit opt-in).

    Keyed (:func:`privembed.keys.keyed.content_ids`): ``"cid:"`` and 128 bits of an HMAC of the
    canonical text, or of the canonical float32 row, under the release key. Equal contents get
    equal ids (and, keyed, identical releases); without the key the ids say nothing about the
    content. There is no unkeyed form: a plain digest of a text published as its id lets
    whoever holds the store and candidate texts confirm each one exactly, whatever epsilon is.

    Raises
    ------
    ValueError
        No key (content-derived ids need keyed noise: ``--key-file``).

    Examples
    --------
    >>> content_ids(key=bytes(32), texts=["a"])[0][:4]
    'cid:'
    >>> content_ids(key=None, texts=["a"])
    Traceback (most recent call last):
    ...
    ValueError: ids derived from the content need a key (--key-file): an unkeyed digest of a text, published as its id, lets whoever holds candidate texts confirm each one.
    """
    if key is None:
        raise ValueError(
            "ids derived from the content need a key (--key-file): an unkeyed digest of a text, "
            "published as its id, lets whoever holds candidate texts confirm each one."
        )
    k = resolve_key(key)
    if texts is not None:
        return _keyed_content_ids(k, texts=texts)
    if X is None:
        raise ValueError("give texts or X.")
    return _keyed_content_ids(k, X=X)


def refuse_protected(
    metadata: dict[str, Any],
    source: Any,
    *,
    allow: bool = False,
    hint: str = "pass --allow-reprotect to protect it again (the guarantees compose)",
) -> None:
    """The one rule on protected inputs: a file whose metadata says it holds protected vectors
    is refused unless ``allow`` -- protecting it again composes two guarantees silently, and
    measuring it as if it were clean (``evaluate``, ``advise``) reports the utility and the
    attacks of the wrong vectors. ``hint`` says what to do instead.

    Examples
    --------
    >>> refuse_protected({"protected": False}, "x.npy")
    >>> refuse_protected({"protected": True, "guarantee_text": "10-LDP"}, "p.npy")
    Traceback (most recent call last):
    ...
    ValueError: p.npy is already protected (10-LDP); pass --allow-reprotect to protect it again (the guarantees compose).
    """
    if metadata.get("protected") and not allow:
        raise ValueError(
            f"{source} is already protected ({metadata.get('guarantee_text', 'unknown mechanism')}"
            f"); {hint}."
        )


def release_metadata(meta_in: Mapping[str, Any], protection: Mapping[str, Any]) -> dict[str, Any]:
    """File metadata of a release: the input's own entries without those of any earlier
    protection (:data:`PROTECTION_KEYS`: an earlier key id or projection must not describe this
    release), then this release's ``protection``, and ``previous_protection`` (mechanism and
    guarantee) when the input was already protected.

    Examples
    --------
    >>> old = {"source": "notes", "protected": True, "mechanism": "laplace", "key_id": "k1"}
    >>> out = release_metadata(old, {"protected": True, "mechanism": "gaussian"})
    >>> sorted(out), out["previous_protection"]
    (['mechanism', 'previous_protection', 'protected', 'source'], {'mechanism': 'laplace'})
    """
    out = {k: v for k, v in meta_in.items() if k not in PROTECTION_KEYS}
    out.update(protection)
    if meta_in.get("protected"):
        out["previous_protection"] = {
            k: meta_in[k] for k in ("mechanism", "guarantee") if k in meta_in
        }
    return out


def check_randomness(
    key: Any,
    rng: Any,
    *,
    ledger: Any = None,
    key_name: str = "key",
    rng_name: str = "seed",
    ledger_name: str = "--ledger",
) -> None:
    """The one rule on a release's randomness: a key (keyed noise, deterministic per record) or
    a seed (reproducible experiments), never both -- a seed would silently lose to the key or
    the key to the seed -- and never a seed with a ``ledger``.

    Seeded noise is a function of the seed and the row's place, not of the record's content:
    an edited record released again at its place gets the *same* noise, so the difference of
    the two outputs is exactly the clean difference, while the ledger would compose them as two
    independent releases -- an account that promises what the noise does not give. Releases
    the ledger records use keyed noise (content-bound) or fresh noise. Front ends call this to
    refuse before anything is read or written; :class:`Release` does too.

    Examples
    --------
    >>> check_randomness(None, 3)
    >>> check_randomness(b"k" * 32, 3, key_name="--key-file", rng_name="--seed")
    Traceback (most recent call last):
    ...
    ValueError: give --seed or --key-file, not both (keyed noise is deterministic).
    >>> check_randomness(None, 3, ledger="l.db", rng_name="--seed")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: --seed cannot be used with --ledger: a seed repeats the noise of a row ...
    """
    if key is not None and rng is not None:
        raise ValueError(f"give {rng_name} or {key_name}, not both (keyed noise is deterministic).")
    if ledger is not None and rng is not None:
        raise ValueError(
            f"{rng_name} cannot be used with {ledger_name}: a seed repeats the noise of a row "
            "whatever its content, so an edited record released again gets the same noise and "
            "the difference of the two releases is the clean difference, which the ledger "
            "would charge as two independent releases; use a key (--key-file) or fresh noise "
            "(no seed) for releases the ledger records."
        )


def charge_text(mechanism: Mechanism, cost: Cost | None = None) -> str:
    """What one release charges per record, in words, at the point of use (``cost``: the
    mechanism's :func:`~privembed.core.accounting.cost_of` where the caller has it already --
    the ledger's staged release -- so a release accounts its guarantee once).

    Examples
    --------
    >>> from privembed import LaplaceMechanism
    >>> charge_text(LaplaceMechanism(epsilon=50.0))
    'charged 100-LDP per record (50-d_X per unit of l2 distance on unit vectors: any two differ by at most 2)'
    """
    g = mechanism.guarantee
    try:
        c = cost_of(g) if cost is None else cost
    except ValueError as exc:
        return f"not chargeable: {exc}"
    if c.noise_multiplier is not None:
        return (
            f"charged as Gaussian noise with multiplier {c.noise_multiplier:.4g} per record "
            f"({g.short()}; repeated releases compose by the PLD accountant)"
        )
    if isinstance(g, MetricDP):
        pure = next(x for x in g.implied if isinstance(x, PureDP))
        factor = pure.epsilon / g.epsilon if g.epsilon else math.inf
        return (
            f"charged {pure.epsilon:.4g}-LDP per record ({g.epsilon:.4g}-d_X per unit of "
            f"{g.metric_name} distance on unit vectors: any two differ by at most "
            f"{factor:.4g})"
        )
    return f"charged {g.short()} per record"


@contextlib.contextmanager
def open_ledger(
    path: str | Path | Ledger | None,
    *,
    budget_epsilon: float | None = None,
    budget_delta: float | None = None,
    subject_budget: tuple[float | None, float | None] = (None, None),
    on_wait: Callable[[Path], None] | None = None,
    timeout: float = 60.0,
) -> Iterator[Ledger | None]:
    """The one way a release path opens its privacy ledger (the CLI, the stores, shards and the
    server all come here).

    ``path`` None: no ledger, and then no budget may be given (a budget nobody enforces would be
    a false promise). A path or ``postgresql://`` URL is opened for this one use
    (:func:`privembed.keys.ledger.ledger_for_command`: a ledger file this use created is removed again
    if it fails before committing anything), an open :class:`Ledger` is used as it is.

    The budgets (``--budget-epsilon``/``--budget-delta``, ``--subject-budget-*``) may set a
    first budget or confirm or lower the stored one, never raise it (raising is ``privembed
    ledger budget --raise``). A flag that would raise it is refused here, before anything is
    read or written; a change it makes is *proposed* (a ledger opened for a command defers its
    budget changes: :meth:`Ledger.confirm_budget`, :meth:`Ledger.propose_budget`): it governs
    this command's checks at once and is written in the transaction of the first release the
    command commits. So a command that is refused (the release costs more than
    the lowered budget) or fails before it commits leaves the ledger as it was, budget
    included: a user who lowers a budget with a flag lowers it for the releases that flag came
    with, and one who is refused may retry with other settings against the budget they had.
    """
    if path is None:
        if any(b is not None for b in (budget_epsilon, budget_delta, *subject_budget)):
            raise ValueError(
                "a budget (--budget-epsilon/--budget-delta, --subject-budget-*) needs a ledger: "
                "give --ledger."
            )
        yield None
        return
    if isinstance(path, Ledger):
        path.confirm_budget(budget_epsilon, budget_delta)
        path.confirm_budget(*subject_budget, subject=True)
        yield path
        return
    with ledger_for_command(path, on_wait=on_wait, timeout=timeout) as led:
        led.confirm_budget(budget_epsilon, budget_delta)
        led.confirm_budget(*subject_budget, subject=True)
        yield led
