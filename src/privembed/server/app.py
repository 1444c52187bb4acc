"""The FastAPI application: OpenAI-compatible routes, auth, limits, errors, logs, metrics.

Routes
------
``POST /v1/embeddings``
    OpenAI request and response shapes. ``input`` is a string or a list of strings (token
    arrays are refused with a clear 400), ``encoding_format`` is ``float`` or ``base64``
    (little-endian float32 bytes, as OpenAI), ``dimensions`` is accepted where the mechanism
    can release that dimension (a ``projection`` model's ``k`` values) or where it equals the
    model's dimension.
``GET /v1/models``, ``GET /v1/models/{model}``
    The models the caller's key may use, with their mechanism and guarantee.
``GET /healthz``
    Liveness/readiness (no auth).
``GET /metrics``
    Prometheus text (``?format=json`` for JSON); needs a key unless
    ``metrics_require_auth = false``.

Every error is ``{"error": {"message", "type", "param", "code"}}`` with no stack trace; the logs
(:mod:`.logs`) carry no input text and no vector.

The embeddings body is a pydantic model (:class:`EmbeddingsRequest`, its limits from the
configuration), which is also what ``/openapi.json`` describes. It is validated in the route
rather than by FastAPI's parameter injection, so that a request is authenticated and
rate-limited before its body is read, and a body is read under the byte limit whatever its
``Content-Type``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import ipaddress
import itertools
import json
import math
import secrets
import time
from collections.abc import AsyncIterator, Callable
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic_core import ErrorDetails, PydanticCustomError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .auth import KeyRing, RateLimiter
from .backends import BackendError
from .batcher import QueueFull, ShuttingDown
from .config import ApiKeyConfig, ModelConfig, ServeConfig, load_config
from .errors import APIError
from .logs import logger
from .metrics import Metrics
from .service import BudgetRefused, BudgetState, LedgerUnavailable, Service

__all__ = ["EmbeddingsRequest", "create_app", "parse_embeddings_request", "subject_of"]

_ROUTES = ("/v1/embeddings", "/v1/models", "/healthz", "/metrics", "/openapi.json")
_LOG_KEY = "privembed.log"
_ANONYMOUS = ApiKeyConfig(name="anonymous", sha256="0" * 64)
#: the subject of requests without a key (no configured key's subject can be this)
UNAUTHENTICATED = "unauthenticated"


def subject_of(key: ApiKeyConfig | None, asserted: str | None) -> str:
    """The subject a request is charged to: it belongs to the key that asserts it.

    ``key:NAME`` for the key itself; ``key:NAME/SUBJECT`` for a subject the key names (only
    keys with ``may_assert_subjects``; the caller refuses the others); ``unauthenticated`` for
    requests without a key. Key names contain no ``/``, so no two keys can reach one subject.

    Examples
    --------
    >>> k = ApiKeyConfig(name="gw", sha256="1" * 64, may_assert_subjects=True)
    >>> subject_of(k, None), subject_of(k, "alice"), subject_of(None, None)
    ('key:gw', 'key:gw/alice', 'unauthenticated')
    """
    if key is None:
        return UNAUTHENTICATED
    return f"key:{key.name}" if asserted is None else f"key:{key.name}/{asserted}"


# ---- the request body ------------------------------------------------------------------------


def _bad(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, param=param, code=code)


def _is_token(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _as_texts(value: Any) -> Any:
    """``input`` as a list: a string is one text; token arrays and other types are refused."""
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        raise PydanticCustomError(
            "invalid_type",
            "input must be a string or an array of strings, got {kind}.",
            {"kind": type(value).__name__},
        )
    if value and (
        all(_is_token(x) for x in value)
        or all(isinstance(x, list) and all(_is_token(y) for y in x) for x in value)
    ):
        raise PydanticCustomError(
            "token_input_not_supported",
            "input is an array of tokens; this server embeds text only: send strings "
            "(in LangChain, OpenAIEmbeddings(check_embedding_ctx_length=False)).",
        )
    return value


def _real_text(value: str) -> str:
    if not value.strip():
        raise PydanticCustomError("empty_input", "is empty or only whitespace")
    return value


def _float_if_null(value: Any) -> Any:
    return "float" if value is None else value


class EmbeddingsRequest(BaseModel):
    """A validated ``POST /v1/embeddings`` body (OpenAI's fields; other fields are ignored).

    The limits on ``input`` come from the configuration: :func:`parse_embeddings_request`
    (and the server) use a subclass made for them, whose JSON schema ``/openapi.json`` shows.

    Attributes
    ----------
    model : str
        The model name the client asks for.
    input : list of str
        The texts (a single string is a list of one).
    encoding_format : {"float", "base64"}
    dimensions : int, optional
    user : str, optional
        The subject the request is charged to, for a key allowed to name one
        (``may_assert_subjects``); see :func:`subject_of` and ``docs/server.md``.
    """

    model_config = ConfigDict(strict=True, frozen=True, extra="ignore")

    model: Annotated[str, Field(min_length=1)]
    input: Annotated[list[str], BeforeValidator(_as_texts)]
    encoding_format: Annotated[Literal["float", "base64"], BeforeValidator(_float_if_null)] = (
        "float"
    )
    dimensions: Annotated[int, Field(ge=1)] | None = None
    user: Annotated[str, Field(min_length=1, max_length=256)] | None = None

    @property
    def texts(self) -> list[str]:
        """The texts to embed, in order."""
        return list(self.input)


@lru_cache(maxsize=16)
def _request_model(max_inputs: int, max_input_chars: int) -> type[EmbeddingsRequest]:
    """:class:`EmbeddingsRequest` with the configured limits on ``input``."""
    text = Annotated[
        str, Field(min_length=1, max_length=max_input_chars), AfterValidator(_real_text)
    ]
    texts = Annotated[list[text], Field(min_length=1, max_length=max_inputs)]

    class Limited(EmbeddingsRequest):
        input: Annotated[texts, BeforeValidator(_as_texts, json_schema_input_type=text | texts)]

    Limited.__name__ = Limited.__qualname__ = "EmbeddingsRequest"
    return Limited


def _request_error(err: ErrorDetails, body: dict[str, Any]) -> APIError:
    """The OpenAI-style 400 for the first validation error of a body (a JSON object)."""
    loc, kind, ctx = err["loc"], err["type"], err.get("ctx") or {}
    field = str(loc[0])
    if kind == "missing":
        article = "an" if field[0] in "aeiou" else "a"
        return _bad(
            f"You must provide {article} {field} parameter.", param=field, code="missing_parameter"
        )
    if field == "model":
        return _bad("model must be a non-empty string.", param="model", code="invalid_type")
    if field == "input":
        if len(loc) == 1:  # the list as a whole
            if kind == "too_short":
                return _bad("input must not be an empty array.", param="input", code="empty_input")
            if kind == "too_long":
                n, limit = len(body["input"]), ctx["max_length"]
                return _bad(
                    f"input has {n} items; at most {limit} are allowed per request.",
                    param="input",
                    code="too_many_inputs",
                )
            return _bad(err["msg"], param="input", code=kind)  # a type, or token arrays
        where = "input" if isinstance(body["input"], str) else f"input[{loc[1]}]"
        value = err["input"]
        if kind == "string_type":
            msg, code = f"must be a string, got {type(value).__name__}", "invalid_type"
        elif kind == "string_too_short":
            msg, code = "is empty or only whitespace", "empty_input"
        elif kind == "string_unicode":  # pydantic refuses lone surrogates
            msg, code = "is not valid Unicode (a lone surrogate)", "invalid_text"
        elif kind == "string_too_long":
            msg = f"has {len(value)} characters; at most {ctx['max_length']} are allowed"
            code = "input_too_long"
        else:  # empty_input
            msg, code = err["msg"], kind
        return _bad(f"{where} {msg}.", param=where, code=code)
    value = body.get(field)
    if field == "encoding_format":
        msg = f"encoding_format must be 'float' or 'base64', got {value!r}."
    elif field == "dimensions":
        msg = f"dimensions must be a positive integer, got {value!r}."
    else:
        msg = "user must be a non-empty string of at most 256 characters."
    return _bad(msg, param=field, code="invalid_value")


def parse_embeddings_request(
    obj: Any, *, max_inputs: int, max_input_chars: int
) -> EmbeddingsRequest:
    """Validate a decoded JSON body; raise :class:`APIError` (400) naming the bad field.

    Examples
    --------
    >>> req = parse_embeddings_request({"model": "m", "input": "hi"}, max_inputs=4,
    ...                                max_input_chars=10)
    >>> req.texts, req.model, req.encoding_format, req.dimensions
    (['hi'], 'm', 'float', None)
    >>> parse_embeddings_request({"model": "m", "input": [1, 2]}, max_inputs=4, max_input_chars=10)
    Traceback (most recent call last):
    ...
    privembed.server.errors.APIError: input is an array of tokens; this server embeds text only: send strings (in LangChain, OpenAIEmbeddings(check_embedding_ctx_length=False)).
    """
    if not isinstance(obj, dict):
        raise _bad("The request body must be a JSON object.", code="invalid_body")
    try:
        return _request_model(max_inputs, max_input_chars).model_validate(obj)
    except ValidationError as exc:
        raise _request_error(exc.errors()[0], obj) from None


def _resolve_dims(model: ModelConfig, dims: int | None, backend_dim: int | None) -> int | None:
    """The mechanism key for a requested dimension, or a 400 naming what is allowed."""
    if dims is None:
        return None
    allowed = model.allowed_dims
    if allowed:
        if dims in allowed:
            return dims
        raise _bad(
            f"model {model.name!r} can release dimensions {list(allowed)}, got dimensions={dims}.",
            param="dimensions",
            code="unsupported_dimensions",
        )
    if backend_dim is not None and dims == backend_dim:
        return None
    what = f"its {backend_dim} dimensions" if backend_dim is not None else "its own dimension"
    raise _bad(
        f"model {model.name!r} does not support dimensions={dims}: its mechanism releases "
        f"{what} (only a projection mechanism can change the dimension).",
        param="dimensions",
        code="unsupported_dimensions",
    )


# ---- response documents (for /openapi.json; responses are written directly) ----------------


class _Embedding(BaseModel):
    object: Literal["embedding"]
    index: int
    embedding: list[float] | str


class _Usage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingsResponse(BaseModel):
    """The ``POST /v1/embeddings`` response (OpenAI's shape)."""

    object: Literal["list"]
    data: list[_Embedding]
    model: str
    usage: _Usage


class _ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorResponse(BaseModel):
    """Every error's body."""

    error: _ErrorDetail


_ERROR_TEXT = {
    400: "Malformed request, bad input, unknown dimensions",
    401: "Missing or invalid API key",
    403: "Model not allowed for this key, or privacy budget exhausted",
    404: "Unknown model",
    413: "Request body too large",
    429: "Rate limit exceeded (Retry-After)",
    502: "Upstream embedding service failed",
    503: "Overloaded, queue full or shutting down (Retry-After)",
    504: "Upstream embedding service timed out",
}


def _error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {c: {"description": _ERROR_TEXT[c], "model": ErrorResponse} for c in codes}


def _embeddings_openapi(s: Any) -> dict[str, Any]:
    schema = _request_model(s.max_inputs, s.max_input_chars).model_json_schema()
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


# ---- middleware: request id, body limit, metrics, structured log -----------------------------


class _BodyTooLarge(Exception):
    pass


def _route_label(path: str) -> str:
    if path.startswith("/v1/models/"):
        return "/v1/models/{model}"
    return path if path in _ROUTES else "other"


class _Observe:
    """Pure ASGI middleware (streams are untouched; only counts and headers)."""

    def __init__(self, app: ASGIApp, *, metrics: Metrics, max_body: int) -> None:
        self.app = app
        self.metrics = metrics
        self.max_body = max_body
        self._prefix = secrets.token_hex(4)  # request ids: random per process, then a counter
        self._counter = itertools.count()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        rid = f"{self._prefix}{next(self._counter) & 0xFFFFFFFF:08x}"
        fields: dict[str, Any] = {}
        scope[_LOG_KEY] = fields
        status = [500]
        started = [False]
        route = _route_label(scope.get("path", ""))

        async def send_wrapped(message: Message) -> None:
            if message["type"] == "http.response.start":
                started[0] = True
                status[0] = int(message["status"])
                headers = list(message.get("headers", []))
                headers.append((b"x-request-id", rid.encode()))
                message = {**message, "headers": headers}
            await send(message)

        received = [0]

        async def receive_wrapped() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                received[0] += len(message.get("body", b""))
                if received[0] > self.max_body:
                    raise _BodyTooLarge()
            return message

        self.metrics.in_flight += 1
        try:
            length = dict(scope.get("headers", [])).get(b"content-length")
            if length is not None and length.isdigit() and int(length) > self.max_body:
                await _send_error(
                    send_wrapped, APIError(413, _too_large(self.max_body), code="request_too_large")
                )
            else:
                try:
                    await self.app(scope, receive_wrapped, send_wrapped)
                except _BodyTooLarge:
                    if not started[0]:
                        await _send_error(
                            send_wrapped,
                            APIError(413, _too_large(self.max_body), code="request_too_large"),
                        )
        finally:
            self.metrics.in_flight -= 1
            elapsed = time.perf_counter() - start
            self.metrics.observe_request(route, status[0], elapsed)
            if status[0] >= 400:
                self.metrics.refused[str(status[0])] += 1
            logger.info(
                "request",
                extra={
                    "fields": {
                        "request_id": rid,
                        "method": scope.get("method"),
                        "route": route,
                        "status": status[0],
                        "latency_ms": round(elapsed * 1000.0, 3),
                        **fields,
                    }
                },
            )


def _too_large(limit: int) -> str:
    return f"The request body is larger than the limit of {limit} bytes."


async def _send_error(send: Send, err: APIError) -> None:
    body = json.dumps(err.body()).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.lower().encode(), v.encode()) for k, v in err.headers.items()]
    await send({"type": "http.response.start", "status": err.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _error_response(err: APIError) -> JSONResponse:
    return JSONResponse(err.body(), status_code=err.status, headers=err.headers or None)


# ---- what the routes share -------------------------------------------------------------------


class _State:
    """One application's configuration, keys, limiter, metrics and (while running) service."""

    def __init__(self, cfg: ServeConfig, clock: Callable[[], float] | None) -> None:
        self.cfg = cfg
        self.metrics = Metrics()
        self.keyring = KeyRing(cfg.api_keys)
        self.limiter = RateLimiter(clock=clock)
        self.service: Service | None = None
        #: set when a shutdown begins (new requests: 503 shutting_down)
        self.draining = False

    def ready_service(self) -> Service:
        svc = self.service
        if self.draining or (svc is not None and svc.draining):
            raise APIError(
                503,
                "The server is shutting down.",
                code="shutting_down",
                headers={"Retry-After": "5", "Connection": "close"},
            )
        if svc is None or not svc.ready:
            raise APIError(
                503,
                "The server is starting or stopping.",
                code="not_ready",
                headers={"Retry-After": "1"},
            )
        return svc

    def authenticate(self, request: Request) -> ApiKeyConfig:
        header = request.headers.get("authorization")
        if header is None:
            client = request.client.host if request.client is not None else ""
            if self.cfg.server.allow_unauthenticated and _loopback_client(client):
                return _ANONYMOUS
            raise APIError(
                401,
                "You didn't provide an API key (Authorization: Bearer KEY)"
                + ("; requests without one are served to this machine only." if
                   self.cfg.server.allow_unauthenticated else "."),
                code="missing_api_key",
            )  # fmt: skip
        scheme, _, token = header.partition(" ")
        token = token.strip()
        entry = self.keyring.lookup(token) if scheme.lower() == "bearer" and token else None
        if entry is None:
            raise APIError(401, "Incorrect API key provided.", code="invalid_api_key")
        request.scope[_LOG_KEY]["key"] = entry.name
        return entry

    def check_rate(self, principal: ApiKeyConfig) -> None:
        wait = self.limiter.acquire(principal)
        if wait > 0:
            raise APIError(
                429,
                "Rate limit reached for this API key; retry later.",
                code="rate_limit_exceeded",
                headers={"Retry-After": str(max(1, int(wait + 0.999)))},
            )

    def lookup_model(self, name: str, principal: ApiKeyConfig) -> ModelConfig:
        model = self.cfg.models.get(name)
        if model is None:
            raise APIError(
                404,
                f"The model {name[:100]!r} does not exist.",
                param="model",
                code="model_not_found",
            )
        if not principal.allows(name):
            raise APIError(
                403,
                f"This API key is not allowed to use the model {name!r}.",
                param="model",
                code="model_not_allowed",
            )
        return model

    def model_card(self, m: ModelConfig, svc: Service) -> dict[str, Any]:
        desc = next(d for d in svc.describe_models() if d["id"] == m.name)
        return {
            "id": m.name,
            "object": "model",
            "created": int(self.metrics.started),
            "owned_by": "privembed",
            "privembed": {k: v for k, v in desc.items() if k != "id"},
        }


# ---- POST /v1/embeddings ---------------------------------------------------------------------

_REFUSALS = (QueueFull, ShuttingDown, TimeoutError, BackendError, BudgetRefused, LedgerUnavailable)


async def _read_request(st: _State, request: Request) -> EmbeddingsRequest:
    s = st.cfg.server
    try:
        raw = await request.body()
    except _BodyTooLarge:
        raise APIError(413, _too_large(s.max_body_bytes), code="request_too_large") from None
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError):
        raise _bad(
            "We could not parse the JSON body of your request.", code="invalid_json"
        ) from None
    return parse_embeddings_request(obj, max_inputs=s.max_inputs, max_input_chars=s.max_input_chars)


def _loopback_client(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _subject(st: _State, request: Request, req: EmbeddingsRequest, key: ApiKeyConfig) -> str:
    """The request's subject (:func:`subject_of`), or 403 if the key may not name one."""
    s = st.cfg.server
    header = request.headers.get(s.subject_header)
    asserted, param = (req.user, "user") if req.user is not None else (header, s.subject_header)
    if asserted is None:
        return subject_of(None if key is _ANONYMOUS else key, None)
    if key is _ANONYMOUS or not key.may_assert_subjects:
        who = "requests without a key" if key is _ANONYMOUS else f"API key {key.name!r}"
        raise APIError(
            403,
            f"{who} may not name the subject a request is charged to ({param}); its requests "
            "are charged to the key itself. Leave it out, or set may_assert_subjects = true on "
            "the key (a gateway that authenticates its own users).",
            param=param,
            code="subject_not_allowed",
        )
    if not asserted.strip() or len(asserted) > 256 or "\x00" in asserted:
        raise _bad(  # (NUL: no ledger text holds it -- PostgreSQL refuses it)
            f"{param} must be a non-empty subject of at most 256 characters, without NUL.",
            param=param,
            code="invalid_value",
        )
    return subject_of(key, asserted)


def _num(x: float) -> float | None:
    """A number for JSON (``None`` for an unbounded or infinite one)."""
    return float(x) if math.isfinite(x) else None


def _eps(x: float) -> str:
    return f"{x:.4g}" if math.isfinite(x) else "unbounded"


def _budget_refusal(exc: BudgetRefused, ids: list[str]) -> tuple[str, dict[str, Any]]:
    """A 403's message and ``budget`` member: what is spent and what is left -- of the
    request's texts that are spent (by their index in ``input``) and of the requesting
    subject -- and what one release costs. Nothing about any other text or subject."""

    def state(b: BudgetState) -> dict[str, Any]:
        return {
            "budget": {"epsilon": _num(b.epsilon), "delta": b.delta},
            "spent": {"epsilon": _num(b.spent_epsilon), "delta": b.spent_delta},
            "left": {"epsilon": _num(b.left_epsilon)},
        }

    def spent(b: BudgetState) -> str:
        return (
            f"spent epsilon={_eps(b.spent_epsilon)}, delta={b.spent_delta:.3g} of "
            f"epsilon={_eps(b.epsilon)}, delta={b.delta:.3g} (epsilon {_eps(b.left_epsilon)} left)"
        )

    what = (
        "this subject's privacy budget (all its texts together)"
        if exc.scope == "subject"
        else "the per-text privacy budget"
    )
    parts = [f"Releasing these inputs would exceed {what}."]
    inputs = [(i, exc.texts[r]) for i, r in enumerate(ids) if r in exc.texts]
    shown = inputs[:5]
    if shown:
        more = f" and {len(inputs) - 5} more" if len(inputs) > 5 else ""
        listed = "; ".join(f"input {i} has {spent(b)}" for i, b in shown)
        parts.append(f"Texts at their budget: {listed}{more}.")
    if exc.subject is not None:
        parts.append(f"This subject has {spent(exc.subject)}.")
    if exc.cost is not None:
        parts.append(
            f"One release of one text costs epsilon={_eps(exc.cost[0])}, "
            f"delta={exc.cost[1]:.3g}; a repeat of a released text is free."
        )
    details = {
        "budget": {
            "scope": "subject" if exc.scope == "subject" else "text",
            "release_cost": None
            if exc.cost is None
            else {"epsilon": _num(exc.cost[0]), "delta": exc.cost[1]},
            "inputs": [{"index": i, **state(b)} for i, b in inputs],
            "subject": None if exc.subject is None else state(exc.subject),
        }
    }
    return " ".join(parts), details


def _refusal(
    st: _State, svc: Service, model: ModelConfig, exc: Exception, ids: list[str] | None = None
) -> APIError:
    """The client's error for a request the service could not complete (``ids``: the
    request's text ids, in ``input`` order)."""
    s, refused = st.cfg.server, st.metrics.refused
    if isinstance(exc, QueueFull):
        refused["queue_full"] += 1
        retry = svc.retry_after(model)
        return APIError(
            503,
            "The server is overloaded (queue full); retry later.",
            code="overloaded",
            headers={"Retry-After": str(retry)},
        )
    if isinstance(exc, ShuttingDown):
        return APIError(
            503,
            "The server is shutting down.",
            code="shutting_down",
            headers={"Retry-After": "5", "Connection": "close"},
        )
    if isinstance(exc, TimeoutError):
        return APIError(
            503,
            f"The request did not finish within {s.request_timeout_s:g} s; retry later.",
            code="timeout",
            headers={"Retry-After": "5"},
        )
    if isinstance(exc, BackendError):
        refused["backend"] += 1
        hdr = {"Retry-After": str(max(1, int(exc.retry_after)))} if exc.retry_after else None
        return APIError(exc.status, str(exc) + ".", code="upstream_error", headers=hdr)
    if isinstance(exc, BudgetRefused):
        refused["budget"] += 1
        message, details = _budget_refusal(exc, ids or [])
        return APIError(
            403, message, param="input", code="privacy_budget_exceeded", details=details
        )
    refused["ledger_busy"] += 1  # LedgerUnavailable
    if getattr(exc, "unreachable", False):  # a lost or refused connection to its database
        return APIError(
            503,
            "The privacy ledger cannot be reached; nothing was released. Retry later.",
            code="ledger_unavailable",
            headers={"Retry-After": str(max(1, int(s.ledger_timeout_s + 0.999)))},
        )
    return APIError(
        503,
        "The privacy ledger is busy (locked by another process); retry later.",
        code="ledger_busy",
        headers={"Retry-After": str(max(1, int(s.ledger_timeout_s + 0.999)))},
    )


def _embeddings_body(
    model: ModelConfig, ids: list[str], vectors: dict[str, Any], tokens: int, fmt: str
) -> bytes:
    data = []
    for i, rid in enumerate(ids):
        v = vectors[rid]
        emb: Any = (
            base64.b64encode(v.astype("<f4", copy=False).tobytes()).decode("ascii")
            if fmt == "base64"
            else v.tolist()
        )
        data.append({"object": "embedding", "index": i, "embedding": emb})
    payload = {
        "object": "list",
        "data": data,
        "model": model.name,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
    return json.dumps(payload, separators=(",", ":")).encode()


async def _embeddings(st: _State, request: Request) -> Response:
    s, fields = st.cfg.server, request.scope[_LOG_KEY]
    svc = st.ready_service()
    principal = st.authenticate(request)
    st.check_rate(principal)
    req = await _read_request(st, request)
    model = st.lookup_model(req.model, principal)
    subject = _subject(st, request, req, principal)
    dims = _resolve_dims(model, req.dimensions, svc.backends[model.backend].dim)
    texts = req.texts
    fields.update(
        model=model.name,
        n_inputs=len(texts),
        chars=sum(len(t) for t in texts),
        encoding_format=req.encoding_format,
        dimensions=req.dimensions,
    )
    st.metrics.inputs += len(texts)
    ids = svc.record_ids(texts)
    unique = dict(zip(ids, texts, strict=True))
    fields["subject"] = hashlib.sha256(subject.encode()).hexdigest()[:12]
    try:
        got = await asyncio.wait_for(
            svc.embed(model, dims, list(unique), list(unique.values()), subject=subject),
            timeout=s.request_timeout_s,
        )
    except _REFUSALS as exc:
        raise _refusal(st, svc, model, exc, ids) from None
    st.metrics.count_vectors(model.name, model.treatment, len(ids))
    body = _embeddings_body(
        model, ids, got.vectors, sum(got.tokens[r] for r in ids), req.encoding_format
    )
    return Response(body, media_type="application/json", headers={"Cache-Control": "no-store"})


# ---- the other routes ------------------------------------------------------------------------


def _healthz(st: _State) -> JSONResponse:
    svc = st.service
    ready = svc is not None and svc.ready and not st.draining
    body: dict[str, Any] = {
        "status": "ok" if ready else ("stopping" if st.draining else "unavailable"),
        "models": len(st.cfg.models),
    }
    if svc is not None:
        h = svc.ledger_health
        body["ledger"] = {"state": h.state, "since": h.since}
        if h.state in ("busy", "unreachable"):
            body["status"] = "degraded"  # embeddings that need the ledger answer 503
    return JSONResponse(body, status_code=200 if ready else 503)


def _metrics(st: _State, request: Request, fmt: str) -> Response:
    if st.cfg.server.metrics_require_auth:
        st.authenticate(request)
    svc = st.service
    st.metrics.queue_depth = svc.queue_depth if svc is not None else 0
    if fmt == "json":
        return JSONResponse(st.metrics.snapshot())
    if fmt != "prometheus":
        raise _bad(
            f"format must be 'prometheus' or 'json', got {fmt[:50]!r}.",
            param="format",
            code="invalid_value",
        )
    return PlainTextResponse(st.metrics.prometheus(), media_type="text/plain; version=0.0.4")


def _add_routes(app: FastAPI, st: _State) -> None:
    @app.post(
        "/v1/embeddings",
        openapi_extra=_embeddings_openapi(st.cfg.server),
        response_model=None,
        responses={
            200: {"description": "Protected embeddings", "model": EmbeddingsResponse},
            **_error_responses(400, 401, 403, 404, 413, 429, 502, 503, 504),
        },
        summary="Create protected embeddings",
    )
    async def embeddings(request: Request) -> Response:
        return await _embeddings(st, request)

    @app.get(
        "/v1/models", summary="List the models this key may use", responses=_error_responses(401)
    )
    async def list_models(request: Request) -> JSONResponse:
        svc = st.ready_service()
        principal = st.authenticate(request)
        data = [st.model_card(m, svc) for n, m in st.cfg.models.items() if principal.allows(n)]
        return JSONResponse({"object": "list", "data": data})

    @app.get(
        "/v1/models/{model}",
        summary="Describe one model",
        responses=_error_responses(401, 403, 404),
    )
    async def get_model(model: str, request: Request) -> JSONResponse:
        svc = st.ready_service()
        principal = st.authenticate(request)
        return JSONResponse(st.model_card(st.lookup_model(model, principal), svc))

    @app.get("/healthz", summary="Liveness and readiness")
    async def healthz() -> JSONResponse:
        return _healthz(st)

    @app.get(
        "/metrics",
        summary="Request counts, latencies, vectors protected",
        responses=_error_responses(400, 401),
    )
    async def metrics_route(request: Request, format: str = "prometheus") -> Response:
        return _metrics(st, request, format)


# ---- error handlers --------------------------------------------------------------------------


async def _api_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, APIError)
    return _error_response(exc)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    msg = {404: "Not found.", 405: "Method not allowed."}.get(exc.status_code, "Bad request.")
    headers = dict(exc.headers) if exc.headers else None
    return _error_response(APIError(exc.status_code, msg, headers=headers))


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errs = exc.errors()
    param = ".".join(str(x) for x in errs[0]["loc"][1:]) if errs else None
    return _error_response(APIError(400, "Invalid request parameters.", param=param or None))


async def _internal_error(request: Request, exc: Exception) -> JSONResponse:
    logger.error("internal_error", exc_info=exc)
    return _error_response(APIError(500, "Internal server error.", code="internal_error"))


def _add_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(APIError, _api_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(Exception, _internal_error)


# ---- lifespan and the application ------------------------------------------------------------


def _lifespan(st: _State) -> Callable[[FastAPI], contextlib.AbstractAsyncContextManager[None]]:
    """Start the service (model, ledger, batchers) before serving; drain and stop it after."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        cfg = st.cfg
        service = Service(cfg, st.metrics)
        try:
            await service.start()
        except Exception as exc:
            app.state.startup_error = exc
            logger.error("startup_failed", extra={"fields": {"error": str(exc)[:500]}})
            await service.stop()
            raise
        st.service = service
        logger.info(
            "started",
            extra={
                "fields": {
                    "models": list(cfg.models),
                    "backends": {n: b.engine for n, b in service.backends.items()},
                    "noise": cfg.server.noise,
                    "ledger": cfg.server.ledger is not None,
                    "api_keys": len(st.keyring),
                }
            },
        )
        try:
            yield
        finally:
            logger.info("stopping", extra={"fields": {"queued_texts": service.queue_depth}})
            await service.stop()
            st.service = None
            logger.info("stopped")

    return lifespan


def create_app(
    config: ServeConfig | str | Path, *, clock: Callable[[], float] | None = None
) -> FastAPI:
    """Build the server application for a configuration (or a TOML file path).

    The model (local backends) is loaded, the ledger opened and the batchers started in the
    application's lifespan: run it under uvicorn (``privembed serve``) or
    :func:`privembed.server.running_server`.

    Parameters
    ----------
    config : ServeConfig or path
        A validated configuration, or a TOML file to load.
    clock : callable() -> float, optional
        Monotonic seconds for the per-key rate limits (default :func:`time.monotonic`).

    Raises
    ------
    ConfigError
        The configuration is invalid.
    """
    cfg = config if isinstance(config, ServeConfig) else load_config(config)
    st = _State(cfg, clock)
    app = FastAPI(
        title="privembed embeddings proxy",
        version=_version(),
        description=(
            "OpenAI-compatible embeddings endpoint that returns privacy-protected vectors "
            "(privembed)."
        ),
        lifespan=_lifespan(st),
        docs_url=None,  # no Swagger UI (it loads scripts from a CDN); /openapi.json stays
        redoc_url=None,
    )
    _add_error_handlers(app)
    _add_routes(app, st)
    app.add_middleware(_Observe, metrics=st.metrics, max_body=cfg.server.max_body_bytes)
    app.state.config = cfg
    app.state.metrics = st.metrics
    app.state.privembed = st  # the running service is st.service (tests look inside)
    return app


def _version() -> str:
    from .. import __version__

    return __version__
