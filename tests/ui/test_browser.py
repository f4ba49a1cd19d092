"""The UI tests' Chromium itself: the features Playwright switches off stay off beside ours, and the
browser loads no page of its own beside a test's."""

from __future__ import annotations

import re
from pathlib import Path

from playwright._impl._driver import compute_driver_executable
from playwright.async_api import Browser

from tests.ui.conftest import CHROMIUM_FLAGS, PLAYWRIGHT_DISABLED_FEATURES


def playwright_disabled_features() -> set[str]:
    """The features the installed Playwright's launcher switches off (its `chromiumSwitches`)."""
    _, cli = compute_driver_executable()
    bundle = (Path(cli).parent / "lib" / "coreBundle.js").read_text()
    found = re.search(r"disabledFeatures = \[(.*?)\]", bundle, re.DOTALL)
    assert found is not None, "the Playwright driver's list of disabled features was not found"
    return set(re.findall(r'"([^"]+)"', found.group(1)))


def test_our_disabled_features_carry_every_one_playwright_switches_off() -> None:
    """Chromium keeps the last `--disable-features`: ours names every feature Playwright's own launcher switches off."""
    ours = [flag for flag in CHROMIUM_FLAGS if flag.startswith("--disable-features=")]
    assert len(ours) == 1
    named = set(ours[0].removeprefix("--disable-features=").split(","))
    assert playwright_disabled_features() <= named
    # Our copy is the installed Playwright's list, no more (a name it dropped goes here too).
    assert set(PLAYWRIGHT_DISABLED_FEATURES) == playwright_disabled_features()


async def test_a_new_context_opens_no_page_of_the_browsers_own(browser: Browser) -> None:
    """A test's tab is the browser's only page: no address-bar pop-up is loaded, unseen, into its window."""
    context = await browser.new_context()
    try:
        page = await context.new_page()
        await page.set_content("<p>hello</p>")
        session = await browser.new_browser_cdp_session()
        targets = (await session.send("Target.getTargets"))["targetInfos"]
        await session.detach()
    finally:
        await context.close()
    assert [target["type"] for target in targets if "top-chrome" in target["url"]] == []
    assert any(target["type"] == "page" for target in targets)
