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
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import itertools
import json
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .auth import KeyRing, RateLimiter
from .backends import BackendError
from .batcher import QueueFull, ShuttingDown
from .config import ApiKeyConfig, ModelConfig, ServeConfig, load_config
from .errors import APIError
from .logs import logger
from .metrics import Metrics
from .service import BudgetRefused, LedgerUnavailable, Service

__all__ = ["create_app", "parse_embeddings_request"]

_ROUTES = ("/v1/embeddings", "/v1/models", "/healthz", "/metrics", "/openapi.json")
_LOG_KEY = "privembed.log"
_ANONYMOUS = ApiKeyConfig(name="anonymous", sha256="0" * 64)


# ---- request parsing -----------------------------------------------------------------------


@dataclass(frozen=True)
class EmbeddingsRequest:
    """A validated ``POST /v1/embeddings`` body."""

    texts: list[str]
    model: str
    encoding_format: str
    dimensions: int | None
    user: str | None = None


def _bad(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, param=param, code=code)


def parse_embeddings_request(
    obj: Any, *, max_inputs: int, max_input_chars: int
) -> EmbeddingsRequest:
    """Validate a decoded JSON body; raise :class:`APIError` (400) naming the bad field.

    Examples
    --------
    >>> parse_embeddings_request({"model": "m", "input": "hi"}, max_inputs=4, max_input_chars=10)
    EmbeddingsRequest(texts=['hi'], model='m', encoding_format='float', dimensions=None, user=None)
    >>> parse_embeddings_request({"model": "m", "input": [1, 2]}, max_inputs=4, max_input_chars=10)
    Traceback (most recent call last):
    ...
    privembed.server.errors.APIError: input is an array of tokens; this server embeds text only: send strings (in LangChain, OpenAIEmbeddings(check_embedding_ctx_length=False)).
    """
    if not isinstance(obj, dict):
        raise _bad("The request body must be a JSON object.", code="invalid_body")
    model = obj.get("model")
    if model is None:
        raise _bad("You must provide a model parameter.", param="model", code="missing_parameter")
    if not isinstance(model, str) or not model:
        raise _bad("model must be a non-empty string.", param="model", code="invalid_type")
    if "input" not in obj:
        raise _bad("You must provide an input parameter.", param="input", code="missing_parameter")
    inp = obj["input"]
    if isinstance(inp, str):
        texts = [inp]
    elif isinstance(inp, list):
        if not inp:
            raise _bad("input must not be an empty array.", param="input", code="empty_input")
        if all(isinstance(x, int) and not isinstance(x, bool) for x in inp) or all(
            isinstance(x, list) and all(isinstance(y, int) and not isinstance(y, bool) for y in x)
            for x in inp
        ):
            raise _bad(
                "input is an array of tokens; this server embeds text only: send strings "
                "(in LangChain, OpenAIEmbeddings(check_embedding_ctx_length=False)).",
                param="input",
                code="token_input_not_supported",
            )
        for i, x in enumerate(inp):
            if not isinstance(x, str):
                raise _bad(
                    f"input[{i}] must be a string, got {type(x).__name__}.",
                    param=f"input[{i}]",
                    code="invalid_type",
                )
        texts = inp
    else:
        raise _bad(
            f"input must be a string or an array of strings, got {type(inp).__name__}.",
            param="input",
            code="invalid_type",
        )
    if len(texts) > max_inputs:
        raise _bad(
            f"input has {len(texts)} items; at most {max_inputs} are allowed per request.",
            param="input",
            code="too_many_inputs",
        )
    for i, t in enumerate(texts):
        where = "input" if isinstance(inp, str) else f"input[{i}]"
        if not t.strip():
            raise _bad(f"{where} is empty or only whitespace.", param=where, code="empty_input")
        if len(t) > max_input_chars:
            raise _bad(
                f"{where} has {len(t)} characters; at most {max_input_chars} are allowed.",
                param=where,
                code="input_too_long",
            )
        try:
            t.encode("utf-8")
        except UnicodeEncodeError:
            raise _bad(
                f"{where} is not valid Unicode (a lone surrogate).",
                param=where,
                code="invalid_text",
            ) from None
    fmt = obj.get("encoding_format")
    if fmt is None:
        fmt = "float"
    if fmt not in ("float", "base64"):
        raise _bad(
            f"encoding_format must be 'float' or 'base64', got {fmt!r}.",
            param="encoding_format",
            code="invalid_value",
        )
    dims = obj.get("dimensions")
    if dims is not None and (isinstance(dims, bool) or not isinstance(dims, int) or dims < 1):
        raise _bad(
            f"dimensions must be a positive integer, got {dims!r}.",
            param="dimensions",
            code="invalid_value",
        )
    user = obj.get("user")
    if user is not None and (not isinstance(user, str) or not user or len(user) > 256):
        raise _bad(
            "user must be a non-empty string of at most 256 characters.",
            param="user",
            code="invalid_value",
        )
    return EmbeddingsRequest(list(texts), model, str(fmt), dims, user)


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


# ---- OpenAPI description ---------------------------------------------------------------------

_ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "param", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
        }
    },
}


def _error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    text = {
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
    return {
        c: {"description": text[c], "content": {"application/json": {"schema": _ERROR_SCHEMA}}}
        for c in codes
    }


def _embeddings_openapi(s: Any) -> dict[str, Any]:
    text = {"type": "string", "minLength": 1, "maxLength": s.max_input_chars}
    return {
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {
                        "type": "object",
                        "required": ["input", "model"],
                        "properties": {
                            "input": {
                                "description": "Text or texts to embed (token arrays are refused).",
                                "anyOf": [
                                    text,
                                    {
                                        "type": "array",
                                        "items": text,
                                        "minItems": 1,
                                        "maxItems": s.max_inputs,
                                    },
                                ],
                            },
                            "model": {"type": "string", "minLength": 1},
                            "encoding_format": {"type": "string", "enum": ["float", "base64"]},
                            "dimensions": {"type": "integer", "minimum": 1},
                            "user": {"type": "string"},
                        },
                    }
                }
            },
        },
        "responses": {
            "200": {
                "description": "Protected embeddings",
                "content": {
                    "application/json": {
                        "schema": {
                            "type": "object",
                            "required": ["object", "data", "model", "usage"],
                            "properties": {
                                "object": {"const": "list"},
                                "data": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "required": ["object", "index", "embedding"],
                                        "properties": {
                                            "object": {"const": "embedding"},
                                            "index": {"type": "integer"},
                                            "embedding": {
                                                "anyOf": [
                                                    {"type": "array", "items": {"type": "number"}},
                                                    {"type": "string"},
                                                ]
                                            },
                                        },
                                    },
                                },
                                "model": {"type": "string"},
                                "usage": {
                                    "type": "object",
                                    "properties": {
                                        "prompt_tokens": {"type": "integer"},
                                        "total_tokens": {"type": "integer"},
                                    },
                                },
                            },
                        }
                    }
                },
            },
            **{
                str(k): v
                for k, v in _error_responses(400, 401, 403, 404, 413, 429, 502, 503, 504).items()
            },
        },
    }


# ---- the application -------------------------------------------------------------------------


def create_app(config: ServeConfig | str | Path) -> FastAPI:
    """Build the server application for a configuration (or a TOML file path).

    The model (local backends) is loaded, the ledger opened and the batchers started in the
    application's lifespan: run it under uvicorn (``privembed serve``) or
    :func:`privembed.server.running_server`.

    Raises
    ------
    ConfigError
        The configuration is invalid.
    """
    cfg = config if isinstance(config, ServeConfig) else load_config(config)
    s = cfg.server
    metrics = Metrics()
    keyring = KeyRing(cfg.api_keys)
    limiter = RateLimiter()
    holder: dict[str, Service] = {}

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        service = Service(cfg, metrics)
        try:
            await service.start()
        except Exception as exc:
            app.state.startup_error = exc
            logger.error("startup_failed", extra={"fields": {"error": str(exc)[:500]}})
            await service.stop()
            raise
        holder["service"] = service
        logger.info(
            "started",
            extra={
                "fields": {
                    "models": list(cfg.models),
                    "backends": {n: b.type for n, b in cfg.backends.items()},
                    "noise": s.noise,
                    "ledger": s.ledger is not None,
                    "api_keys": len(keyring),
                }
            },
        )
        try:
            yield
        finally:
            logger.info("stopping", extra={"fields": {"queued_texts": service.queue_depth}})
            await service.stop()
            holder.pop("service", None)
            logger.info("stopped")

    app = FastAPI(
        title="privembed embeddings proxy",
        version=_version(),
        description=(
            "OpenAI-compatible embeddings endpoint that returns privacy-protected vectors "
            "(privembed)."
        ),
        lifespan=lifespan,
        docs_url=None,  # no Swagger UI (it loads scripts from a CDN); /openapi.json stays
        redoc_url=None,
    )

    def service() -> Service:
        svc = holder.get("service")
        if svc is None or not svc.ready:
            raise APIError(
                503,
                "The server is starting or stopping.",
                code="not_ready",
                headers={"Retry-After": "1"},
            )
        return svc

    def authenticate(request: Request) -> ApiKeyConfig:
        header = request.headers.get("authorization")
        if header is None:
            if s.allow_unauthenticated:
                return _ANONYMOUS
            raise APIError(
                401,
                "You didn't provide an API key (Authorization: Bearer KEY).",
                code="missing_api_key",
            )
        scheme, _, token = header.partition(" ")
        entry = (
            keyring.lookup(token.strip()) if scheme.lower() == "bearer" and token.strip() else None
        )
        if entry is None:
            raise APIError(401, "Incorrect API key provided.", code="invalid_api_key")
        request.scope[_LOG_KEY]["key"] = entry.name
        return entry

    def lookup_model(name: str, principal: ApiKeyConfig) -> ModelConfig:
        model = cfg.models.get(name)
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

    # ---- error handlers ----------------------------------------------------------------------
    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> JSONResponse:
        return _error_response(exc)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        msg = {404: "Not found.", 405: "Method not allowed."}.get(exc.status_code, "Bad request.")
        return _error_response(
            APIError(exc.status_code, msg, headers=dict(exc.headers) if exc.headers else None)
        )

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        errs = exc.errors()
        param = ".".join(str(x) for x in errs[0]["loc"][1:]) if errs else None
        return _error_response(APIError(400, "Invalid request parameters.", param=param or None))

    @app.exception_handler(Exception)
    async def _internal_error(request: Request, exc: Exception) -> JSONResponse:
        logger.error("internal_error", exc_info=exc)
        return _error_response(APIError(500, "Internal server error.", code="internal_error"))

    # ---- routes ------------------------------------------------------------------------------
    @app.post(
        "/v1/embeddings",
        openapi_extra=_embeddings_openapi(s),
        response_model=None,
        summary="Create protected embeddings",
    )
    async def embeddings(request: Request) -> Response:
        fields = request.scope[_LOG_KEY]
        svc = service()
        principal = authenticate(request)
        wait = limiter.acquire(principal)
        if wait > 0:
            raise APIError(
                429,
                "Rate limit reached for this API key; retry later.",
                code="rate_limit_exceeded",
                headers={"Retry-After": str(max(1, int(wait + 0.999)))},
            )
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
        req = parse_embeddings_request(
            obj, max_inputs=s.max_inputs, max_input_chars=s.max_input_chars
        )
        model = lookup_model(req.model, principal)
        dims = _resolve_dims(model, req.dimensions, svc.backends[model.backend].dim)
        fields.update(
            model=model.name,
            n_inputs=len(req.texts),
            chars=sum(len(t) for t in req.texts),
            encoding_format=req.encoding_format,
            dimensions=req.dimensions,
        )
        metrics.inputs += len(req.texts)
        ids = svc.record_ids(req.texts)
        unique = dict(zip(ids, req.texts, strict=True))
        subject = req.user or request.headers.get(s.subject_header) or principal.name
        fields["subject"] = hashlib.sha256(subject.encode()).hexdigest()[:12]
        try:
            got = await asyncio.wait_for(
                svc.embed(model, dims, list(unique), list(unique.values()), subject=subject),
                timeout=s.request_timeout_s,
            )
        except QueueFull:
            metrics.refused["queue_full"] += 1
            raise APIError(
                503,
                "The server is overloaded (queue full); retry later.",
                code="overloaded",
                headers={"Retry-After": str(svc.batchers[model.backend].retry_after())},
            ) from None
        except ShuttingDown:
            raise APIError(
                503,
                "The server is shutting down.",
                code="shutting_down",
                headers={"Retry-After": "5"},
            ) from None
        except TimeoutError:
            raise APIError(
                503,
                f"The request did not finish within {s.request_timeout_s:g} s; retry later.",
                code="timeout",
                headers={"Retry-After": "5"},
            ) from None
        except BackendError as exc:
            metrics.refused["backend"] += 1
            hdr = {"Retry-After": str(max(1, int(exc.retry_after)))} if exc.retry_after else None
            raise APIError(exc.status, str(exc) + ".", code="upstream_error", headers=hdr) from None
        except BudgetRefused as exc:
            metrics.refused["budget"] += 1
            what = (
                "this subject's privacy budget (all its texts together)"
                if exc.scope == "subject"
                else "the per-text privacy budget"
            )
            raise APIError(
                403,
                f"Releasing these inputs would exceed {what}.",
                param="input",
                code="privacy_budget_exceeded",
            ) from None
        except LedgerUnavailable:
            metrics.refused["ledger_busy"] += 1
            raise APIError(
                503,
                "The privacy ledger is busy (locked by another process); retry later.",
                code="ledger_busy",
                headers={"Retry-After": str(max(1, int(s.ledger_timeout_s + 0.999)))},
            ) from None
        data = []
        for i, rid in enumerate(ids):
            v = got.vectors[rid]
            emb: Any = (
                base64.b64encode(v.astype("<f4", copy=False).tobytes()).decode("ascii")
                if req.encoding_format == "base64"
                else v.tolist()
            )
            data.append({"object": "embedding", "index": i, "embedding": emb})
        n_tokens = sum(got.tokens[r] for r in ids)
        metrics.count_vectors(model.name, model.treatment, len(ids))
        payload = {
            "object": "list",
            "data": data,
            "model": model.name,
            "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
        }
        return Response(
            json.dumps(payload, separators=(",", ":")),
            media_type="application/json",
            headers={"Cache-Control": "no-store"},
        )

    def model_card(m: ModelConfig, svc: Service) -> dict[str, Any]:
        desc = next(d for d in svc.describe_models() if d["id"] == m.name)
        return {
            "id": m.name,
            "object": "model",
            "created": int(metrics.started),
            "owned_by": "privembed",
            "privembed": {k: v for k, v in desc.items() if k != "id"},
        }

    @app.get(
        "/v1/models", summary="List the models this key may use", responses=_error_responses(401)
    )
    async def list_models(request: Request) -> JSONResponse:
        svc = service()
        principal = authenticate(request)
        data = [model_card(m, svc) for n, m in cfg.models.items() if principal.allows(n)]
        return JSONResponse({"object": "list", "data": data})

    @app.get(
        "/v1/models/{model}",
        summary="Describe one model",
        responses=_error_responses(401, 403, 404),
    )
    async def get_model(model: str, request: Request) -> JSONResponse:
        svc = service()
        principal = authenticate(request)
        return JSONResponse(model_card(lookup_model(model, principal), svc))

    @app.get("/healthz", summary="Liveness and readiness")
    async def healthz() -> JSONResponse:
        svc = holder.get("service")
        ready = svc is not None and svc.ready
        body: dict[str, Any] = {
            "status": "ok" if ready else "unavailable",
            "models": len(cfg.models),
        }
        if svc is not None:
            h = svc.ledger_health
            body["ledger"] = {"state": h.state, "since": h.since}
            if h.state == "busy":
                body["status"] = "degraded"  # embeddings that need the ledger answer 503
        return JSONResponse(body, status_code=200 if ready else 503)

    @app.get(
        "/metrics",
        summary="Request counts, latencies, vectors protected",
        responses=_error_responses(400, 401),
    )
    async def metrics_route(request: Request, format: str = "prometheus") -> Response:
        if s.metrics_require_auth:
            authenticate(request)
        svc = holder.get("service")
        metrics.queue_depth = svc.queue_depth if svc is not None else 0
        if format == "json":
            return JSONResponse(metrics.snapshot())
        if format != "prometheus":
            raise _bad(
                f"format must be 'prometheus' or 'json', got {format[:50]!r}.",
                param="format",
                code="invalid_value",
            )
        return PlainTextResponse(metrics.prometheus(), media_type="text/plain; version=0.0.4")

    app.add_middleware(_Observe, metrics=metrics, max_body=s.max_body_bytes)
    app.state.config = cfg
    app.state.metrics = metrics
    return app


def _version() -> str:
    from .. import __version__

    return __version__
