"""The web UI's server side over plain HTTP: security headers, the config endpoint, the demo login
(a host-style token in the cookie), tenancy, and what product mode leaves out."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from tests.fixtures.server import Vernis
from tests.ui.conftest import UIFactory
from vernis.app import verifier_from
from vernis.web.security import CONTENT_SECURITY_POLICY

PAGES = [
    "/login",
    "/contacts",
    "/calls",
    "/static/vernis/assistant.js",
    "/static/vernis/element.js",
    "/static/vernis/assistant.css",
    "/static/vendor/purify.js",
    "/api/assistant/config",
]


@pytest.fixture
async def client(vernis: Vernis) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=vernis.http_url) as client:
        yield client


def signed_in(vernis: Vernis, email: str = "member@acme.test") -> dict[str, str]:
    return {"Cookie": f"vernis_token={vernis.token(email)}"}


async def test_every_page_and_asset_carries_the_security_headers(
    vernis: Vernis, client: httpx.AsyncClient
) -> None:
    """Pages, scripts, styles and the config all carry the strict Content-Security-Policy and nosniff."""
    assert "script-src 'self'" in CONTENT_SECURITY_POLICY
    assert "frame-ancestors 'none'" in CONTENT_SECURITY_POLICY
    for path in PAGES:
        response = await client.get(path, headers=signed_in(vernis))
        assert response.status_code == 200, path
        assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY, path
        assert response.headers["x-content-type-options"] == "nosniff", path
    script = await client.get("/static/vernis/element.js")
    assert script.headers["content-type"].startswith("text/javascript")


async def test_config_says_whether_answers_are_scripted(ui_factory: UIFactory) -> None:
    """`/api/assistant/config` refuses a visitor without a token (401 JSON) and tells a member `scripted: true` only when the server runs the scripted model."""
    for flag in (True, False):
        async with (
            ui_factory(scripted_flag=flag) as vernis,
            httpx.AsyncClient(base_url=vernis.http_url) as client,
        ):
            refused = await client.get("/api/assistant/config")
            assert refused.status_code == 401
            assert refused.json()["error"]["code"] == "unauthenticated"
            response = await client.get("/api/assistant/config", headers=signed_in(vernis))
            assert response.status_code == 200
            body = response.json()
            assert (body["name"], body["scripted"]) == ("Vernis", flag)
            assert body["quick_actions"]


async def test_product_mode_serves_the_assistant_but_no_demo(ui_factory: UIFactory) -> None:
    """Without demo mode the assistant's files and API are served, but no login, no CRM pages, no demo assets and no CRM quick actions."""
    async with (
        ui_factory(demo=False) as vernis,
        httpx.AsyncClient(base_url=vernis.http_url) as client,
    ):
        for path in ("/", "/login", "/contacts", "/calls", "/static/demo/demo.css"):
            assert (await client.get(path, headers=signed_in(vernis))).status_code == 404, path
        assert (await client.post("/login", data={"email": "owner@acme.test"})).status_code == 404
        assert (await client.get("/static/vernis/element.js")).status_code == 200
        config = await client.get("/api/assistant/config", headers=signed_in(vernis))
        assert config.json() == {
            "name": "Vernis",
            "greeting": None,
            "avatar_url": None,
            "scripted": True,
            "quick_actions": [],
            "pages": [],
            "image_origins": [],
            "navigable": [],
            "reviewer": False,
        }


async def test_root_redirects_to_login_without_a_cookie(vernis: Vernis, client: httpx.AsyncClient) -> None:
    """`/` and the CRM pages send a visitor without a valid cookie to the login page, and one with it to the contacts."""
    assert (await client.get("/")).headers["location"] == "/login"
    response = await client.get("/contacts/abc?x=1")
    assert response.status_code == 303
    assert response.headers["location"] == "/login?next=/contacts/abc%3Fx%3D1"
    response = await client.get("/contacts", headers={"Cookie": "vernis_token=not-a-token"})
    assert response.headers["location"].startswith("/login")
    assert (await client.get("/", headers=signed_in(vernis))).headers["location"] == "/contacts"


async def test_login_sets_a_safe_cookie(vernis: Vernis, client: httpx.AsyncClient) -> None:
    """POST /login sets an HttpOnly, SameSite=Lax token cookie the socket accepts, and only redirects within the site."""
    response = await client.post("/login", data={"email": "viewer@acme.test", "next": "/calls"})
    assert response.status_code == 303
    assert response.headers["location"] == "/calls"
    cookie = response.headers["set-cookie"]
    assert cookie.startswith("vernis_token=")
    assert "HttpOnly" in cookie
    assert "SameSite=lax" in cookie
    assert "Path=/" in cookie
    token = cookie.split(";")[0].removeprefix("vernis_token=")
    async with vernis.connect(None, additional_headers={"Cookie": f"vernis_token={token}"}) as socket:
        await socket.until("history_end")
    # The token a host signs for its user: the host's ids and the member's details as claims.
    verifier = verifier_from(vernis.settings)
    try:
        claims = await verifier.verify(token)
    finally:
        await verifier.aclose()
    assert (claims.sub, claims.org) == ("viewer@acme.test", "acme")
    assert (claims.email, claims.role, claims.org_name) == ("viewer@acme.test", "viewer", "Acme Dental")
    assert claims.name
    for target in ("//evil.example/", "https://evil.example/", "/\\evil.example"):
        response = await client.post("/login", data={"email": "viewer@acme.test", "next": target})
        assert response.headers["location"] == "/contacts", target


async def test_login_refuses_unknown_members_and_cross_site_posts(client: httpx.AsyncClient) -> None:
    """An unknown e-mail is refused with the login page again; a form posted from another site is refused outright."""
    response = await client.post("/login", data={"email": "nobody@acme.test"})
    assert response.status_code == 400
    assert "No such demo member." in response.text
    assert "set-cookie" not in response.headers
    response = await client.post(
        "/login", data={"email": "owner@acme.test"}, headers={"Origin": "https://evil.example"}
    )
    assert response.status_code == 403
    assert "set-cookie" not in response.headers


async def test_logout_forgets_the_cookie(vernis: Vernis, client: httpx.AsyncClient) -> None:
    """POST /logout clears the cookie and goes back to the login page."""
    response = await client.post("/logout", headers=signed_in(vernis))
    assert response.headers["location"] == "/login"
    assert 'vernis_token=""' in response.headers["set-cookie"]


async def test_the_crm_shows_only_the_members_organization(vernis: Vernis, client: httpx.AsyncClient) -> None:
    """The contact pages are scoped to the signed-in member's organization: another one's contact is not found."""
    ours = vernis.seed.entities["acme:contact:Jane Cooper"]
    theirs = vernis.seed.entities["globex:contact:Jane Cooper"]
    page = await client.get(f"/contacts/{ours}", headers=signed_in(vernis))
    assert page.status_code == 200
    assert f'<body data-entity-type="contact" data-entity-id="{ours}">' in page.text
    assert '<script type="module" src="/static/vernis/assistant.js"></script>' in page.text
    assert (await client.get(f"/contacts/{theirs}", headers=signed_in(vernis))).status_code == 404
    assert (await client.get("/contacts/not-a-uuid", headers=signed_in(vernis))).status_code == 404
    listing = await client.get("/contacts", params={"q": "Jane Cooper"}, headers=signed_in(vernis))
    assert f"/contacts/{ours}" in listing.text
    assert f"/contacts/{theirs}" not in listing.text
    globex = await client.get(
        "/contacts", params={"q": "Jane Cooper"}, headers=signed_in(vernis, "owner@globex.test")
    )
    assert f"/contacts/{theirs}" in globex.text
    assert f"/contacts/{ours}" not in globex.text


async def test_demo_pages_escape_what_they_show(vernis: Vernis, client: httpx.AsyncClient) -> None:
    """A search term is escaped back into the page, never interpreted."""
    page = await client.get(
        "/contacts", params={"q": '"><script>alert(1)</script>'}, headers=signed_in(vernis)
    )
    assert "<script>alert(1)</script>" not in page.text
    assert "&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
