"""How many streamed deltas per second one core relays through the LLM adapter (SPEC §9).

    python bench/bench_stream.py [--chunks 20000] [--runs 3] [--frames-per-write 64]

Starts the scripted model in a child process (so its CPU is not counted) streaming one answer of
`--chunks` one-token chunks, then reads it through:
- `OpenAIChatModel` (raw SSE bytes, orjson): what Vernis uses;
- the `openai` client's raw `iter_lines()` with orjson, no assembly: the floor of the raw approach;
- the `openai` client's ordinary streaming, which builds a pydantic `ChatCompletionChunk` per chunk.
`--frames-per-write 1` writes every chunk separately (one read per chunk on the client, as a slow
model's stream arrives); larger values coalesce them, as a fast stream does in the TCP buffers.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import openai
import orjson
from openai.types.chat import ChatCompletionMessageParam

from vernis.services.llm import ChatRequest, TextDelta
from vernis.services.openai_model import OpenAIChatModel

MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Tell me a long story."}]


def serve(port: int, chunks: int, frames_per_write: int) -> None:
    import uvicorn

    from vernis.scripted import Reply, ScriptedModel

    model = ScriptedModel()
    model.add(Reply(["tok "] * chunks, frames_per_write=frames_per_write), times=None)
    uvicorn.run(model.app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_for(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("the scripted server did not start")


async def through_adapter(base_url: str) -> int:
    model = OpenAIChatModel(base_url=base_url, api_key=None, stall_timeout=30)
    deltas = 0
    try:
        async for event in model.stream(ChatRequest(model="bench", messages=[dict(m) for m in MESSAGES])):
            if type(event) is TextDelta:
                deltas += 1
    finally:
        await model.aclose()
    return deltas


async def through_raw_lines(base_url: str) -> int:
    client = openai.AsyncOpenAI(base_url=base_url, api_key="not-needed")
    deltas = 0
    try:
        create = client.chat.completions.with_streaming_response.create
        async with create(model="bench", messages=MESSAGES, stream=True) as response:
            async for line in response.iter_lines():
                if line.startswith("data: {"):
                    chunk = orjson.loads(line[6:])
                    if chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                        deltas += 1
    finally:
        await client.close()
    return deltas


async def through_pydantic(base_url: str) -> int:
    client = openai.AsyncOpenAI(base_url=base_url, api_key="not-needed")
    deltas = 0
    try:
        stream = await client.chat.completions.create(model="bench", messages=MESSAGES, stream=True)
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                deltas += 1
    finally:
        await client.close()
    return deltas


async def measure(
    name: str, read: Callable[[str], Awaitable[int]], base_url: str, chunks: int, runs: int
) -> None:
    await read(base_url)  # warm up: imports, connection, caches
    seconds = []
    for _ in range(runs):
        start = time.perf_counter()
        deltas = await read(base_url)
        seconds.append(time.perf_counter() - start)
        assert deltas == chunks, f"{name}: {deltas} deltas, expected {chunks}"
    best, median = min(seconds), statistics.median(seconds)
    print(
        f"{name:<34} {chunks / best:>9,.0f} deltas/s (best)  {chunks / median:>9,.0f} (median)"
        f"  {best / chunks * 1e6:>7.1f} µs/chunk"
    )


async def compare(base_url: str, chunks: int, runs: int) -> None:
    await measure("OpenAIChatModel (raw bytes, orjson)", through_adapter, base_url, chunks, runs)
    await measure("client iter_lines() + orjson", through_raw_lines, base_url, chunks, runs)
    await measure("client pydantic chunks", through_pydantic, base_url, chunks, runs)


def run(chunks: int, runs: int, frames_per_write: int) -> None:
    port = free_port()
    command = [sys.executable, __file__, "--serve", str(port), "--chunks", str(chunks)]
    server = subprocess.Popen([*command, "--frames-per-write", str(frames_per_write)])
    try:
        wait_for(port)
        print(f"\n{chunks:,} one-token chunks, {frames_per_write} frame(s) per server write, {runs} runs")
        asyncio.run(compare(f"http://127.0.0.1:{port}/v1", chunks, runs))
    finally:
        server.terminate()
        server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--chunks", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--frames-per-write", type=int, nargs="*", default=[1, 64])
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.chunks, args.frames_per_write[0])
        return
    for per_write in args.frames_per_write:
        run(args.chunks, args.runs, per_write)


if __name__ == "__main__":
    main()
