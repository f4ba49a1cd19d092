"""The direct text-frame write of Vernis's protocol (vernis.ws.transport)."""

from __future__ import annotations

import pytest
from websockets.frames import Frame, Opcode

from vernis.ws.transport import text_frame


@pytest.mark.parametrize("size", [0, 1, 125, 126, 127, 65_535, 65_536, 200_000])
def test_text_frame_is_byte_for_byte_what_websockets_serializes(size: int) -> None:
    """At each length boundary of RFC 6455's header (7-bit, 16-bit, 64-bit), the frame equals the websockets library's own unmasked text frame."""
    text = "é" * (size // 2) + "a" * (size % 2)  # `size` bytes of UTF-8, two-byte characters mostly
    assert len(text.encode()) == size
    expected = Frame(Opcode.TEXT, text.encode()).serialize(mask=False, extensions=[])
    assert text_frame(text) == expected
