"""Fuzz the server's own OpenAPI schema with schemathesis (positive and negative cases): no 5xx,
and every error in the OpenAI format. Bounded and derandomised (same cases every run)."""

from __future__ import annotations

from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, seed, settings
from schemathesis.checks import not_a_server_error

from privembed.server import config_from_dict, create_app

from .conftest import FULL_KEY, make_config

pytestmark = pytest.mark.slow

AUTH = {"Authorization": f"Bearer {FULL_KEY}"}


def _schema() -> dict:
    """The served app's OpenAPI document (same limits as the ``served`` fixture's server)."""
    raw = make_config("http://127.0.0.1:9", Path("unused.key"))
    doc = create_app(config_from_dict(raw, key=bytes(32))).openapi()
    # steer positive cases to configured models (the served schema does not list them)
    names = [*sorted(raw["models"]), "no-such-model"]
    body = doc["paths"]["/v1/embeddings"]["post"]["requestBody"]["content"]["application/json"]
    body["schema"]["properties"]["model"] = {"type": "string", "enum": names}
    for p in doc["paths"]["/v1/models/{model}"]["get"]["parameters"]:
        if p["name"] == "model":
            p["schema"] = {"type": "string", "enum": names}
    return doc


# schemathesis' lazy fixture loader does not run under pytest 9 (it rewrites Function._nodeid),
# so the schema is built at import time from the same configuration the fixture serves
schema = schemathesis.openapi.from_dict(_schema())


@schema.parametrize()
@seed(20260101)
@settings(
    max_examples=25,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_no_server_errors(case, served):
    handle, _, _ = served
    response = case.call(base_url=handle.url, headers=AUTH, timeout=30)
    case.validate_response(response, checks=[not_a_server_error])
    assert response.status_code < 500, response.text
    if response.status_code >= 400 and case.path.startswith("/v1"):
        err = response.json()["error"]
        assert set(err) == {"message", "type", "param", "code"}
