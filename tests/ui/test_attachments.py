"""Attachments in the panel (SPEC §21), in Chromium against a real Vernis: drop, the attach button,
a refusal, keyboard removal, the sent message and its files after a reload."""

from __future__ import annotations

from playwright.async_api import FilePayload, expect

from tests.attachments.samples import SVG, pdf, png
from tests.ui.conftest import UI, Embed, OpenUI


async def drop(ui: UI, name: str, mime: str, data: bytes) -> None:
    """Drop a file on the panel as a user drags one from their desktop."""
    transfer = await ui.page.evaluate_handle(
        """([name, mime, bytes]) => {
            const transfer = new DataTransfer();
            transfer.items.add(new File([new Uint8Array(bytes)], name, { type: mime }));
            return transfer;
        }""",
        [name, mime, list(data)],
    )
    await ui.panel.dispatch_event("dragover", {"dataTransfer": transfer})
    await ui.panel.dispatch_event("drop", {"dataTransfer": transfer})


async def test_drop_an_image_attach_a_pdf_send_them_and_see_them_after_a_reload(ui: UI) -> None:
    """An image dropped on the panel and a PDF chosen with the attach button upload with a thumbnail and a chip; an SVG is refused with a sentence and removed by keyboard, an uploaded file removed is deleted on the server; both files go with the message, the scripted model describes them, and history shows them after a reload."""
    # The browser logs the refused upload's 415 on its console: an expected error here.
    ui.console_errors_expected = True
    await ui.open()
    tray = ui.panel.locator(".composer-attachments")
    await drop(ui, "screen.png", "image/png", png(40, 30))
    async with ui.page.expect_file_chooser() as chooser:
        await ui.panel.get_by_role("button", name="Attach files").click()
    await (await chooser.value).set_files(
        files=[
            FilePayload(
                name="invoice.pdf",
                mimeType="application/pdf",
                buffer=pdf(["Invoice 1042 total 300 EUR"]),
            )
        ]
    )
    await expect(tray.locator(".attachment[data-state=done]")).to_have_count(2)
    await expect(tray.locator(".attachment").first.locator("img")).to_have_count(1)
    await expect(tray.locator(".attachment").nth(1)).to_contain_text("invoice.pdf")

    await drop(ui, "logo.svg", "image/svg+xml", SVG)
    refused = tray.locator(".attachment[data-state=error]")
    await expect(refused).to_contain_text("SVG images are not accepted")
    await expect(refused.get_by_role("alert")).to_have_count(1)
    await ui.screenshot("attachments-composer.png")
    remove = refused.get_by_role("button", name="Remove logo.svg")
    await remove.focus()
    await remove.press("Enter")
    await expect(tray.locator(".attachment")).to_have_count(2)
    # An uploaded file removed before sending is deleted on the server too.
    await drop(ui, "extra.txt", "text/plain", b"not needed after all\n")
    await expect(tray.locator(".attachment[data-state=done]")).to_have_count(3)
    async with ui.page.expect_response(lambda response: response.request.method == "DELETE") as deleted:
        await tray.get_by_role("button", name="Remove extra.txt").press("Enter")
    assert (await deleted.value).status == 204
    await expect(tray.locator(".attachment")).to_have_count(2)

    await ui.send("What are these?")
    answer = await ui.answered()
    await expect(answer).to_contain_text("“screen.png” (image/png)")
    await expect(answer).to_contain_text(
        "“invoice.pdf” (application/pdf), which begins: “Invoice 1042 total 300 EUR”"
    )
    await expect(tray.locator(".attachment")).to_have_count(0)
    sent = ui.log.locator(".msg.user .message-attachments .attachment")
    await expect(sent).to_have_count(2)

    await ui.page.reload()
    await ui.page.locator("vernis-assistant .root:not([hidden])").wait_for(state="attached")
    # The panel stays open across the reload.
    await ui.connected()
    files = ui.log.locator(".msg.user .message-attachments .attachment")
    await expect(files).to_have_count(2)
    await expect(files.first).to_contain_text("screen.png")
    await expect(files.first.locator("img")).to_have_count(1)
    await expect(files.nth(1)).to_contain_text("invoice.pdf")
    await ui.screenshot("attachments-history.png")


async def test_a_panel_embedded_on_another_origin_uploads_with_its_token(
    embed: Embed, open_ui: OpenUI
) -> None:
    """On a host page of another (allowed) origin the panel uploads with getToken's Bearer token through CORS, sends the file, and shows its thumbnail drawn from a cross-origin download."""
    ui = await open_ui(embed.vernis, host=embed, email=None, path="/")
    await ui.open()
    async with ui.page.expect_response("**/api/assistant/attachments") as uploaded:
        await drop(ui, "shot.png", "image/png", png(12, 12))
    response = await uploaded.value
    assert response.status == 201
    headers = await response.request.all_headers()
    assert headers["authorization"].startswith("Bearer ey")
    assert headers["origin"] == embed.url
    tray = ui.panel.locator(".composer-attachments")
    await expect(tray.locator(".attachment[data-state=done]")).to_have_count(1)
    await ui.send("Look at this")
    await ui.answered()
    await ui.page.reload()
    await ui.page.locator("vernis-assistant .root:not([hidden])").wait_for(state="attached")
    await ui.connected()
    await expect(ui.log.locator(".msg.user .message-attachments .attachment img")).to_have_count(1)
