"""The quick actions' prompts (static/vernis/quick-actions.js) are the ones the offline demo answers."""

from __future__ import annotations

from tests.e2e.test_demo import QUICK_ACTIONS as DEMO_QUICK_ACTIONS
from tests.ui.conftest import UI


async def test_the_offline_demo_knows_every_read_quick_action(login_page: UI) -> None:
    """Every quick action sends a prompt; the read ones are exactly those the scripted demo maps to a tool."""
    actions = await login_page.page.evaluate(
        """async () => {
            const { QUICK_ACTIONS, pageAction } = await import("/static/vernis/quick-actions.js");
            return { actions: QUICK_ACTIONS, contact: pageAction("contact"), unknown: pageAction("nope") };
        }"""
    )
    prompts = [action["prompt"] for action in actions["actions"]]
    assert len(prompts) == 9
    assert all(prompt.strip() for prompt in prompts)
    demo = [prompt for prompt, _tool in DEMO_QUICK_ACTIONS]
    assert [prompt for prompt in prompts if prompt in demo] == demo
    assert actions["contact"] == {
        "label": "Summarize this contact",
        "prompt": "Summarize this contact for me.",
    }
    assert actions["unknown"] is None
