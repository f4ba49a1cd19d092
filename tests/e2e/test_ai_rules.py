"""An organization's AI rules over HTTP, and the system prompt that uses them (SPEC §7)."""

from __future__ import annotations

import httpx

from tests.fixtures.server import Vernis


def system_prompt(vernis: Vernis) -> str:
    chat = [b for b in vernis.scripted.requests if b["model"] == vernis.settings.llm_model]
    content: str = chat[-1]["messages"][0]["content"]
    return content


async def test_admin_replaces_rules_and_the_next_message_uses_them(vernis: Vernis) -> None:
    """An admin's PUT replaces the rules; any member reads them; the very next message's prompt carries them."""
    async with httpx.AsyncClient(base_url=vernis.http_url) as http:
        admin = {"Authorization": f"Bearer {vernis.token('admin@acme.test')}"}
        member = {"Authorization": f"Bearer {vernis.token('member@acme.test')}"}
        before = (await http.get("/api/organization/ai-rules", headers=member)).json()["rules"]
        async with vernis.opened() as client:
            await client.answer("hello")
            assert before.splitlines()[0] in system_prompt(vernis)
            response = await http.put(
                "/api/organization/ai-rules", headers=admin, json={"rules": "Always answer in French."}
            )
            assert response.status_code == 200
            assert response.json()["rules"] == "Always answer in French."
            await client.answer("hello again")
        prompt = system_prompt(vernis)
        assert "Always answer in French." in prompt
        assert before.splitlines()[0] not in prompt
        assert (await http.get("/api/organization/ai-rules", headers=member)).json()["rules"] == (
            "Always answer in French."
        )


async def test_members_and_strangers_cannot_change_rules(vernis: Vernis) -> None:
    """A member gets 403, no token 401, a bad body 400; the rules stay as they were and Globex's are its own."""
    async with httpx.AsyncClient(base_url=vernis.http_url) as http:
        member = {"Authorization": f"Bearer {vernis.token('member@acme.test')}"}
        admin = {"Authorization": f"Bearer {vernis.token('admin@acme.test')}"}
        globex = {"Authorization": f"Bearer {vernis.token('owner@globex.test')}"}
        before = (await http.get("/api/organization/ai-rules", headers=member)).json()["rules"]
        forbidden = await http.put("/api/organization/ai-rules", headers=member, json={"rules": "Be rude."})
        assert forbidden.status_code == 403
        assert (await http.put("/api/organization/ai-rules", json={"rules": "x"})).status_code == 401
        assert (
            await http.put("/api/organization/ai-rules", headers=admin, json={"rules": 5})
        ).status_code == 400
        too_long = await http.put("/api/organization/ai-rules", headers=admin, json={"rules": "x" * 4001})
        assert too_long.status_code == 400
        assert (await http.get("/api/organization/ai-rules", headers=member)).json()["rules"] == before
        assert (await http.get("/api/organization/ai-rules", headers=globex)).json()["rules"] != before
