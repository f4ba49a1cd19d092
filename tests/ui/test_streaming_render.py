"""A long answer is drawn incrementally while it streams (issue 25 item 4): each markdown pass re-parses
only the block still being written, so the work of a pass does not grow with the answer, nor does its end;
what stays is exactly what the history shows. (Its time in Chromium: bench/bench_panel.py.)"""

from __future__ import annotations

from playwright.async_api import expect

from tests.ui.conftest import UI
from tests.ui.test_panel_performance import OBSERVE
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


async def test_each_pass_redraws_only_the_last_block_and_the_end_is_the_whole_answer(ui: UI) -> None:
    """While 44 blocks stream and when the answer ends, no pass removes more than a few nodes (a whole redraw would remove every block each time) and the passes add up to the final markup; the ended answer's markup is the history's."""
    ui.vernis.scripted.add(Reply(TEXT, chunk_delay=0.005), match="long one")
    await ui.open()
    await ui.log.evaluate(OBSERVE)
    await ui.send("a long one please")
    # About 500 words, a few milliseconds apart: longer than a UI check's usual wait on a busy machine.
    answer = await ui.answered(seconds=60)
    passes: list[list[int]] = await ui.page.evaluate("() => window.__passes")
    assert len(passes) > 10, passes
    # A pass removes the last drawing of the block being written (a few nodes, however long the
    # answer) and adds it again, with the blocks finished since (more on a busy machine, where passes
    # are further apart); the passes add up to the final markup: no whole redraw, which would remove
    # every block.
    assert max(removed for _, removed in passes) <= 12, passes
    nodes = await answer.locator(".markdown").evaluate("(markdown) => markdown.childNodes.length")
    assert sum(added - removed for added, removed in passes) == nodes, (nodes, passes)
    assert await answer.locator(".markdown > .blocks > p").count() == PARAGRAPHS + 1
    await expect(answer.locator(".markdown li")).to_have_count(2)
    await expect(answer.locator(".markdown pre")).to_contain_text("y = 2")
    # Code is highlighted a little later (in a worker), in both drawings.
    await expect(answer.locator(".markdown pre .hljs-number")).to_have_count(2)
    live = await answer.locator(".markdown").inner_html()
    await ui.page.reload()
    await ui.connected()
    replayed = (await ui.answered()).locator(".markdown")
    await expect(replayed.locator("pre .hljs-number")).to_have_count(2)
    assert await replayed.inner_html() == live


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


# Beside the answer's `markdown`: `text` drawn once ungrouped (one render, its blocks the
# container's children), and `writing` drawn as a streaming pass draws it (its finished blocks
# grouped, its last block, a heading being written, after the groups). Every group is shown and
# contained as content-visibility keeps it when in view (out of view its size is an estimate).
# Returns each block's [tag, offset, height] in the answer and in the ungrouped drawing, and the
# [tag, offset] of the heading being written and of the same heading drawn ungrouped.
LAYOUTS = """async (markdown, [text, writing]) => {
  const { loadMarkdown } = await import("/static/vernis/markdown.js");
  const { StreamingMarkdown } = await import("/static/vernis/streaming.js");
  const render = await loadMarkdown(location.href, () => []);
  const beside = (draw) => {
    const container = document.createElement("div");
    container.className = markdown.className;
    container.dir = markdown.dir;
    markdown.after(container);
    draw(container);
    return container;
  };
  const flat = beside((container) => render(container, text, { highlight: false }));
  const streamed = beside((container) => new StreamingMarkdown(container).update(writing, render));
  const flatWriting = beside((container) => render(container, writing, { highlight: false }));
  for (const group of [...markdown.querySelectorAll(".blocks"), ...streamed.querySelectorAll(".blocks")]) {
    group.style.contentVisibility = "visible";
    group.style.contain = "layout paint style";
  }
  const top = (element, container) => Math.round(element.getBoundingClientRect().top - container.getBoundingClientRect().top);
  const boxes = (container) =>
    [...container.querySelectorAll(":scope > .blocks > *, :scope > :not(.blocks)")].map((block) => [
      block.tagName, top(block, container), Math.round(block.getBoundingClientRect().height),
    ]);
  const last = (container) => [container.lastElementChild.tagName, top(container.lastElementChild, container)];
  const layouts = [boxes(markdown), boxes(flat), last(streamed), last(flatWriting)];
  for (const container of [flat, streamed, flatWriting]) {
    container.remove();
  }
  return layouts;
}"""


async def test_grouped_blocks_are_laid_out_as_the_same_blocks_ungrouped(ui: UI) -> None:
    """An answer's finished blocks kept in groups (skipped whole while out of view) sit where the same blocks sit as one container's children, headings after paragraphs, lists, code and tables included, and so does a heading being written after the groups, in the panel and full screen."""
    text = "\n\n".join(
        f"## Part {n}\n\nA paragraph about part {n}.\n\n- one\n- two\n\n```\ncode {n}\n```\n\n"
        f"| a | b |\n|---|---|\n| {n} | 2 |\n\n### Notes {n}\n\n### More {n}\n\nThe end of {n}."
        for n in range(12)
    )
    ui.vernis.scripted.add(Reply(text, chunk_delay=0.001), match="parts")
    await ui.open()
    await ui.send("the parts please")
    markdown = (await ui.answered(seconds=60)).locator(".markdown")
    assert await markdown.locator(":scope > .blocks").count() > 3
    for expanded in (False, True):
        if expanded:
            await ui.page.evaluate(
                """() => document.querySelector("vernis-assistant").shadowRoot.querySelector(".panel")
                  .setAttribute("data-expanded", "")"""
            )
        grouped, flat, streamed, whole = await markdown.evaluate(
            LAYOUTS, [text, f"{text}\n\n## A heading just written\n"]
        )
        assert len(grouped) == len(flat) > 80
        assert grouped == flat
        assert streamed[0] == "H2"
        assert streamed == whole
