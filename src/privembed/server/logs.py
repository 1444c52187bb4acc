"""Structured JSON logs: one object per line, never an input text or a vector.

Request lines carry the route, status, latency, model, number of inputs and their total length,
the API key's *name* and a request id -- nothing a client sent as content. Exceptions are logged
as their type and the code locations of the traceback (file, line, function), without the
exception message, which can quote data (a decoder error, an upstream's reply).

Examples
--------
>>> import logging
>>> rec = logging.LogRecord("privembed.server", logging.INFO, __file__, 1, "request", None, None)
>>> rec.fields = {"status": 200, "n_inputs": 2}
>>> out = json.loads(JsonFormatter().format(rec))
>>> (out["level"], out["event"], out["status"], out["n_inputs"])
('info', 'request', 200, 2)
"""

from __future__ import annotations

import json
import logging
import time
import traceback
from typing import Any

__all__ = ["LOGGER_NAME", "JsonFormatter", "log_config", "logger"]

LOGGER_NAME = "privembed.server"
logger = logging.getLogger(LOGGER_NAME)


class JsonFormatter(logging.Formatter):
    """Format records as one JSON object (``ts``, ``level``, ``logger``, ``event`` + fields)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage() if record.name != LOGGER_NAME else str(record.msg),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            out.update(fields)
        if record.exc_info and record.exc_info[0] is not None:
            etype, _, tb = record.exc_info
            out["exc_type"] = etype.__name__
            out["exc_at"] = [
                f"{f.filename.rsplit('/', 1)[-1]}:{f.lineno} in {f.name}"
                for f in traceback.extract_tb(tb)[-6:]
            ]
        return json.dumps(out, default=str, separators=(",", ":"))


def log_config(level: str = "info") -> dict[str, Any]:
    """A :func:`logging.config.dictConfig` for uvicorn and the server: JSON lines on stderr.

    Uvicorn's access log is off: the server writes its own request line (without the client's
    query string or headers).
    """
    lvl = level.upper()
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": f"{__name__}.JsonFormatter"}},
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "formatter": "json",
                "stream": "ext://sys.stderr",
            }
        },
        "loggers": {
            "uvicorn": {"handlers": ["stderr"], "level": lvl, "propagate": False},
            "uvicorn.error": {"handlers": ["stderr"], "level": lvl, "propagate": False},
            "uvicorn.access": {"handlers": [], "level": "WARNING", "propagate": False},
            LOGGER_NAME: {"handlers": ["stderr"], "level": lvl, "propagate": False},
        },
    }
