"""Server configuration: a TOML file, validated completely before anything starts.

The file has four kinds of tables (``examples/serve.toml`` is a commented example; the full
reference is in ``docs/server.md``)::

    [server]            listen address, secret key, ledger, limits, batching
    [backends.NAME]     an embedding backend: type = "local" (sentence-transformers / ONNX) or
                        "upstream" (an OpenAI-compatible endpoint)
    [models.NAME]       a model name clients ask for: backend, role, mechanism + params
    [[api_keys]]        API keys (SHA-256 of the key, never the key), allowed models, rate limit

Validation has two steps. pydantic models describe the file (:mod:`.config_file`) -- every
table's keys, types, defaults, ranges and choices, the rules within a table, and the references
between tables (a model's backend, a queries model's documents model, an API key's models).
Then :func:`config_from_dict` (this module) builds what needs code: the mechanisms (with their
parameter checks), each queries model's treatment and the key. Unknown keys are errors (a typo must not silently fall back
to a default), and every problem is one :class:`ConfigError` line naming the file, the table,
the key and the value, e.g. ``serve.toml: [server] max_inputs must be > 0, got max_inputs=0.``
Relative paths are resolved against the configuration file's folder.

Examples
--------
>>> cfg = config_from_dict({
...     "server": {"key_file": None, "allow_unauthenticated": True},
...     "models": {"docs": {"mechanism": "gaussian", "params": {"epsilon": 8, "delta": 1e-5}}},
... }, key=bytes(32))
>>> m = cfg.models["docs"]
>>> (m.role, m.backend, m.mechanism_name, m.default_dim)
('documents', 'local', 'gaussian', None)
>>> config_from_dict({"server": {"port": 80000}, "models": {}}, source="serve.toml")
Traceback (most recent call last):
...
privembed.server.errors.ConfigError: serve.toml: [server] port must be <= 65535, got port=80000.
>>> config_from_dict({"server": {"allow_unauthenticated": True},
...                   "models": {"docs": {"mechanism": "gausian"}}}, key=bytes(32))
Traceback (most recent call last):
...
privembed.server.errors.ConfigError: <config>: [models.docs] mechanism: mechanism must be one of 'empirical', 'gaussian', 'laplace', 'mahalanobis', 'projection', 'purkayastha', 'subspace', got mechanism='gausian'.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ..mechanisms import MECHANISMS, Mechanism, build_mechanism
from .config_file import (
    DEFAULT_BACKEND,
    RUNTIMES,
    ApiKeyConfig,
    LocalTable,
    ModelTable,
    ServerSettings,
    UpstreamTable,
    is_loopback,
    read_config_file,
)
from .errors import ConfigError

__all__ = [
    "RUNTIMES",
    "ApiKeyConfig",
    "BackendConfig",
    "ModelConfig",
    "ServeConfig",
    "ServerSettings",
    "check_bind",
    "config_from_dict",
    "load_config",
]


# ---- the resolved configuration --------------------------------------------------------------


def _default(table: type[BaseModel], key: str) -> Any:
    """The default the file's table declares for ``key`` (one declaration for both forms)."""
    return table.model_fields[key].default


@dataclass(frozen=True)
class BackendConfig:
    """One ``[backends.NAME]`` table, validated (keys of the other type keep their defaults).

    The defaults are the tables' own (:class:`LocalTable`, :class:`UpstreamTable`), read from
    them: a backend built in code gets what the same table in a file gets.
    """

    name: str
    type: str  # "local" | "upstream"
    model: str | None = None
    # local
    device: str = _default(LocalTable, "device")
    batch_size: int = _default(LocalTable, "batch_size")
    threads: int | None = _default(LocalTable, "threads")  # torch / ONNX Runtime threads
    runtime: str = _default(LocalTable, "runtime")  # privembed.data.embedders runtimes
    # upstream
    base_url: str | None = None
    api_key_env: str | None = None
    timeout_s: float = _default(UpstreamTable, "timeout_s")
    max_concurrency: int = _default(UpstreamTable, "max_concurrency")
    encoding_format: str = _default(UpstreamTable, "encoding_format")
    dimensions: int | None = None
    max_attempts: int = _default(UpstreamTable, "max_attempts")
    retry_deadline_s: float = _default(UpstreamTable, "retry_deadline_s")
    retry_backoff_s: float = _default(UpstreamTable, "retry_backoff_s")

    @property
    def identity(self) -> str:
        """What determines the clean vectors (enters the per-backend noise key, never secret).

        The int8 ONNX graph gives measurably different vectors from the fp32 model, so it is
        its own identity (independent noise); fp32 ONNX and torch agree to cosine >= 0.99999
        and share one.
        """
        if self.type == "local":
            from ..data.embedders import DEFAULT_MODEL

            suffix = "+onnx-int8" if self.runtime == "onnx-int8" else ""
            return f"local|{self.model or DEFAULT_MODEL}{suffix}"
        return f"upstream|{self.base_url}|{self.model}|{self.dimensions}"


@dataclass(frozen=True)
class ModelConfig:
    """One ``[models.NAME]`` table, resolved: its mechanism(s) are built and validated.

    Attributes
    ----------
    role : {"documents", "queries"}
    treatment : {"protect", "project", "none"}
        What happens to the clean vector: the mechanism with keyed noise (documents, and
        queries with ``query = "protect"``), the mechanism's public projection without noise
        (queries of a ``projection`` documents model), or nothing (queries of a mechanism
        that adds noise in the embedding space).
    mechanisms : dict
        The mechanism per allowed output dimension (``None``: the one dimension the mechanism
        gives). Only ``projection`` offers several (its ``k``).
    """

    name: str
    backend: str
    role: str
    treatment: str
    mechanism_name: str | None
    mechanisms: dict[int | None, Mechanism] = field(compare=False, repr=False)
    documents: str | None = None

    @property
    def default_dim(self) -> int | None:
        """Output dimension when the request gives none (``None``: the backend's)."""
        mech = self.mechanisms.get(None)
        if mech is None or mech.output_dim_param is None:
            return None
        return int(mech.params[mech.output_dim_param])

    def mechanism(self, dims: int | None = None) -> Mechanism | None:
        """The mechanism for an allowed ``dims`` (``None``: the default; none for clean queries)."""
        if not self.mechanisms:
            return None
        return self.mechanisms[dims]

    @property
    def allowed_dims(self) -> tuple[int, ...]:
        """Output dimensions a request may ask for, besides the default."""
        return tuple(sorted(d for d in self.mechanisms if d is not None))

    def describe(self) -> str:
        """One line: the guarantee of what this model returns."""
        mech = self.mechanism(None)
        if self.treatment == "protect" and mech is not None:
            return mech.guarantee.describe()
        if self.treatment == "project":
            return "query side: public projection without noise (no privacy guarantee)"
        return "query side: clean vector (no privacy guarantee)"


@dataclass(frozen=True)
class ServeConfig:
    """A complete, validated server configuration."""

    server: ServerSettings
    backends: dict[str, BackendConfig]
    models: dict[str, ModelConfig]
    api_keys: tuple[ApiKeyConfig, ...]
    key: bytes = field(repr=False)
    source: str = "<config>"


# ---- resolution ------------------------------------------------------------------------------


class _Ctx:
    def __init__(self, source: str, base_dir: Path | None) -> None:
        self.source = source
        self.base_dir = base_dir

    def fail(self, where: str, msg: str) -> ConfigError:
        return ConfigError(f"{self.source}: {where} {msg}" if where else f"{self.source}: {msg}")


def _array_file(ctx: _Ctx, where: str, key: str, value: str) -> Path:
    p = Path(value).expanduser()
    if not p.is_absolute() and ctx.base_dir is not None:
        p = ctx.base_dir / p
    if not p.exists():
        raise ctx.fail(where, f"params.{key}: file not found: {p}")
    return p


def _build_mechanisms(ctx: _Ctx, where: str, table: ModelTable) -> dict[int | None, Mechanism]:
    """The mechanism per allowed output dimension (``None``: the default one)."""
    name = table.mechanism
    assert name is not None
    params = dict(table.params)
    cls = MECHANISMS.get(name)
    for key in cls.array_params if cls is not None else ():
        if isinstance(params.get(key), str):  # a file next to the configuration
            params[key] = _array_file(ctx, where, key, params[key])
    try:
        base = build_mechanism(name, **params)
    except (ValueError, TypeError, OSError) as exc:
        key = "mechanism" if "mechanism must be one of" in str(exc) else "params"
        raise ctx.fail(where, f"{key}: {exc}") from None
    mechs: dict[int | None, Mechanism] = {None: base}
    dim_param = base.output_dim_param
    if dim_param is not None:
        mechs[int(base.params[dim_param])] = base
    if table.dimensions is None:
        return mechs
    if dim_param is None:
        raise ctx.fail(
            where,
            f"dimensions: only a mechanism with an output-dimension parameter (projection's k) "
            f"can release other dimensions; mechanism {name!r} keeps the backend's dimension.",
        )
    for k in table.dimensions:
        if k == base.params[dim_param]:
            continue
        try:
            mechs[k] = build_mechanism(name, **{**params, dim_param: k})
        except (ValueError, TypeError) as exc:
            raise ctx.fail(where, f"dimensions: {dim_param}={k}: {exc}") from None
    return mechs


def _documents_model(
    name: str, table: ModelTable, mechs: dict[int | None, Mechanism]
) -> ModelConfig:
    return ModelConfig(
        name=name,
        backend=table.backend or DEFAULT_BACKEND,
        role="documents",
        treatment="protect",
        mechanism_name=table.mechanism,
        mechanisms=mechs,
    )


def _queries_model(
    ctx: _Ctx,
    name: str,
    table: ModelTable,
    own: dict[int | None, Mechanism],
    doc: ModelConfig,
) -> ModelConfig:
    """A queries model: its backend and treatment follow from its documents model."""
    where = f"[models.{name}]"
    backend = table.backend or doc.backend
    if backend != doc.backend:
        raise ctx.fail(
            where,
            f"backend {backend!r} differs from the documents model's ({doc.backend!r}): "
            "queries must be embedded in the same space.",
        )
    doc_base = doc.mechanisms[None]
    projected = doc_base.has_public_transform
    query = table.query
    if own:
        if query not in ("auto", "protect"):
            raise ctx.fail(
                where, f"a mechanism is given, so query must be 'protect', got {query!r}."
            )
        query = "protect"
        if projected:
            q = own[None]
            same = (
                q.name == doc_base.name and q.public_transform_key == doc_base.public_transform_key
            )
            if not same or set(own) != set(doc.mechanisms):
                raise ctx.fail(
                    where,
                    "a query mechanism for a projection documents model must be 'projection' "
                    "with the same kind, projection_seed and dimensions (the same public P).",
                )
        mechs = own
    else:
        if query == "auto":
            query = "project" if projected else "none"
        if query == "project" and not projected:
            raise ctx.fail(
                where,
                f"query = 'project' needs a projection documents model; {doc.name!r} uses "
                f"{doc.mechanism_name!r} (use 'none' or 'protect').",
            )
        if query == "none" and projected:
            raise ctx.fail(
                where,
                f"query = 'none' would give backend-dimension vectors but {doc.name!r} "
                "releases projected ones; use 'project' (the same public projection) or 'protect'.",
            )
        mechs = doc.mechanisms if query in ("protect", "project") else {}
    return ModelConfig(
        name=name,
        backend=backend,
        role="queries",
        treatment=query,
        mechanism_name=table.mechanism if own else doc.mechanism_name,
        mechanisms=mechs,
        documents=doc.name,
    )


def _load_key(ctx: _Ctx, server: ServerSettings, key: bytes | None) -> bytes:
    if key is None:
        if server.key_file is None:
            raise ctx.fail(
                "[server]",
                "key_file is required: the secret key derives the record id of each text and "
                "the keyed noise (create one with: privembed keygen -o serve.key).",
            )
        from ..keys.keyed import load_key

        try:
            return bytes(load_key(server.key_file))
        except (OSError, ValueError) as exc:
            raise ctx.fail("[server]", f"key_file: {exc}") from None
    from ..keys.keyed import key_id

    try:
        key_id(key)
    except (TypeError, ValueError) as exc:
        raise ctx.fail("[server]", f"key: {exc}") from None
    return bytes(key)


def config_from_dict(
    data: Mapping[str, Any],
    *,
    base_dir: str | Path | None = None,
    source: str = "<config>",
    key: bytes | None = None,
) -> ServeConfig:
    """Validate a configuration given as a dict (the parsed TOML).

    Parameters
    ----------
    data : mapping
        Tables ``server``, ``backends``, ``models``, ``api_keys``.
    base_dir : path, optional
        Folder that relative paths are resolved against.
    source : str
        Name used in error messages.
    key : bytes, optional
        The secret key, instead of ``server.key_file`` (for tests and embedding in other code).

    Returns
    -------
    ServeConfig
        Models in the file's order; only the backends that a model uses.

    Raises
    ------
    ConfigError
        Anything invalid: one line with the file, table, key and value.
    """
    ctx = _Ctx(source, Path(base_dir) if base_dir is not None else None)
    raw = read_config_file(data, base_dir=ctx.base_dir, source=source)

    backends = {n: BackendConfig(name=n, **t.model_dump()) for n, t in raw.backends.items()}
    backends.setdefault(DEFAULT_BACKEND, BackendConfig(name=DEFAULT_BACKEND, type="local"))
    own = {
        n: _build_mechanisms(ctx, f"[models.{n}]", t) if t.mechanism is not None else {}
        for n, t in raw.models.items()
    }
    docs = {
        n: _documents_model(n, t, own[n]) for n, t in raw.models.items() if t.role == "documents"
    }
    models: dict[str, ModelConfig] = {}
    for n, t in raw.models.items():  # the file's order
        if t.role == "documents":
            models[n] = docs[n]
        else:
            models[n] = _queries_model(ctx, n, t, own[n], docs[t.documents or ""])
    used = {m.backend for m in models.values()}
    api_keys = tuple(
        k if k.name else k.model_copy(update={"name": f"key-{i + 1}"})
        for i, k in enumerate(raw.api_keys)
    )
    return ServeConfig(
        server=raw.server,
        backends={n: b for n, b in backends.items() if n in used},
        models=models,
        api_keys=api_keys,
        key=_load_key(ctx, raw.server, key),
        source=source,
    )


def check_bind(settings: ServerSettings, host: str, *, source: str = "<config>") -> None:
    """Refuse to listen on ``host`` -- the address the server will actually bind, whatever
    set it (the file, ``--host``, the caller) -- if it is not loopback while
    ``allow_unauthenticated`` is on.

    Raises
    ------
    ConfigError
        One line naming the setting and the host.

    Examples
    --------
    >>> s = ServerSettings(allow_unauthenticated=True)
    >>> check_bind(s, "127.0.0.1")
    >>> check_bind(s, "0.0.0.0")
    Traceback (most recent call last):
    ...
    privembed.server.errors.ConfigError: <config>: [server] allow_unauthenticated = true is only allowed on a loopback address, got host='0.0.0.0' (the address the server would listen on).
    """
    if settings.allow_unauthenticated and not is_loopback(host):
        raise ConfigError(
            f"{source}: [server] allow_unauthenticated = true is only allowed on a loopback "
            f"address, got host={host!r} (the address the server would listen on)."
        )


def load_config(path: str | Path) -> ServeConfig:
    """Read and validate a TOML configuration file.

    Raises
    ------
    FileNotFoundError
        No such file.
    ConfigError
        Invalid TOML or an invalid setting (the message names the table and key).
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"config file not found: {p}")
    try:
        with p.open("rb") as fh:
            data = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{p}: invalid TOML: {exc}") from None
    return config_from_dict(data, base_dir=p.resolve().parent, source=str(p))
