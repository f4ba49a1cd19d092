"""The bare relay the benchmark compares Vernis with: the least a server can do per streamed delta.

    python bench/relay.py PORT MODEL_BASE_URL

One WebSocket endpoint under the same uvicorn options as Vernis (uvloop, httptools, the sans-I/O
websockets). For each `user_message` frame it posts a request the size of the demo's (its 40 tool
schemas and a system prompt) with the official `openai` client on its aiohttp transport, reads the
raw SSE stream, parses each line with orjson and sends one `text_delta` frame per delta, then
`assistant_end`. No authentication, storage, tools, hub or replay: what it costs is the floor.
"""

from __future__ import annotations

import sys

import httpx2
import openai
import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket

from vernis_crm import toolkit

TOOLS = [tool.definition() for tool in toolkit.tools]
SYSTEM = "You are the assistant of a CRM. " * 150


def main() -> None:
    port, base_url = int(sys.argv[1]), sys.argv[2]
    client = openai.AsyncOpenAI(base_url=base_url, api_key="bench", http_client=openai.DefaultAioHttpClient())

    async def relay(websocket: WebSocket) -> None:
        await websocket.accept()
        messages: list[dict[str, str]] = [{"role": "system", "content": SYSTEM}]
        while True:
            frame = orjson.loads(await websocket.receive_text())
            messages.append({"role": "user", "content": frame["content"]})
            body = orjson.dumps({"model": "bench", "messages": messages, "tools": TOOLS, "stream": True})
            response = await client.post(
                "/chat/completions",
                cast_to=httpx2.Response,
                content=body,
                options={
                    "headers": {"X-Stainless-Raw-Response": "stream", "Content-Type": "application/json"}
                },
            )
            try:
                await relay_stream(websocket, response)
            finally:
                await response.aclose()

    async def relay_stream(websocket: WebSocket, response: httpx2.Response) -> None:
        pending = b""
        async for data in response.aiter_bytes():
            lines = (pending + data).split(b"\n")
            pending = lines.pop()
            for line in lines:
                if line[:6] != b"data: " or line == b"data: [DONE]":
                    continue
                choices = orjson.loads(line[6:]).get("choices") or ()
                for choice in choices:
                    content = (choice.get("delta") or {}).get("content")
                    if content:
                        await websocket.send_text(
                            orjson.dumps({"type": "text_delta", "content": content}).decode()
                        )
        await websocket.send_text('{"type": "assistant_end"}')

    app = Starlette(routes=[WebSocketRoute("/ws", relay)])
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        loop="uvloop",
        http="httptools",
        ws="websockets-sansio",
        ws_per_message_deflate=False,
        log_level="warning",
    )


if __name__ == "__main__":
    main()
