"""Server configuration: a TOML file, validated completely before anything starts.

The file has four kinds of tables (``examples/serve.toml`` is a commented example; the full
reference is in ``docs/server.md``)::

    [server]            listen address, secret key, ledger, limits, batching
    [backends.NAME]     an embedding backend: type = "local" (sentence-transformers) or
                        "upstream" (an OpenAI-compatible endpoint)
    [models.NAME]       a model name clients ask for: backend, role, mechanism + params
    [[api_keys]]        API keys (SHA-256 of the key, never the key), allowed models, rate limit

Every problem is reported as a :class:`ConfigError` naming the file, the table and the key,
e.g. ``serve.toml: [models.docs] params: epsilon must be > 0, got epsilon=-1.``; unknown keys
are errors (a typo must not silently fall back to a default). Relative paths are resolved
against the configuration file's folder.

Examples
--------
>>> cfg = config_from_dict({
...     "server": {"key_file": None, "allow_unauthenticated": True},
...     "models": {"docs": {"mechanism": "gaussian", "params": {"epsilon": 8, "delta": 1e-5}}},
... }, key=bytes(32))
>>> m = cfg.models["docs"]
>>> (m.role, m.backend, m.mechanism_name, m.default_dim)
('documents', 'local', 'gaussian', None)
>>> config_from_dict({"models": {"docs": {"mechanism": "gausian"}}}, key=bytes(32))
Traceback (most recent call last):
...
privembed.server.errors.ConfigError: <config>: [models.docs] mechanism: mechanism must be one of 'empirical', 'gaussian', 'laplace', 'mahalanobis', 'projection', 'purkayastha', got mechanism='gausian'.
"""

from __future__ import annotations

import ipaddress
import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..mechanisms import MECHANISMS, Mechanism, build_mechanism
from .errors import ConfigError

__all__ = [
    "ApiKeyConfig",
    "BackendConfig",
    "ModelConfig",
    "ServeConfig",
    "ServerSettings",
    "config_from_dict",
    "load_config",
]

ROLES = ("documents", "queries")
QUERY_TREATMENTS = ("auto", "none", "project", "protect")
DEFAULT_BACKEND = "local"


@dataclass(frozen=True)
class ServerSettings:
    """The ``[server]`` table (see ``docs/server.md`` for every key)."""

    host: str = "127.0.0.1"
    port: int = 8000
    key_file: Path | None = None
    noise: str = "keyed"
    ledger: Path | None = None
    budget_epsilon: float | None = None
    budget_delta: float | None = None
    max_inputs: int = 256
    max_input_chars: int = 8192
    max_body_bytes: int = 4 * 1024 * 1024
    max_batch: int = 64
    max_wait_ms: float = 2.0
    max_queue: int = 4096
    request_timeout_s: float = 60.0
    cache_size: int = 4096
    allow_unauthenticated: bool = False
    metrics_require_auth: bool = True
    forwarded_allow_ips: str = "127.0.0.1"
    max_connections: int | None = None
    graceful_shutdown_s: float = 30.0
    log_level: str = "info"
    #: identity of a text: NFKC + collapsed whitespace, and case-folded when true
    casefold: bool = True
    #: header naming the subject (user, client) a request is charged to; the request's
    #: ``user`` field takes precedence; without either, the API key's name is the subject
    subject_header: str = "X-Privembed-Subject"
    subject_budget_epsilon: float | None = None
    subject_budget_delta: float | None = None
    #: seconds a request waits for another process's ledger lock before 503 + Retry-After
    ledger_timeout_s: float = 2.0
    #: keyed noise generator: "philox", or "aes" (AES-128 counter mode, a CSPRNG)
    generator: str = "philox"


#: SHA-256 of API keys printed in privembed's own documentation and examples: a
#: configuration that lists one is refused (anyone who read the docs holds that key)
DOCUMENTED_EXAMPLE_KEY_HASHES = frozenset(
    {
        "e10e3e7a65877d10c84c3cc1a292da3b1d9ffe749e1f9c4cc7d26ccdf33281f3",  # pe-example-do-not-use
    }
)


@dataclass(frozen=True)
class BackendConfig:
    """One ``[backends.NAME]`` table."""

    name: str
    type: str  # "local" | "upstream"
    model: str | None = None
    # local
    device: str = "cpu"
    batch_size: int = 64
    threads: int | None = None  # torch intra-op threads (None: torch's default)
    # upstream
    base_url: str | None = None
    api_key_env: str | None = None
    timeout_s: float = 30.0
    max_concurrency: int = 1
    encoding_format: str = "base64"
    dimensions: int | None = None

    @property
    def identity(self) -> str:
        """What determines the clean vectors (enters the per-backend noise key, never secret)."""
        if self.type == "local":
            from ..embedders import DEFAULT_MODEL

            return f"local|{self.model or DEFAULT_MODEL}"
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
        mech = self.mechanism(None)
        if self.treatment == "protect" and mech is not None:
            return mech.guarantee.describe()
        if self.treatment == "project":
            return "query side: public projection without noise (no privacy guarantee)"
        return "query side: clean vector (no privacy guarantee)"


@dataclass(frozen=True)
class ApiKeyConfig:
    """One ``[[api_keys]]`` entry: the SHA-256 of a key, never the key itself."""

    name: str
    sha256: str
    models: tuple[str, ...] = ("*",)
    rate_limit: float | None = None  # requests per minute
    burst: int | None = None

    def allows(self, model: str) -> bool:
        return "*" in self.models or model in self.models


@dataclass(frozen=True)
class ServeConfig:
    """A complete, validated server configuration."""

    server: ServerSettings
    backends: dict[str, BackendConfig]
    models: dict[str, ModelConfig]
    api_keys: tuple[ApiKeyConfig, ...]
    key: bytes = field(repr=False)
    source: str = "<config>"


# ---- parsing helpers -----------------------------------------------------------------------

_SERVER_KEYS = {f for f in ServerSettings.__dataclass_fields__}
_BACKEND_KEYS = {
    "local": {"type", "model", "device", "batch_size", "threads"},
    "upstream": {
        "type",
        "model",
        "base_url",
        "api_key_env",
        "timeout_s",
        "max_concurrency",
        "encoding_format",
        "dimensions",
    },
}
_MODEL_KEYS = {"backend", "role", "mechanism", "params", "dimensions", "documents", "query"}
_KEY_KEYS = {"name", "sha256", "models", "rate_limit", "burst"}


class _Ctx:
    def __init__(self, source: str, base_dir: Path | None) -> None:
        self.source = source
        self.base_dir = base_dir

    def fail(self, where: str, msg: str) -> ConfigError:
        return ConfigError(f"{self.source}: {where} {msg}" if where else f"{self.source}: {msg}")

    def path(self, value: Any, where: str, key: str) -> Path:
        if not isinstance(value, str) or not value:
            raise self.fail(where, f"{key} must be a path string, got {key}={value!r}.")
        p = Path(value).expanduser()
        if not p.is_absolute() and self.base_dir is not None:
            p = self.base_dir / p
        return p


def _check_keys(ctx: _Ctx, where: str, table: Any, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(table, Mapping):
        raise ctx.fail(where, f"must be a table, got {type(table).__name__}.")
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise ctx.fail(
            where,
            f"unknown key(s) {', '.join(map(repr, unknown))}; allowed: "
            f"{', '.join(sorted(allowed))}.",
        )
    return dict(table)


def _typed(ctx: _Ctx, where: str, key: str, value: Any, kind: type | tuple[type, ...]) -> Any:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
    if not ok:
        names = " or ".join(k.__name__ for k in kinds)
        raise ctx.fail(where, f"{key} must be {names}, got {key}={value!r}.")
    return value


def _positive(ctx: _Ctx, where: str, key: str, value: Any, *, integer: bool) -> Any:
    _typed(ctx, where, key, value, int if integer else (int, float))
    if not (value > 0) or (isinstance(value, float) and math.isinf(value)):
        raise ctx.fail(where, f"{key} must be > 0, got {key}={value!r}.")
    return value


def _server(ctx: _Ctx, raw: Any) -> ServerSettings:
    where = "[server]"
    t = _check_keys(ctx, where, raw, _SERVER_KEYS)
    out: dict[str, Any] = {}
    for key, value in t.items():
        if key in ("key_file", "ledger"):
            out[key] = None if value is None else ctx.path(value, where, key)
        elif key in ("host", "forwarded_allow_ips", "log_level", "noise", "subject_header",
                     "generator"):  # fmt: skip
            out[key] = _typed(ctx, where, key, value, str)
        elif key in ("allow_unauthenticated", "metrics_require_auth", "casefold"):
            out[key] = _typed(ctx, where, key, value, bool)
        elif key in ("port",):
            _typed(ctx, where, key, value, int)
            if not 0 <= value <= 65535:
                raise ctx.fail(where, f"port must be in [0, 65535], got port={value!r}.")
            out[key] = value
        elif key in ("cache_size",):
            _typed(ctx, where, key, value, int)
            if value < 0:
                raise ctx.fail(where, f"cache_size must be >= 0, got cache_size={value!r}.")
            out[key] = value
        elif key in ("max_wait_ms",):
            _typed(ctx, where, key, value, (int, float))
            if not 0 <= value <= 1000:
                raise ctx.fail(
                    where, f"max_wait_ms must be in [0, 1000], got max_wait_ms={value!r}."
                )
            out[key] = float(value)
        elif key in (
            "budget_epsilon",
            "budget_delta",
            "subject_budget_epsilon",
            "subject_budget_delta",
            "request_timeout_s",
            "graceful_shutdown_s",
            "ledger_timeout_s",
        ):
            out[key] = float(_positive(ctx, where, key, value, integer=False))
        else:  # integer limits
            out[key] = _positive(ctx, where, key, value, integer=True)
    s = ServerSettings(**out)
    if s.noise not in ("keyed", "fresh"):
        raise ctx.fail(where, f"noise must be one of 'keyed', 'fresh', got noise={s.noise!r}.")
    if s.log_level.lower() not in ("debug", "info", "warning", "error"):
        raise ctx.fail(
            where,
            f"log_level must be one of 'debug', 'info', 'warning', 'error', got log_level={s.log_level!r}.",
        )
    for name in ("budget_delta", "subject_budget_delta"):
        v = getattr(s, name)
        if v is not None and not v < 1:
            raise ctx.fail(where, f"{name} must be < 1, got {name}={v!r}.")
    budgets = (s.budget_epsilon, s.budget_delta, s.subject_budget_epsilon, s.subject_budget_delta)
    if any(b is not None for b in budgets) and s.ledger is None:
        raise ctx.fail(where, "budgets need a ledger (set ledger = PATH).")
    if s.generator not in ("philox", "aes"):
        raise ctx.fail(
            where, f"generator must be one of 'philox', 'aes', got generator={s.generator!r}."
        )
    if not s.subject_header or any(c in s.subject_header for c in " :\r\n"):
        raise ctx.fail(where, f"subject_header is not a header name: {s.subject_header!r}.")
    if s.max_queue < s.max_inputs:
        raise ctx.fail(
            where,
            f"max_queue ({s.max_queue}) must be >= max_inputs ({s.max_inputs}), or a "
            "full-size request could never be queued.",
        )
    return s


def _backend(ctx: _Ctx, name: str, raw: Any) -> BackendConfig:
    where = f"[backends.{name}]"
    if not isinstance(raw, Mapping):
        raise ctx.fail(where, f"must be a table, got {type(raw).__name__}.")
    btype = raw.get("type")
    if btype not in _BACKEND_KEYS:
        raise ctx.fail(where, f"type must be one of 'local', 'upstream', got type={btype!r}.")
    t = _check_keys(ctx, where, raw, _BACKEND_KEYS[btype])
    out: dict[str, Any] = {"name": name, "type": btype}
    for key, value in t.items():
        if key == "type":
            continue
        if key in ("model", "device", "api_key_env", "base_url", "encoding_format"):
            out[key] = _typed(ctx, where, key, value, str)
        elif key == "timeout_s":
            out[key] = float(_positive(ctx, where, key, value, integer=False))
        else:
            out[key] = _positive(ctx, where, key, value, integer=True)
    if btype == "local":
        if "model" in out:
            from ..embedders import resolve_model

            try:
                out["model"] = resolve_model(out["model"])[0]
            except (ValueError, ImportError) as exc:
                raise ctx.fail(where, f"model: {exc}") from None
        return BackendConfig(**out)
    out.setdefault("max_concurrency", 4)
    b = BackendConfig(**out)
    if not b.base_url:
        raise ctx.fail(where, "base_url is required for an upstream backend.")
    parts = urlsplit(b.base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ctx.fail(where, f"base_url must be an http(s) URL, got base_url={b.base_url!r}.")
    if parts.username or parts.password:
        raise ctx.fail(where, "base_url must not contain credentials; use api_key_env.")
    if not b.model:
        raise ctx.fail(where, "model (the upstream model name) is required.")
    if b.encoding_format not in ("base64", "float"):
        raise ctx.fail(
            where,
            f"encoding_format must be one of 'base64', 'float', got encoding_format={b.encoding_format!r}.",
        )
    return b


def _load_array(ctx: _Ctx, where: str, key: str, value: Any) -> Any:
    p = ctx.path(value, where, f"params.{key}")
    if not p.exists():
        raise ctx.fail(where, f"params.{key}: file not found: {p}")
    return p


def _build_mechanisms(
    ctx: _Ctx, where: str, name: str, params: dict[str, Any], dimensions: Any
) -> dict[int | None, Mechanism]:
    params = dict(params)
    cls = MECHANISMS.get(name)
    for key in cls.array_params if cls is not None else ():
        if isinstance(params.get(key), str):  # a file next to the configuration
            params[key] = _load_array(ctx, where, key, params[key])
    try:
        base = build_mechanism(name, **params)
    except ConfigError:
        raise
    except (ValueError, TypeError, OSError) as exc:
        key = "mechanism" if "mechanism must be one of" in str(exc) else "params"
        raise ctx.fail(where, f"{key}: {exc}") from None
    mechs: dict[int | None, Mechanism] = {None: base}
    dim_param = base.output_dim_param
    if dim_param is not None:
        mechs[int(base.params[dim_param])] = base
    if dimensions is None:
        return mechs
    if dim_param is None:
        raise ctx.fail(
            where,
            f"dimensions: only a mechanism with an output-dimension parameter (projection's k) "
            f"can release other dimensions; mechanism {name!r} keeps the backend's dimension.",
        )
    if not isinstance(dimensions, list) or not dimensions:
        raise ctx.fail(
            where, f"dimensions must be a non-empty list of integers, got {dimensions!r}."
        )
    for k in dimensions:
        _positive(ctx, where, "dimensions[]", k, integer=True)
        if k == base.params[dim_param]:
            continue
        try:
            mechs[k] = build_mechanism(name, **{**params, dim_param: k})
        except (ValueError, TypeError) as exc:
            raise ctx.fail(where, f"dimensions: {dim_param}={k}: {exc}") from None
    return mechs


def _model(ctx: _Ctx, name: str, raw: Any, backends: dict[str, BackendConfig]) -> dict[str, Any]:
    """First pass: the table's own fields (query models are resolved in a second pass)."""
    where = f"[models.{name}]"
    t = _check_keys(ctx, where, raw, _MODEL_KEYS)
    role = t.get("role", "documents")
    if role not in ROLES:
        raise ctx.fail(where, f"role must be one of 'documents', 'queries', got role={role!r}.")
    backend = t.get("backend")
    if backend is not None:
        _typed(ctx, where, "backend", backend, str)
        if backend not in backends and backend != DEFAULT_BACKEND:
            known = ", ".join(repr(b) for b in sorted(backends)) or "none"
            raise ctx.fail(where, f"backend {backend!r} is not defined (backends: {known}).")
    params = t.get("params", {})
    if not isinstance(params, Mapping):
        raise ctx.fail(where, f"params must be a table, got params={params!r}.")
    mech_name = t.get("mechanism")
    if mech_name is not None:
        _typed(ctx, where, "mechanism", mech_name, str)
    elif params or "dimensions" in t:
        raise ctx.fail(where, "params/dimensions given without a mechanism.")
    if role == "documents":
        for key in ("documents", "query"):
            if key in t:
                raise ctx.fail(where, f"{key} is only for role = 'queries'.")
        if mech_name is None:
            raise ctx.fail(
                where,
                "mechanism is required for role = 'documents' (documents are always protected).",
            )
    mechs = (
        _build_mechanisms(ctx, where, mech_name, dict(params), t.get("dimensions"))
        if mech_name is not None
        else {}
    )
    return {
        "name": name,
        "backend": backend,
        "role": role,
        "mechanism_name": mech_name,
        "mechanisms": mechs,
        "documents": t.get("documents"),
        "query": t.get("query", "auto"),
    }


def _resolve_query(ctx: _Ctx, m: dict[str, Any], firsts: dict[str, dict[str, Any]]) -> ModelConfig:
    where = f"[models.{m['name']}]"
    doc_name = m["documents"]
    if doc_name is None:
        raise ctx.fail(where, "documents (the documents model these queries search) is required.")
    _typed(ctx, where, "documents", doc_name, str)
    doc = firsts.get(doc_name)
    if doc is None or doc["role"] != "documents":
        raise ctx.fail(where, f"documents = {doc_name!r} is not a documents model.")
    query = m["query"]
    if query not in QUERY_TREATMENTS:
        opts = ", ".join(map(repr, QUERY_TREATMENTS))
        raise ctx.fail(where, f"query must be one of {opts}, got query={query!r}.")
    backend = m["backend"] or doc["backend"] or DEFAULT_BACKEND
    if backend != (doc["backend"] or DEFAULT_BACKEND):
        raise ctx.fail(
            where,
            f"backend {backend!r} differs from the documents model's "
            f"({doc['backend'] or DEFAULT_BACKEND!r}): queries must be embedded in the same space.",
        )
    doc_mechs: dict[int | None, Mechanism] = doc["mechanisms"]
    doc_base = doc_mechs[None]
    projected = doc_base.has_public_transform
    if m["mechanisms"]:
        if query not in ("auto", "protect"):
            raise ctx.fail(
                where, f"a mechanism is given, so query must be 'protect', got {query!r}."
            )
        query = "protect"
        own = m["mechanisms"]
        if projected:
            q = own[None]
            same = (
                q.name == doc_base.name and q.public_transform_key == doc_base.public_transform_key
            )
            if not same or set(own) != set(doc_mechs):
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
                f"query = 'project' needs a projection documents model; {doc_name!r} uses "
                f"{doc['mechanism_name']!r} (use 'none' or 'protect').",
            )
        if query == "none" and projected:
            raise ctx.fail(
                where,
                f"query = 'none' would give backend-dimension vectors but {doc_name!r} "
                "releases projected ones; use 'project' (the same public projection) or 'protect'.",
            )
        mechs = doc_mechs if query in ("protect", "project") else {}
    return ModelConfig(
        name=m["name"],
        backend=backend,
        role="queries",
        treatment=query,
        mechanism_name=doc["mechanism_name"] if not m["mechanisms"] else m["mechanism_name"],
        mechanisms=mechs,
        documents=doc_name,
    )


def _api_key(ctx: _Ctx, i: int, raw: Any, models: dict[str, ModelConfig]) -> ApiKeyConfig:
    where = f"[[api_keys]] #{i + 1}"
    t = _check_keys(ctx, where, raw, _KEY_KEYS)
    name = t.get("name", f"key-{i + 1}")
    _typed(ctx, where, "name", name, str)
    digest = t.get("sha256")
    if not isinstance(digest, str) or len(digest) != 64:
        raise ctx.fail(
            where,
            "sha256 must be the 64-hex-digit SHA-256 of the key (privembed serve --new-api-key "
            "prints one); the key itself never goes in the file.",
        )
    try:
        bytes.fromhex(digest)
    except ValueError:
        raise ctx.fail(where, "sha256 must be hexadecimal.") from None
    if digest.lower() in DOCUMENTED_EXAMPLE_KEY_HASHES:
        raise ctx.fail(
            where,
            "sha256 is the hash of a key printed in privembed's documentation (anyone can use "
            "it); create your own with privembed serve --new-api-key.",
        )
    allowed = t.get("models", ["*"])
    if not isinstance(allowed, list) or not all(isinstance(x, str) for x in allowed):
        raise ctx.fail(where, f"models must be a list of model names, got models={allowed!r}.")
    unknown = [x for x in allowed if x != "*" and x not in models]
    if unknown:
        raise ctx.fail(where, f"models: unknown model(s) {', '.join(map(repr, unknown))}.")
    rate = t.get("rate_limit")
    if rate is not None:
        rate = float(_positive(ctx, where, "rate_limit", rate, integer=False))
    burst = t.get("burst")
    if burst is not None:
        _positive(ctx, where, "burst", burst, integer=True)
        if rate is None:
            raise ctx.fail(where, "burst needs rate_limit.")
    return ApiKeyConfig(name, digest.lower(), tuple(allowed), rate, burst)


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

    Raises
    ------
    ConfigError
        Anything invalid, with the file, table and key named.
    """
    ctx = _Ctx(source, Path(base_dir) if base_dir is not None else None)
    top = _check_keys(ctx, "", data, {"server", "backends", "models", "api_keys"})
    server = _server(ctx, top.get("server", {}))

    raw_backends = top.get("backends", {})
    if not isinstance(raw_backends, Mapping):
        raise ctx.fail("[backends]", "must be a table of backend tables.")
    backends = {n: _backend(ctx, n, b) for n, b in raw_backends.items()}
    if DEFAULT_BACKEND not in backends:
        backends[DEFAULT_BACKEND] = BackendConfig(name=DEFAULT_BACKEND, type="local")

    raw_models = top.get("models", {})
    if not isinstance(raw_models, Mapping) or not raw_models:
        raise ctx.fail("[models]", "at least one [models.NAME] table is required.")
    firsts = {n: _model(ctx, n, m, backends) for n, m in raw_models.items()}
    models: dict[str, ModelConfig] = {}
    for n, m in firsts.items():
        if m["role"] == "documents":
            models[n] = ModelConfig(
                name=n,
                backend=m["backend"] or DEFAULT_BACKEND,
                role="documents",
                treatment="protect",
                mechanism_name=m["mechanism_name"],
                mechanisms=m["mechanisms"],
            )
    for n, m in firsts.items():
        if m["role"] == "queries":
            models[n] = _resolve_query(ctx, m, firsts)
    models = {n: models[n] for n in raw_models}  # keep the file's order
    used = {m.backend for m in models.values()}
    backends = {n: b for n, b in backends.items() if n in used}

    raw_keys = top.get("api_keys", [])
    if not isinstance(raw_keys, list):
        raise ctx.fail("[[api_keys]]", "must be an array of tables ([[api_keys]]).")
    api_keys = tuple(_api_key(ctx, i, k, models) for i, k in enumerate(raw_keys))
    names = [k.name for k in api_keys]
    if len(set(names)) != len(names):
        raise ctx.fail("[[api_keys]]", "names must be unique.")
    if len({k.sha256 for k in api_keys}) != len(api_keys):
        raise ctx.fail("[[api_keys]]", "the same key hash appears twice.")
    if not api_keys and not server.allow_unauthenticated:
        raise ctx.fail(
            "[server]",
            "no [[api_keys]] configured; add one (privembed serve --new-api-key) or set "
            "allow_unauthenticated = true (loopback development only).",
        )
    if server.allow_unauthenticated and not _is_loopback(server.host):
        raise ctx.fail(
            "[server]",
            f"allow_unauthenticated = true is only allowed on a loopback host, got host={server.host!r}.",
        )

    if key is None:
        if server.key_file is None:
            raise ctx.fail(
                "[server]",
                "key_file is required: the secret key derives the record id of each text and "
                "the keyed noise (create one with: privembed keygen -o serve.key).",
            )
        from ..keyed import load_key

        try:
            key = load_key(server.key_file)
        except (OSError, ValueError) as exc:
            raise ctx.fail("[server]", f"key_file: {exc}") from None
    else:
        from ..keyed import key_id

        try:
            key_id(key)
        except (TypeError, ValueError) as exc:
            raise ctx.fail("[server]", f"key: {exc}") from None
    return ServeConfig(
        server=server,
        backends=backends,
        models=models,
        api_keys=api_keys,
        key=bytes(key),
        source=source,
    )


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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
