"""The admin API's revocation across two instances on one PostgreSQL and one Redis (SPEC §10, §15):
revoked through instance A, the member's socket on instance B closes with 4401 at once (through
Redis, not B's periodic watch), and B refuses the old token.
"""

from __future__ import annotations

import pytest
from websockets.exceptions import InvalidStatus

from tests.fixtures.server import VernisFactory
from tests.ops.test_admin import ADMIN_TOKEN, admin, closed_with


@pytest.fixture(params=[pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest) -> str:
    """Several instances share one PostgreSQL."""
    name: str = request.param
    return name


async def test_a_revocation_on_one_instance_closes_the_socket_on_the_other(
    vernis_factory: VernisFactory, redis_url: str, redis_prefix: str
) -> None:
    """Revoke through A: the member's socket on B closes 4401 with B's watch 300 s away, a colleague's socket on B stays, and B's handshake refuses the old token."""
    shared = {
        "redis_url": redis_url,
        "redis_prefix": redis_prefix,
        "admin_token": ADMIN_TOKEN,
        "auth_check_interval": 300,
    }
    async with vernis_factory(**shared) as one, vernis_factory(**shared) as two:
        old_token = two.token("member@acme.test")
        async with two.opened(token=old_token) as revoked, two.opened("owner@acme.test") as colleague:
            response = await admin(one, "POST", "revoke", json={"org": "acme", "sub": "member@acme.test"})
            assert response.status_code == 200
            assert await closed_with(revoked) == 4401
            await colleague.send("ping")
            await colleague.expect("pong")
        with pytest.raises(InvalidStatus) as refused:
            async with two.connect(token=old_token):
                pass
        assert refused.value.response.status_code == 403
