"""Who may open the socket (SPEC §2), through real uvicorn and a real websockets client."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from tests.data import database
from tests.fixtures.server import Vernis, VernisFactory
from vernis.identity import issue_token


async def refused_status(vernis: Vernis, **options: Any) -> int:
    headers = options.pop("headers", {})
    with pytest.raises(InvalidStatus) as info:
        async with connect(vernis.ws_url, additional_headers=headers, open_timeout=5, **options):
            pass
    status: int = info.value.response.status_code
    return status


async def set_member(vernis: Vernis, email: str, **values: Any) -> None:
    async with database(vernis) as engine, engine.begin() as connection:
        await connection.execute(
            sa.text(
                f"UPDATE member SET {', '.join(f'{key} = :{key}' for key in values)} WHERE email = :email"
            ),
            {**values, "email": email},
        )


async def test_no_token_is_refused_with_403(vernis: Vernis) -> None:
    """A handshake without any token is refused before accept with HTTP 403."""
    assert await refused_status(vernis) == 403


async def test_bad_tokens_are_refused_with_403(vernis: Vernis) -> None:
    """Expired, garbage and foreign-signed tokens are refused with 403."""
    expired = vernis.token(ttl=-60)  # beyond the 30 s leeway
    assert await refused_status(vernis, headers={"Authorization": f"Bearer {expired}"}) == 403
    assert await refused_status(vernis, headers={"Authorization": "Bearer not-a-token"}) == 403
    forged = issue_token("a-different-secret-of-enough-length-32b", sub="member@acme.test", org="acme")
    assert await refused_status(vernis, headers={"Authorization": f"Bearer {forged}"}) == 403


async def test_token_in_url_is_not_accepted(vernis: Vernis) -> None:
    """A token passed in the query string is ignored: the handshake is refused."""
    token = vernis.token()
    with pytest.raises(InvalidStatus) as info:
        async with connect(f"{vernis.ws_url}?token={token}&access_token={token}", open_timeout=5):
            pass
    assert info.value.response.status_code == 403


async def test_foreign_origin_is_refused_and_own_origin_accepted(vernis: Vernis) -> None:
    """A browser Origin other than the server's own is refused (CSWSH); the server's own origin connects."""
    token = vernis.token()
    headers = {"Authorization": f"Bearer {token}"}
    assert await refused_status(vernis, headers=headers, origin="http://evil.test") == 403
    async with vernis.connect(origin=f"http://127.0.0.1:{vernis.port}") as client:
        await client.expect("conversation_loaded", "history_end")


async def test_allowed_origins_setting_is_honoured(vernis_factory: VernisFactory) -> None:
    """With VERNIS_ALLOWED_ORIGINS set, exactly the listed origins may connect."""
    async with vernis_factory(allowed_origins="https://app.acme.test, https://admin.acme.test") as vernis:
        headers = {"Authorization": f"Bearer {vernis.token()}"}
        async with vernis.connect(origin="https://admin.acme.test") as client:
            await client.expect("conversation_loaded", "history_end")
        assert await refused_status(vernis, headers=headers, origin=f"http://127.0.0.1:{vernis.port}") == 403


async def test_member_without_assistant_use_is_refused(vernis: Vernis) -> None:
    """A member whose organization revoked `assistant:use` cannot open the socket (403)."""
    await set_member(vernis, "viewer@acme.test", revoked_permissions='["assistant:use"]')
    headers = {"Authorization": f"Bearer {vernis.token('viewer@acme.test')}"}
    assert await refused_status(vernis, headers=headers) == 403
    async with vernis.connect("member@acme.test") as client:
        await client.expect("conversation_loaded", "history_end")


async def test_removed_member_is_refused(vernis: Vernis) -> None:
    """A removed member's still-valid token is refused (403)."""
    await set_member(vernis, "member@acme.test", removed_at="2026-01-01 00:00:00+00:00")
    headers = {"Authorization": f"Bearer {vernis.token()}"}
    assert await refused_status(vernis, headers=headers) == 403


async def test_cookie_and_subprotocol_tokens_are_accepted(vernis: Vernis) -> None:
    """The vernis_token cookie and the vernis.token.<jwt> subprotocol both authenticate; vernis.v1 is selected."""
    token = vernis.token()
    async with vernis.connect(
        None, additional_headers={"Cookie": f"theme=dark; vernis_token={token}"}
    ) as client:
        assert client.ws.subprotocol == "vernis.v1"
        await client.expect("conversation_loaded", "history_end")
    async with vernis.connect(None, subprotocols=["vernis.v1", f"vernis.token.{token}"]) as client:
        assert client.ws.subprotocol == "vernis.v1"
        await client.expect("conversation_loaded", "history_end")


@pytest.mark.parametrize("offered", [["token"], ["vernis.v1", "token"], ["token", "vernis.v1"]])
async def test_the_selected_subprotocol_never_echoes_the_token(vernis: Vernis, offered: list[str]) -> None:
    """Offered `vernis.token.<jwt>` alone or beside `vernis.v1`, the server selects `vernis.v1` or none: the token is in no response header."""
    token = vernis.token()
    subprotocols = [f"vernis.token.{token}" if name == "token" else name for name in offered]
    async with vernis.connect(None, subprotocols=subprotocols) as client:
        await client.expect("conversation_loaded", "history_end")
        response = client.ws.response
        assert client.ws.subprotocol == ("vernis.v1" if "vernis.v1" in offered else None)
    assert response is not None
    assert response.headers.get_all("Sec-WebSocket-Protocol") == (
        ["vernis.v1"] if "vernis.v1" in offered else []
    )
    assert token not in str(response.headers)


async def test_expiring_token_closes_open_socket_with_4401(vernis: Vernis) -> None:
    """A token that expires while the socket is open closes it with 4401."""
    async with vernis.connect(token=vernis.token(ttl=2)) as client:
        await client.expect("conversation_loaded", "history_end")
        with pytest.raises(ConnectionClosed) as info:
            await client.recv(timeout=6)
        assert info.value.rcvd is not None
        assert info.value.rcvd.code == 4401


async def test_member_removed_while_connected_is_closed_with_4401(vernis_factory: VernisFactory) -> None:
    """A member removed while their socket is open is disconnected with 4401 at the next check."""
    async with vernis_factory(auth_check_interval=0.2) as vernis, vernis.opened() as client:
        await set_member(vernis, "member@acme.test", removed_at="2026-01-01 00:00:00+00:00")
        with pytest.raises(ConnectionClosed) as info:
            await client.recv(timeout=5)
        assert info.value.rcvd is not None
        assert info.value.rcvd.code == 4401
