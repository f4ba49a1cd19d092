"""A long answer is drawn incrementally while it streams (issue 25 item 4): each frame re-parses only
the block still being written, so the work of a frame does not grow with the answer, nor does its end;
what stays is exactly what the history shows. (Its time in Chromium: bench/bench_panel.py.)"""

from __future__ import annotations

from playwright.async_api import expect

from tests.ui.conftest import UI
from vernis.model.scripted import Reply

PARAGRAPHS = 40
TEXT = "\n\n".join(
    [
        *(
            f"Paragraph {n} says something about the contact, with *emphasis* and `code`."
            for n in range(PARAGRAPHS)
        ),
        "- a list item\n- another item\n\n   still the second item's text",
        "```python\nx = 1\n\ny = 2\n```",
        "| a | b |\n|---|---|\n| 1 | 2 |",
        "The end.",
    ]
)

# Counts, per animation frame, the nodes added to the answer's markdown containers.
OBSERVE = """(log) => {
  window.__frames = [];
  let added = 0;
  new MutationObserver((records) => {
    for (const record of records) {
      if (record.target.classList && record.target.classList.contains("markdown")) {
        added += record.addedNodes.length;
      }
    }
  }).observe(log, { childList: true, subtree: true });
  const frame = () => {
    if (added) {
      window.__frames.push(added);
      added = 0;
    }
    requestAnimationFrame(frame);
  };
  requestAnimationFrame(frame);
}"""


async def test_each_frame_redraws_only_the_last_block_and_the_end_is_the_whole_answer(ui: UI) -> None:
    """While 44 blocks stream and when the answer ends, no frame adds more than a few nodes (a whole redraw would add every block each frame); the ended answer's markup is the history's."""
    ui.vernis.scripted.add(Reply(TEXT, chunk_delay=0.005), match="long one")
    await ui.open()
    await ui.log.evaluate(OBSERVE)
    await ui.send("a long one please")
    # About 500 words, a few milliseconds apart: longer than a UI check's usual wait on a busy machine.
    await expect(ui.answers()).to_have_count(1)
    await expect(ui.log.locator(".msg.assistant[data-streaming]")).to_have_count(0, timeout=60_000)
    answer = await ui.answered()
    frames: list[int] = await ui.page.evaluate("() => window.__frames")
    assert len(frames) > 10, frames
    # A frame adds the blocks finished since the last one (a few, on a busy machine) and the tail.
    assert max(frames) <= 12, frames
    assert await answer.locator(".markdown > p").count() == PARAGRAPHS + 1
    await expect(answer.locator(".markdown li")).to_have_count(2)
    await expect(answer.locator(".markdown pre")).to_contain_text("y = 2")
    live = await answer.locator(".markdown").inner_html()
    await ui.page.reload()
    await ui.connected()
    replayed = await (await ui.answered()).locator(".markdown").inner_html()
    assert replayed == live


async def test_a_link_defined_later_in_the_answer_works_once_it_ends(ui: UI) -> None:
    """A reference link whose definition comes blocks later is a working link once the answer ends, as in the history."""
    text = "See [the guide][g] first.\n\nMore words here.\n\n[g]: https://example.com/guide"
    ui.vernis.scripted.add(Reply(text, chunk_delay=0.01), match="guide")
    await ui.open()
    await ui.send("the guide please")
    answer = await ui.answered()
    await expect(answer.get_by_role("link", name="the guide")).to_have_attribute(
        "href", "https://example.com/guide"
    )
