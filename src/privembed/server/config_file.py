"""The server configuration file as written: its tables, their rules, and one line per problem.

pydantic models describe the file (``examples/serve.toml``; the reference is ``docs/server.md``):
every table's keys, types, defaults, ranges and choices, the rules within a table, and the
references between tables (a model's backend, a queries model's documents model, an API key's
models). Unknown keys are errors (a typo must not silently fall back to a default), relative
paths resolve against the file's folder, and :func:`read_config_file` turns the first problem
into one :class:`~privembed.server.errors.ConfigError` line naming the file, the table, the key
and the value. What needs code beyond the file (the mechanisms, each queries model's
treatment, the key) is built from a :class:`ConfigFile` by
:func:`privembed.server.config.config_from_dict`.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails, PydanticCustomError

from .errors import ConfigError

__all__ = [
    "DEFAULT_BACKEND",
    "DOCUMENTED_EXAMPLE_KEY_HASHES",
    "RUNTIMES",
    "ApiKeyConfig",
    "BackendTable",
    "ConfigFile",
    "LocalTable",
    "ModelTable",
    "ServerSettings",
    "UpstreamTable",
    "is_loopback",
    "read_config_file",
]

#: embedding runtimes of a local backend (``privembed.data.embedders.BACKENDS``)
RUNTIMES = ("auto", "torch", "onnx", "onnx-int8")
DEFAULT_BACKEND = "local"

#: SHA-256 of API keys printed in privembed's own documentation and examples: a
#: configuration that lists one is refused (anyone who read the docs holds that key)
DOCUMENTED_EXAMPLE_KEY_HASHES = frozenset(
    {
        "e10e3e7a65877d10c84c3cc1a292da3b1d9ffe749e1f9c4cc7d26ccdf33281f3",  # pe-example-do-not-use
    }
)


# ---- building blocks of the schema -----------------------------------------------------------

#: a table of the file: unknown keys are errors, no type coercion (TOML types are exact)
_TABLE = ConfigDict(extra="forbid", frozen=True, strict=True)


def _rule(message: str) -> PydanticCustomError:
    """A broken rule whose message names its own keys (printed after the table, as it is)."""
    return PydanticCustomError("config_rule", "{message}", {"message": message})


def _bad(what: str) -> PydanticCustomError:
    """A bad value: printed as ``KEY {what}, got KEY=VALUE.``."""
    return PydanticCustomError("config_value", "{what}", {"what": what})


def _as_path(value: Any, info: ValidationInfo) -> Any:
    """A path string, resolved against the configuration file's folder (``context``)."""
    if value is None:
        return None
    if isinstance(value, str) and value:
        value = Path(value)
    if not isinstance(value, Path):
        raise _bad("must be a path string")
    p = value.expanduser()
    base = (info.context or {}).get("base_dir")
    if not p.is_absolute() and base is not None:
        p = Path(base) / p
    return p


def _as_ledger(value: Any, info: ValidationInfo) -> Any:
    """A ledger file (a path, as :func:`_as_path`) or a ``postgresql://`` URL (kept as text)."""
    from ..keys.ledger_pg import is_postgres_url

    if is_postgres_url(value):
        return value
    return _as_path(value, info)


def _lower(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


PositiveInt = Annotated[int, Field(gt=0)]
PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Probability = Annotated[float, Field(gt=0, lt=1)]
ConfigPath = Annotated[Path, BeforeValidator(_as_path)]
#: a ledger file, or a PostgreSQL database shared by several replicas (a URL)
LedgerLocation = Annotated[Path | str, BeforeValidator(_as_ledger)]


# ---- the tables ------------------------------------------------------------------------------


class ServerSettings(BaseModel):
    """The ``[server]`` table (see ``docs/server.md`` for every key)."""

    model_config = _TABLE

    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = 8000
    key_file: ConfigPath | None = None
    noise: Literal["keyed", "fresh"] = "keyed"
    ledger: LedgerLocation | None = None
    budget_epsilon: PositiveFloat | None = None
    budget_delta: Probability | None = None
    max_inputs: PositiveInt = 256
    max_input_chars: PositiveInt = 8192
    max_body_bytes: PositiveInt = 4 * 1024 * 1024
    max_batch: PositiveInt = 64
    max_wait_ms: Annotated[float, Field(ge=0, le=1000)] = 2.0
    max_queue: PositiveInt = 4096
    request_timeout_s: PositiveFloat = 60.0
    cache_size: Annotated[int, Field(ge=0)] = 4096
    allow_unauthenticated: bool = False
    metrics_require_auth: bool = True
    forwarded_allow_ips: str = "127.0.0.1"
    max_connections: PositiveInt | None = None
    graceful_shutdown_s: PositiveFloat = 30.0
    log_level: Annotated[Literal["debug", "info", "warning", "error"], BeforeValidator(_lower)] = (
        "info"
    )
    #: identity of a text: NFKC + collapsed whitespace, and case-folded when true
    casefold: bool = True
    #: header naming the subject (user, client) a request is charged to, for keys with
    #: ``may_assert_subjects``; the request's ``user`` field takes precedence; without either,
    #: the subject is the API key itself
    subject_header: str = "X-Privembed-Subject"
    subject_budget_epsilon: PositiveFloat | None = None
    subject_budget_delta: Probability | None = None
    #: seconds a request waits for another process's ledger lock before 503 + Retry-After
    ledger_timeout_s: PositiveFloat = 2.0
    #: keyed noise generator: "philox", or "aes" (AES-128 counter mode, a CSPRNG)
    generator: Literal["philox", "aes"] = "philox"

    @field_validator("subject_header")
    @classmethod
    def _header_name(cls, value: str) -> str:
        if not value or any(c in value for c in " :\r\n"):
            raise _bad("is not a header name")
        return value

    @model_validator(mode="after")
    def _rules(self) -> ServerSettings:
        budgets = (
            self.budget_epsilon,
            self.budget_delta,
            self.subject_budget_epsilon,
            self.subject_budget_delta,
        )
        if any(b is not None for b in budgets) and self.ledger is None:
            raise _rule("budgets need a ledger (set ledger = PATH or a postgresql:// URL).")
        if self.max_queue < self.max_inputs:
            raise _rule(
                f"max_queue ({self.max_queue}) must be >= max_inputs ({self.max_inputs}), or a "
                "full-size request could never be queued."
            )
        return self


class _BackendTableBase(BaseModel):
    """What every ``[backends.NAME]`` table has besides its ``type``: the model it serves
    (a local model, or the name an upstream serves it under)."""

    model_config = _TABLE

    model: str | None = None


class LocalTable(_BackendTableBase):
    """``[backends.NAME]`` with ``type = "local"``."""

    type: Literal["local"]
    device: str = "cpu"
    batch_size: PositiveInt = 64
    threads: PositiveInt | None = None
    runtime: Literal["auto", "torch", "onnx", "onnx-int8"] = "auto"

    @field_validator("model")
    @classmethod
    def _resolve(cls, value: str | None) -> str | None:
        if value is None:
            return None
        from ..data.embedders import resolve_model

        try:
            return resolve_model(value)[0]
        except (ValueError, ImportError) as exc:
            raise _rule(f"model: {exc}") from None

    @model_validator(mode="after")
    def _rules(self) -> LocalTable:
        if self.runtime.startswith("onnx") and self.device != "cpu":
            raise _rule(
                f"runtime = {self.runtime!r} runs on the CPU, got device={self.device!r} "
                "(use runtime = 'torch' or 'auto')."
            )
        return self


class UpstreamTable(_BackendTableBase):
    """``[backends.NAME]`` with ``type = "upstream"``."""

    type: Literal["upstream"]
    base_url: str | None = None
    api_key_env: str | None = None
    timeout_s: PositiveFloat = 30.0
    max_concurrency: PositiveInt = 4
    encoding_format: Literal["base64", "float"] = "base64"
    dimensions: PositiveInt | None = None
    max_attempts: Annotated[int, Field(ge=1, le=10)] = 3
    retry_deadline_s: PositiveFloat = 10.0
    retry_backoff_s: Annotated[float, Field(ge=0, le=60, allow_inf_nan=False)] = 0.25

    @model_validator(mode="after")
    def _rules(self) -> UpstreamTable:
        if not self.base_url:
            raise _rule("base_url is required for an upstream backend.")
        parts = urlsplit(self.base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise _rule(f"base_url must be an http(s) URL, got base_url={self.base_url[:200]!r}.")
        if parts.username or parts.password:  # never echoed: it holds a secret
            raise _rule("base_url must not contain credentials; use api_key_env.")
        if not self.model:
            raise _rule("model (the upstream model name) is required.")
        return self


BackendTable = Annotated[LocalTable | UpstreamTable, Field(discriminator="type")]


class ModelTable(BaseModel):
    """One ``[models.NAME]`` table as written (resolved into a :class:`ModelConfig`)."""

    model_config = _TABLE

    backend: str | None = None
    role: Literal["documents", "queries"] = "documents"
    mechanism: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    dimensions: Annotated[list[PositiveInt], Field(min_length=1)] | None = None
    documents: str | None = None
    query: Literal["auto", "none", "project", "protect"] = "auto"

    @model_validator(mode="after")
    def _rules(self) -> ModelTable:
        if self.mechanism is None and (self.params or self.dimensions is not None):
            raise _rule("params/dimensions given without a mechanism.")
        if self.role == "documents":
            for key in ("documents", "query"):
                if key in self.model_fields_set:
                    raise _rule(f"{key} is only for role = 'queries'.")
            if self.mechanism is None:
                raise _rule(
                    "mechanism is required for role = 'documents' (documents are always protected)."
                )
        elif self.documents is None:
            raise _rule("documents (the documents model these queries search) is required.")
        return self


class ApiKeyConfig(BaseModel):
    """One ``[[api_keys]]`` entry: the SHA-256 of a key, never the key itself.

    Parameters
    ----------
    name : str
        Shown in logs; the key's subject is ``key:NAME`` (default in a file: ``key-N``). No
        ``/`` (it separates the key from the subjects it names).
    sha256 : str
        Hex SHA-256 of the key (:func:`privembed.server.hash_api_key`).
    models : tuple of str, default ("*",)
        Model names this key may use (``"*"``: all).
    rate_limit : float, optional
        Requests per minute (token bucket).
    burst : int, optional
        Bucket size (default: ``rate_limit`` rounded up).
    may_assert_subjects : bool, default False
        Whether requests with this key may name the subject they are charged to (``user`` or
        the subject header), as ``key:NAME/SUBJECT``; a key that may not is refused (403) when
        it names one. Give it to a trusted gateway that authenticates its own users.
    """

    model_config = _TABLE

    name: str = ""
    sha256: str
    models: Annotated[tuple[str, ...], Field(strict=False)] = ("*",)
    rate_limit: PositiveFloat | None = None
    burst: PositiveInt | None = None
    may_assert_subjects: bool = False

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if "/" in value:
            raise _bad("must not contain '/' (it separates a key from the subjects it names)")
        return value

    @field_validator("sha256")
    @classmethod
    def _digest(cls, value: str) -> str:
        # the value is never echoed: a pasted key instead of its hash would reach the logs
        try:
            ok = len(value) == 64 and len(bytes.fromhex(value)) == 32
        except ValueError:
            ok = False
        if not ok:
            raise _rule(
                "sha256 must be the 64-hex-digit SHA-256 of the key (privembed serve "
                "--new-api-key prints one); the key itself never goes in the file."
            )
        value = value.lower()
        if value in DOCUMENTED_EXAMPLE_KEY_HASHES:
            raise _rule(
                "sha256 is the hash of a key printed in privembed's documentation (anyone can "
                "use it); create your own with privembed serve --new-api-key."
            )
        return value

    @model_validator(mode="after")
    def _rules(self) -> ApiKeyConfig:
        if self.burst is not None and self.rate_limit is None:
            raise _rule("burst needs rate_limit.")
        return self

    def allows(self, model: str) -> bool:
        """Whether this key may use ``model``."""
        return "*" in self.models or model in self.models


class ConfigFile(BaseModel):
    """The whole file: the tables and the references between them."""

    model_config = ConfigDict(extra="forbid", strict=True)

    server: ServerSettings = Field(default_factory=ServerSettings)
    backends: dict[str, BackendTable] = Field(default_factory=dict)
    models: dict[str, ModelTable] = Field(default_factory=dict)
    api_keys: list[ApiKeyConfig] = Field(default_factory=list)

    @model_validator(mode="after")
    def _references(self) -> ConfigFile:
        if not self.models:
            raise _rule("[models] at least one [models.NAME] table is required.")
        known = set(self.backends) | {DEFAULT_BACKEND}
        for name, m in self.models.items():
            if m.backend is not None and m.backend not in known:
                listed = ", ".join(repr(b) for b in sorted(known))
                raise _rule(
                    f"[models.{name}] backend {m.backend!r} is not defined (backends: {listed})."
                )
            if m.role == "queries":
                doc = self.models.get(m.documents or "")
                if doc is None or doc.role != "documents":
                    raise _rule(
                        f"[models.{name}] documents = {m.documents!r} is not a documents model."
                    )
        for i, k in enumerate(self.api_keys):
            unknown = [x for x in k.models if x != "*" and x not in self.models]
            if unknown:
                raise _rule(
                    f"[[api_keys]] #{i + 1} models: unknown model(s) "
                    f"{', '.join(map(repr, unknown))}."
                )
        names = [k.name or f"key-{i + 1}" for i, k in enumerate(self.api_keys)]
        if len(set(names)) != len(names):
            raise _rule("[[api_keys]] names must be unique.")
        if len({k.sha256 for k in self.api_keys}) != len(self.api_keys):
            raise _rule("[[api_keys]] the same key hash appears twice.")
        s = self.server
        if not self.api_keys and not s.allow_unauthenticated:
            raise _rule(
                "[server] no [[api_keys]] configured; add one (privembed serve --new-api-key) "
                "or set allow_unauthenticated = true (loopback development only)."
            )
        if s.allow_unauthenticated and not is_loopback(s.host):
            raise _rule(
                "[server] allow_unauthenticated = true is only allowed on a loopback host, "
                f"got host={s.host!r}."
            )
        return self


# ---- error messages --------------------------------------------------------------------------

_TABLES = {"server": ServerSettings, "models": ModelTable, "api_keys": ApiKeyConfig}
_BACKEND_TABLES = {"local": LocalTable, "upstream": UpstreamTable}

#: what each pydantic error type means, in the words of the file (``{...}``: the error's ctx)
_WHAT = {
    "missing": "is required",
    "int_type": "must be int",
    "float_type": "must be int or float",
    "string_type": "must be str",
    "bool_type": "must be bool",
    "list_type": "must be a list",
    "tuple_type": "must be a list",
    "dict_type": "must be a table",
    "model_type": "must be a table",
    "model_attributes_type": "must be a table",
    "greater_than": "must be > {gt}",
    "greater_than_equal": "must be >= {ge}",
    "less_than": "must be < {lt}",
    "less_than_equal": "must be <= {le}",
    "finite_number": "must be a finite number",
    "literal_error": "must be one of {expected}",
    "too_short": "must not be empty",
    "union_tag_invalid": "must be one of {expected_tags}",
}


def _split(loc: tuple[int | str, ...]) -> tuple[str, tuple[int | str, ...]]:
    """``(where, rest)``: the table a location is in (``"[models.docs]"``) and the key path."""
    if not loc or loc[0] not in ("server", "backends", "models", "api_keys"):
        return "", loc
    head = loc[0]
    if head == "server":
        return "[server]", loc[1:]
    if len(loc) == 1:
        return ("[[api_keys]]" if head == "api_keys" else f"[{head}]"), ()
    if head == "api_keys":
        return f"[[api_keys]] #{int(loc[1]) + 1}", loc[2:]
    if head == "backends":
        return f"[backends.{loc[1]}]", loc[3:]  # loc[2] is the discriminator's tag
    return f"[models.{loc[1]}]", loc[2:]


def _key(path: tuple[int | str, ...]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _value(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _allowed(parent: tuple[int | str, ...]) -> list[str]:
    """Keys of the table at ``parent`` (for an unknown-key message)."""
    if not parent:
        model: Any = ConfigFile
    elif parent[0] == "backends" and len(parent) == 3:
        model = _BACKEND_TABLES[str(parent[2])]
    else:
        model = _TABLES[str(parent[0])]
    return sorted(model.model_fields)


def _message(source: str, errors: list[ErrorDetails]) -> str:
    """One line for the first problem (all unknown keys of a table come first, together)."""
    extra = [e for e in errors if e["type"] == "extra_forbidden"]
    if extra:
        parent = extra[0]["loc"][:-1]
        keys = [str(e["loc"][-1]) for e in extra if e["loc"][:-1] == parent]
        where, _ = _split((*parent, ""))
        what = (
            f"unknown key(s) {', '.join(map(repr, keys))}; allowed: "
            f"{', '.join(_allowed(tuple(parent)))}."
        )
        return f"{source}: {where} {what}" if where else f"{source}: {what}"
    err = errors[0]
    where, path = _split(tuple(err["loc"]))
    ctx = err.get("ctx") or {}
    kind = err["type"]
    if kind == "config_rule":
        what = str(ctx["message"])
    elif kind == "union_tag_not_found":
        what = "type is required (one of 'local', 'upstream')."
    elif kind == "missing":
        what = f"{_key(path)} is required."
    else:
        key = "type" if kind == "union_tag_invalid" else _key(path)
        template = str(ctx["what"]) if kind == "config_value" else _WHAT.get(kind)
        if template is None:
            template = err["msg"][:1].lower() + err["msg"][1:]
        text = template.format(
            **{k: f"{v:g}" if isinstance(v, float) else v for k, v in ctx.items()}
        )
        if kind == "literal_error":  # pydantic writes "'a', 'b' or 'c'"
            text = text.replace(" or ", ", ")
        value = ctx.get("tag", err.get("input"))
        if key:
            what = f"{key} {text}, got {key}={_value(value)}."
        else:  # a whole table of the wrong type
            what = f"{text}, got {type(err.get('input')).__name__}."
            if not where:
                what = "the configuration " + what
    return f"{source}: {where} {what}" if where else f"{source}: {what}"


def read_config_file(
    data: Mapping[str, Any], *, base_dir: Path | None = None, source: str = "<config>"
) -> ConfigFile:
    """The file's tables, validated (relative paths against ``base_dir``).

    Raises
    ------
    ConfigError
        The first problem, in one line naming ``source``, the table, the key and the value.
    """
    try:
        return ConfigFile.model_validate(data, context={"base_dir": base_dir})
    except ValidationError as exc:
        raise ConfigError(_message(source, exc.errors())) from None


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only loopback addresses (a name is resolved; all must be)."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return False
    addrs = {str(info[4][0]) for info in infos}
    return bool(addrs) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addrs)
