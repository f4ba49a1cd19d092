"""An OpenAI-compatible chat-completions server for the benchmark, cheap enough not to be the bottleneck.

    python bench/model_server.py PORT --tokens 100 --pace 0.02 [--burst 16] [--text FILE]

Raw asyncio (uvloop) HTTP/1.1 with keep-alive and chunked SSE: every request to `/v1/chat/completions`
streams `--tokens` content chunks, one every `--pace` seconds (`--pace 0`: as fast as possible,
`--burst` chunks per write; paced tokens are due at fixed times from the first, so late timer
wake-ups do not add up), then a finish chunk with usage and `[DONE]`. `POST /settings` with
`{"tokens": n, "pace": s}` changes both for the requests that follow (a bench's scenarios share one
model server). A title request (`max_tokens` below 64) and a summary request get three tokens at
once. A last user message that says "look it up" gets a `search_contacts` tool call instead (the
request after its result, text).

Each content chunk carries the moment it was written, `t<CLOCK_MONOTONIC µs> `, so a client on this
machine measures the latency Vernis adds: its receipt time minus that stamp. The first chunk of an
answer also carries when the request arrived (`r<µs> `), so a client can subtract the model's own
time to first token. `GET /stats` tells how many answer tokens (titles aside) have been written.

With `--text FILE` an answer is that file's text instead, one token a chunk (its words and the
whitespace before each, as a tokenizer cuts them), with no stamps: what a panel renders (bench_panel).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import re
import time
from pathlib import Path

import orjson
import uvloop

HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
    b"cache-control: no-cache\r\n\r\n"
)


def now_us() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000


def chunk(delta: dict[str, object], finish: str | None = None, usage: dict[str, int] | None = None) -> bytes:
    body: dict[str, object] = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "bench",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage is not None:
        body["usage"] = usage
    return b"data: " + orjson.dumps(body) + b"\n\n"


def framed(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class Model:
    def __init__(self, tokens: int, pace: float, burst: int, text: list[str] | None = None) -> None:
        self.text = text
        self.tokens = len(text) if text is not None else tokens
        self.pace = pace
        self.burst = burst
        self.requests = 0
        self.emitted = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                arrived = now_us()
                length = 0
                for line in head.split(b"\r\n"):
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                body = orjson.loads(await reader.readexactly(length)) if length else {}
                self.requests += 1
                if head.startswith(b"POST /settings"):
                    self.tokens, self.pace = int(body["tokens"]), float(body["pace"])
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
                    continue
                if head.startswith(b"GET"):
                    payload = b'{"object":"list","data":[]}'
                    if head.startswith(b"GET /stats"):
                        payload = orjson.dumps({"emitted": self.emitted, "requests": self.requests})
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(payload), payload))
                    continue
                title = (body.get("max_tokens") or 1000) < 64
                if title or _summary(body):
                    await self.stream(writer, arrived, 3, 0.0, counted=False)
                elif _lookup(body):
                    await self.call_tool(writer)
                else:
                    await self.stream(writer, arrived, self.tokens, self.pace)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def stream(
        self, writer: asyncio.StreamWriter, arrived: int, tokens: int, pace: float, *, counted: bool = True
    ) -> None:
        writer.write(HEAD)
        pending: list[bytes] = []
        loop = asyncio.get_running_loop()
        start = loop.time()
        for n in range(tokens):
            if pace > 0 and n:
                # Token n is due at start + n * pace: late wake-ups do not add up over an answer.
                await asyncio.sleep(max(0.0, start + n * pace - loop.time()))
            if self.text is not None and counted:
                stamp = self.text[n]
            else:
                stamp = f"r{arrived} t{now_us()} " if n == 0 else f"t{now_us()} "
            pending.append(chunk({"content": stamp} if n else {"role": "assistant", "content": stamp}))
            self.emitted += counted
            if pace > 0:
                writer.write(framed(pending.pop()))
                await writer.drain()
            elif len(pending) >= self.burst:
                writer.write(framed(b"".join(pending)))
                pending.clear()
                await writer.drain()
        usage = {"prompt_tokens": 1000, "completion_tokens": tokens, "total_tokens": 1000 + tokens}
        pending.append(chunk({}, "stop", usage))
        pending.append(b"data: [DONE]\n\n")
        writer.write(framed(b"".join(pending)) + b"0\r\n\r\n")
        await writer.drain()

    async def call_tool(self, writer: asyncio.StreamWriter) -> None:
        """One `search_contacts` call, whole in one chunk, then the finish chunk."""
        call = {
            "index": 0,
            "id": f"call_{self.requests}",
            "type": "function",
            "function": {"name": "search_contacts", "arguments": '{"query": "a"}'},
        }
        usage = {"prompt_tokens": 1000, "completion_tokens": 10, "total_tokens": 1010}
        frames = [
            chunk({"role": "assistant", "content": None, "tool_calls": [call]}),
            chunk({}, "tool_calls", usage),
            b"data: [DONE]\n\n",
        ]
        writer.write(HEAD + framed(b"".join(frames)) + b"0\r\n\r\n")
        await writer.drain()


def _summary(body: dict[str, object]) -> bool:
    """A compaction's summary request (Vernis's title model, no tools, "summary" in its instructions)."""
    messages = body.get("messages")
    first = messages[0] if isinstance(messages, list) and messages else {}
    return not body.get("tools") and "summary" in str(first.get("content", ""))


def _lookup(body: dict[str, object]) -> bool:
    """A user message asking to "look it up" is answered with a tool call (its result then gets text)."""
    messages = body.get("messages")
    last = messages[-1] if isinstance(messages, list) and messages else {}
    return last.get("role") == "user" and "look it up" in str(last.get("content", ""))


async def main(args: argparse.Namespace, text: list[str] | None) -> None:
    model = Model(args.tokens, args.pace, args.burst, text)
    server = await asyncio.start_server(model.serve, "127.0.0.1", args.port, backlog=1024)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--pace", type=float, default=0.02)
    parser.add_argument("--burst", type=int, default=16)
    parser.add_argument("--text", help="a file whose text every answer streams, a token a chunk")
    # The load side is the measuring instrument: no collector pauses of its own in the figures.
    gc.disable()
    args = parser.parse_args()
    text = re.findall(r"\s*\S+", Path(args.text).read_text(encoding="utf-8")) if args.text else None
    uvloop.run(main(args, text))
