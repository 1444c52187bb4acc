"""Errors in the OpenAI format: ``{"error": {"message", "type", "param", "code"}}``.

Every non-2xx response of the server has this body (clients such as ``openai`` read
``error.message``), and none carries a stack trace or an input text.

Examples
--------
>>> e = APIError(400, "input must not be empty.", param="input", code="empty_input")
>>> e.body()
{'error': {'message': 'input must not be empty.', 'type': 'invalid_request_error', 'param': 'input', 'code': 'empty_input'}}
"""

from __future__ import annotations

from typing import Any

__all__ = ["ERROR_TYPES", "APIError", "ConfigError", "error_body"]

#: default ``error.type`` per status (the values OpenAI's API uses where it has one)
ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "permission_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    502: "server_error",
    503: "server_error",
    504: "server_error",
}


class ConfigError(ValueError):
    """An invalid server configuration (the message names the file, table and key)."""


def error_body(
    message: str, *, status: int, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """The OpenAI error object for ``status``."""
    return {
        "error": {
            "message": message,
            "type": ERROR_TYPES.get(
                status, "invalid_request_error" if status < 500 else "server_error"
            ),
            "param": param,
            "code": code,
        }
    }


class APIError(Exception):
    """An error answered to the client with ``status`` and an OpenAI-format body.

    Parameters
    ----------
    status : int
        HTTP status (4xx for the client's mistakes, 5xx for ours or the upstream's).
    message : str
        Human-readable; never includes input text or vectors.
    param : str, optional
        The request field at fault (``"input"``, ``"input[3]"``, ``"model"``...).
    code : str, optional
        A stable machine-readable code (``"invalid_api_key"``, ``"model_not_found"``...).
    headers : dict, optional
        Extra response headers (``Retry-After`` for 429 and 503).
    details : dict, optional
        Extra members of the error object (``budget`` of a 403 ``privacy_budget_exceeded``:
        what the client's budgets have spent and have left); clients that know only the
        OpenAI fields ignore them.
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers or {}
        self.details = details or {}

    def body(self) -> dict[str, Any]:
        body = error_body(self.message, status=self.status, param=self.param, code=self.code)
        body["error"].update(self.details)
        return body
