"""The example helpdesk API, in process: every request authenticated, everything scoped to the token's org."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import jwt
import pytest

from tests.helpdesk.support import ORG, SECRET, RsaKey, host_token
from vernis.exceptions import ConfigError
from vernis_helpdesk.api import create_api, main

ENDPOINTS = [
    ("GET", "/tickets", None),
    ("GET", "/tickets/T-1001", None),
    ("POST", "/tickets/T-1001/status", {"status": "solved"}),
    ("POST", "/tickets/T-1001/comments", {"body": "Hello"}),
]


@pytest.fixture
async def api() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_api(SECRET)), base_url="http://helpdesk.test"
    ) as client:
        yield client


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def tickets(api: httpx.AsyncClient, token: str, **params: Any) -> list[dict[str, Any]]:
    response = await api.get("/tickets", params=params, headers=bearer(token))
    assert response.status_code == 200, response.text
    found: list[dict[str, Any]] = response.json()["tickets"]
    return found


@pytest.mark.parametrize(("method", "path", "body"), ENDPOINTS)
async def test_every_endpoint_refuses_a_request_without_a_token(
    api: httpx.AsyncClient, method: str, path: str, body: dict[str, Any] | None
) -> None:
    """A request without `Authorization: Bearer` gets 401 with a Bearer challenge, and changes nothing."""
    response = await api.request(method, path, json=body)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert response.json()["error"]["code"] == "unauthenticated"
    (ticket,) = [t for t in await tickets(api, host_token()) if t["id"] == "T-1001"]
    assert (ticket["status"], ticket["comment_count"]) == ("open", 1)


@pytest.mark.parametrize(
    "token",
    [
        "not-a-jwt",
        host_token(secret="another-secret-that-is-also-long-enough-1234"),
        host_token(ttl=-3600),
        jwt.encode({"sub": "agent-42", "org": ORG, "exp": 4_000_000_000}, "", algorithm="none"),
    ],
    ids=["garbage", "foreign-secret", "expired", "alg-none"],
)
@pytest.mark.parametrize(("method", "path", "body"), ENDPOINTS)
async def test_every_endpoint_refuses_a_token_it_cannot_verify(
    api: httpx.AsyncClient, method: str, path: str, body: dict[str, Any] | None, token: str
) -> None:
    """A garbage, foreign, expired or unsigned token gets 401 on every endpoint."""
    response = await api.request(method, path, json=body, headers=bearer(token))
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthenticated"


async def test_an_organization_sees_only_its_own_tickets(api: httpx.AsyncClient) -> None:
    """Each organization gets its own tickets; another organization's ticket is a 404 to read, change or comment on."""
    acme = host_token(org="acme-support")
    globex = host_token(sub="g-1", org="globex")
    acme_ids = {t["id"] for t in await tickets(api, acme)}
    globex_ids = {t["id"] for t in await tickets(api, globex)}
    assert acme_ids == {"T-1001", "T-1002", "T-1003", "T-1004", "T-1005"}
    assert len(globex_ids) == 5
    assert not acme_ids & globex_ids
    for method, path, body in ENDPOINTS[1:]:
        response = await api.request(method, path, json=body, headers=bearer(globex))
        assert response.status_code == 404, (method, path)
        assert response.json()["error"] == {"code": "not_found", "message": "There is no ticket T-1001."}
    ticket = (await api.get("/tickets/T-1001", headers=bearer(acme))).json()
    assert (ticket["status"], len(ticket["comments"])) == ("open", 1)


async def test_filters_by_status_assignee_and_words(api: httpx.AsyncClient) -> None:
    """status, assigned=me and q narrow the list; the first user of an organization holds three tickets."""
    me = host_token(sub="agent-42")
    everything = await tickets(api, me)
    assert [t["priority"] for t in everything][:2] == ["urgent", "high"]
    assert {t["id"] for t in await tickets(api, me, status="open")} == {"T-1001", "T-1002", "T-1004"}
    mine = await tickets(api, me, assigned="me")
    assert {t["id"] for t in mine} == {"T-1001", "T-1002", "T-1003"}
    assert {t["assignee"] for t in mine} == {"agent-42"}
    assert await tickets(api, host_token(sub="agent-43"), assigned="me") == []
    assert [t["id"] for t in await tickets(api, me, q="VAT invoice")] == ["T-1002"]
    assert [t["id"] for t in await tickets(api, me, q="northwind")] == ["T-1001"]
    assert len(await tickets(api, me, limit=2)) == 2


async def test_changes_status_and_adds_comments_as_the_token_user(api: httpx.AsyncClient) -> None:
    """A status change returns the previous status; a comment is signed with the token's sub and name."""
    token = host_token(sub="agent-42", name="Alex Agent")
    response = await api.post("/tickets/t-1001/status", json={"status": "pending"}, headers=bearer(token))
    assert response.status_code == 200
    assert response.json()["previous_status"] == "open"
    response = await api.post("/tickets/T-1001/comments", json={"body": " On it. "}, headers=bearer(token))
    assert response.status_code == 201
    comment = response.json()["comment"]
    assert (comment["author"], comment["author_name"], comment["body"]) == (
        "agent-42",
        "Alex Agent",
        "On it.",
    )
    ticket = (await api.get("/tickets/T-1001", headers=bearer(token))).json()
    assert (ticket["status"], ticket["updated_by"]) == ("pending", "agent-42")
    assert [c["body"] for c in ticket["comments"]][-1] == "On it."


async def test_who_may_change_tickets_follows_the_token(api: httpx.AsyncClient) -> None:
    """A viewer may read but not change (403); a `permissions` claim decides over the role when present."""
    viewer = host_token(sub="v-1", role="viewer")
    assert (await api.get("/tickets/T-1001", headers=bearer(viewer))).status_code == 200
    for _, path, body in ENDPOINTS[2:]:
        response = await api.post(path, json=body, headers=bearer(viewer))
        assert response.status_code == 403
        assert response.json()["error"]["code"] == "forbidden"
    granted = host_token(sub="v-2", role="viewer", permissions=["ticket:view", "ticket:update"])
    response = await api.post("/tickets/T-1002/status", json={"status": "solved"}, headers=bearer(granted))
    assert response.status_code == 200
    withheld = host_token(sub="a-1", role="agent", permissions=["ticket:view"])
    response = await api.post("/tickets/T-1003/status", json={"status": "solved"}, headers=bearer(withheld))
    assert response.status_code == 403


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        ("/tickets/T-1001/status", {"status": "closed"}, 422),
        ("/tickets/T-1001/status", {"status": "solved", "extra": 1}, 422),
        ("/tickets/T-1001/comments", {"body": "   "}, 422),
        ("/tickets/T-1001/comments", {"body": "x" * 5001}, 422),
        ("/tickets/T-1001/comments", "not json", 400),
    ],
)
async def test_bad_input_is_refused_with_the_reason(
    api: httpx.AsyncClient, path: str, body: Any, status: int
) -> None:
    """An unknown status, an unknown key, an empty or over-long comment, or a body that is not JSON is refused."""
    content = body if isinstance(body, str) else None
    json_body = None if isinstance(body, str) else body
    response = await api.post(path, json=json_body, content=content, headers=bearer(host_token()))
    assert response.status_code == status
    assert response.json()["error"]["message"]


async def test_list_parameters_are_checked(api: httpx.AsyncClient) -> None:
    """An unknown status or an out-of-range limit is a 422 naming the parameter."""
    for params in ({"status": "closed"}, {"limit": "0"}, {"limit": "101"}, {"assigned": "them"}):
        response = await api.get("/tickets", params=params, headers=bearer(host_token()))
        assert response.status_code == 422
        assert next(iter(params)) in response.json()["error"]["message"]


async def test_verifies_rs256_tokens_with_a_public_key(rsa_key: RsaKey) -> None:
    """With the host's public key the API accepts its RS256 tokens and refuses HS256 ones."""
    app = create_api(public_key=rsa_key.public_pem)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://h.test") as api:
        signed = rsa_key.sign({"sub": "agent-42", "org": ORG, "role": "agent"})
        assert (await api.get("/tickets", headers=bearer(signed))).status_code == 200
        assert (await api.get("/tickets", headers=bearer(host_token()))).status_code == 401


def test_needs_a_way_to_verify_tokens() -> None:
    """Without a secret or a public key the API does not start; a short secret is refused too."""
    with pytest.raises(ConfigError, match="no way to verify"):
        create_api()
    with pytest.raises(ConfigError, match="shorter than 32 bytes"):
        create_api("short")


def test_standalone_needs_the_secret(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`python -m vernis_helpdesk.api` without VERNIS_JWT_SECRET or _PUBLIC_KEY exits 2 naming both."""
    monkeypatch.delenv("VERNIS_JWT_SECRET", raising=False)
    monkeypatch.delenv("VERNIS_JWT_PUBLIC_KEY", raising=False)
    assert main(["--port", "0"]) == 2
    error = capsys.readouterr().err
    assert "VERNIS_JWT_SECRET" in error
    assert "VERNIS_JWT_PUBLIC_KEY" in error
