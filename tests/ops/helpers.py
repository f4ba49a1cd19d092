"""Helpers of the operations tests: the scripted model's chat requests, /metrics read and parsed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.fixtures.server import Vernis
from vernis.model.scripted import SCRIPTED_CHAT_MODEL

__all__ = ["chat_requests", "is_chat", "sample", "scrape"]


def is_chat(body: Mapping[str, Any]) -> bool:
    return body.get("model") == SCRIPTED_CHAT_MODEL


def chat_requests(vernis: Vernis) -> list[dict[str, Any]]:
    return [body for body in vernis.scripted.requests if is_chat(body)]


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(url: str, token: str | None = None) -> Samples:
    """GET /metrics, parsed by prometheus-client's own parser: {(sample name, labels): value}."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient() as http:
        response = await http.get(f"{url}/metrics", headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }


def sample(samples: Samples, name: str, **labels: str) -> float:
    """The value of one sample (0 when absent: a labelled counter appears at its first increment)."""
    return samples.get((name, frozenset(labels.items())), 0.0)
