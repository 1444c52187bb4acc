"""A drop-in privacy proxy: an OpenAI-compatible embeddings server that returns protected vectors.

Point any OpenAI-style client (``openai``, LangChain, LlamaIndex, Chroma's embedding functions)
at ``privembed serve`` and every embedding it gets back is protected by the configured mechanism,
with keyed noise (the same text always gets the same vector) and an optional privacy ledger.
See ``docs/server.md`` for the configuration reference and security notes.

Needs the ``serve`` extra (``pip install 'privembed[serve]'``).

>>> from privembed.server import config_from_dict, create_app
>>> cfg = config_from_dict(
...     {"server": {"allow_unauthenticated": True},
...      "models": {"docs": {"mechanism": "gaussian", "params": {"epsilon": 8, "delta": 1e-5}}}},
...     key=bytes(32))
>>> app = create_app(cfg)
>>> sorted(r.path for r in app.routes if r.path.startswith("/v1"))
['/v1/embeddings', '/v1/models', '/v1/models/{model}']
"""

from __future__ import annotations

from ..core._optional import require

require("fastapi", "serve", purpose="the embeddings server")
require("uvicorn", "serve", purpose="the embeddings server")
require("httpx", "serve", purpose="upstream embedding backends")
require("pydantic", "serve", purpose="validating the server configuration")

from .app import create_app, parse_embeddings_request  # noqa: E402
from .auth import hash_api_key, new_api_key  # noqa: E402
from .config import (  # noqa: E402
    ApiKeyConfig,
    BackendConfig,
    ModelConfig,
    ServeConfig,
    ServerSettings,
    check_bind,
    config_from_dict,
    load_config,
)
from .errors import APIError, ConfigError  # noqa: E402
from .runner import RunningServer, running_server, serve_forever  # noqa: E402
from .service import backend_key, text_record_id  # noqa: E402

__all__ = [
    "APIError",
    "ApiKeyConfig",
    "BackendConfig",
    "ConfigError",
    "ModelConfig",
    "RunningServer",
    "ServeConfig",
    "ServerSettings",
    "backend_key",
    "check_bind",
    "config_from_dict",
    "create_app",
    "hash_api_key",
    "load_config",
    "new_api_key",
    "parse_embeddings_request",
    "running_server",
    "serve_forever",
    "text_record_id",
]
