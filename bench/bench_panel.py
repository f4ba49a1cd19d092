"""The panel's cost in the browser while a long answer streams (issue 25 item 4), measured in Chromium.

    .venv/bin/python bench/bench_panel.py            # about a minute; --tokens, --pace, --runs

- `vernis serve --demo` in its own process pinned to core 0, on SQLite, with the demo's real prompt
  and tools; `bench/model_server.py --text` on core 1 streams a markdown answer (paragraphs, lists,
  a table, code) of `--tokens` tokens, one every `--pace` seconds (default 4,000 at 100 tokens/s),
  to the real `openai` client inside Vernis.
- Debian's Chromium (headless) shows the demo's contacts page signed in as a demo member; the panel
  sends a message and the answer streams into it. Chromium may use both cores, as a user's browser
  runs its compositor, raster and GPU-process threads beside the page's main thread; the model
  server and this script share core 0 with Vernis. `--one-core`: Chromium, the model server and this
  script on core 1 (the setup of the figures before 2026-11-28), where a main-thread task's wall
  time also holds the time Chromium's other threads took the core.
- From a Chromium trace of the whole answer: the renderer main thread's longest task, and its total
  scripting time (V8 execution, the markdown parser and sanitizer included), the count of its tasks
  of 16 ms or more and its time in style and layout; and the largest number of nodes a single
  markdown pass removed from the answer (the last drawing of the block being written: it stays flat
  when only that block is drawn again, and a whole redraw would remove every block), counted as the
  browser test counts them (`tests/ui/test_panel_performance.py`, with no frame loop of its own).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

import orjson
from playwright.async_api import async_playwright

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench_server import (
    LOAD_CORE,
    ROOT,
    SECRET,
    SERVER_CORE,
    cpu_model,
    free_port,
    process,
    wait_ready,
)

from tests.ui.test_panel_performance import OBSERVE
from vernis.identity import COOKIE_NAME, issue_token

CHROMIUM = "/usr/bin/chromium"
MEMBER = "member@acme.test"


def answer_text(tokens: int) -> str:
    """A markdown answer of about `tokens` words, shaped like a long real one."""
    words = [
        "the",
        "contact",
        "called",
        "twice",
        "about",
        "the",
        "invoice",
        "and",
        "asked",
        "for",
        "a",
        "callback",
        "before",
        "Friday",
    ]
    parts: list[str] = []
    count = n = 0
    while count < tokens:
        n += 1
        section = [
            f"## Part {n}",
            " ".join(words[(n + k) % len(words)] for k in range(60)) + ".",
            "\n".join(f"- item {n}.{k}: {' '.join(words[:8])}" for k in range(5)),
            "| name | calls | last |\n|---|---:|---|\n"
            + "\n".join(f"| Contact {n}-{k} | {k * 3} | Monday |" for k in range(4)),
            "```python\n" + "\n".join(f"total_{k} = sum(calls[{k}])" for k in range(4)) + "\n```",
            " ".join(words[(n * 3 + k) % len(words)] for k in range(40)) + ".",
        ]
        text = "\n\n".join(section)
        parts.append(text)
        count += len(text.split())
    return "\n\n".join(parts)


def main_thread_events(trace: dict[str, Any]) -> list[dict[str, Any]]:
    """The complete events (`ph` X) of the renderer's main thread, from a Chromium trace."""
    events = trace["traceEvents"]
    main = {
        (e["pid"], e["tid"])
        for e in events
        if e.get("name") == "thread_name" and e.get("args", {}).get("name") == "CrRendererMain"
    }
    return [e for e in events if (e.get("pid"), e.get("tid")) in main and e.get("ph") == "X"]


def trace_figures(trace: dict[str, Any], clock: str = "dur") -> list[float]:
    """The renderer main thread's tasks (ms, longest first), from a Chromium trace: their wall time
    (`dur`), or the CPU time the thread spent in them (`tdur`: without the time it waited for a core,
    which on a busy two-core machine is most of a task's wall time)."""
    return sorted(
        (e.get(clock, 0) / 1000 for e in main_thread_events(trace) if e["name"] == "RunTask"), reverse=True
    )


# The trace events that run JavaScript (a forced style or layout inside them included, as in CDP's
# `ScriptDuration`); the outermost of them add up to the scripting time.
SCRIPT_EVENTS = ("FunctionCall", "EvaluateScript", "v8.evaluateModule", "v8.compileModule", "V8.Execute")


def script_cpu_seconds(trace: dict[str, Any]) -> float:
    """The CPU time of the renderer main thread's JavaScript (s), from the trace's `tdur`."""
    total = 0
    end = -1
    for e in sorted(main_thread_events(trace), key=lambda e: (e["ts"], -e.get("dur", 0))):
        if e["name"] in SCRIPT_EVENTS and e["ts"] >= end:
            total += e.get("tdur", 0)
            end = e["ts"] + e.get("dur", 0)
    return total / 1e6


def style_layout_seconds(trace: dict[str, Any]) -> float:
    """The renderer main thread's CPU time in style recalculation and layout (s), forced ones included."""
    names = ("UpdateLayoutTree", "Layout")
    return float(sum(e.get("tdur", 0) for e in main_thread_events(trace) if e["name"] in names)) / 1e6


def print_longest_tasks(trace: dict[str, Any], count: int = 3) -> None:
    """What the longest tasks spent their time on: the events inside each, by name (ms, nested
    events counted in their parents too)."""
    events = main_thread_events(trace)
    tasks = sorted((e for e in events if e["name"] == "RunTask"), key=lambda e: -e.get("dur", 0))
    for task in tasks[:count]:
        start, end = task["ts"], task["ts"] + task.get("dur", 0)
        inside: dict[str, float] = {}
        for e in events:
            if e is not task and start <= e["ts"] and e["ts"] + e.get("dur", 0) <= end:
                inside[e["name"]] = inside.get(e["name"], 0.0) + e.get("dur", 0) / 1000
        top = sorted(inside.items(), key=lambda item: -item[1])[:8]
        print(f"task of {task.get('dur', 0) / 1000:.1f} ms: " + ", ".join(f"{n} {ms:.1f}" for n, ms in top))


class Figures(NamedTuple):
    """One run's figures: tasks in ms, longest first; times in s."""

    tasks: list[float]
    cpu_tasks: list[float]
    scripting: float
    script_cpu: float
    layout: float
    nodes: int
    seconds: float


async def run_once(url: str, browser: Any, args: argparse.Namespace) -> Figures:
    context = await browser.new_context(viewport={"width": 1280, "height": 900})
    await context.add_cookies(
        [{"name": COOKIE_NAME, "value": issue_token(SECRET, sub=MEMBER, org="acme", ttl=3600), "url": url}]
    )
    page = await context.new_page()
    await page.goto(f"{url}/contacts")
    panel = page.locator("vernis-assistant .panel")
    await page.locator("vernis-assistant .launcher").click()
    await panel.locator('.conn[data-state="connected"]').wait_for()
    # A conversation of its own: the panel reopens the member's last one, which a run before this one
    # answered already (its answer, not streaming, ended the wait below at once).
    await panel.get_by_role("button", name="New chat").click()
    await panel.locator(".log .empty").wait_for()
    # The same count of nodes per markdown pass as the browser test of it.
    await panel.locator(".log").evaluate(OBSERVE)
    cdp = await context.new_cdp_session(page)
    await cdp.send("Performance.enable")
    before = await script_seconds(cdp)
    if args.profile:
        await cdp.send("Profiler.enable")
        await cdp.send("Profiler.start")
    await browser.start_tracing(
        page=page, categories=["devtools.timeline", "disabled-by-default-devtools.timeline"]
    )
    began = time.monotonic()
    await panel.locator("textarea").fill("Give me the long overview, please.")
    await panel.locator("textarea").press("Enter")
    await panel.locator(".msg.assistant").first.wait_for()
    await page.wait_for_function(
        """() => {
          const log = document.querySelector("vernis-assistant").shadowRoot.querySelector(".log");
          const answer = log.querySelector(".msg.assistant");
          return answer && !answer.hasAttribute("data-streaming");
        }""",
        timeout=args.tokens * 100,
        polling=500,
    )
    seconds = time.monotonic() - began
    scripting = await script_seconds(cdp) - before
    if args.profile:
        print_profile((await cdp.send("Profiler.stop"))["profile"])
    raw = await browser.stop_tracing()
    if args.trace:
        await asyncio.to_thread(Path(args.trace).write_bytes, raw)
    trace = orjson.loads(raw)
    passes: list[list[int]] = await page.evaluate("() => window.__passes")
    await context.close()
    if args.profile:
        print_longest_tasks(trace)
    return Figures(
        tasks=trace_figures(trace),
        cpu_tasks=trace_figures(trace, "tdur"),
        scripting=scripting,
        script_cpu=script_cpu_seconds(trace),
        layout=style_layout_seconds(trace),
        nodes=max((removed for _, removed in passes), default=0),
        seconds=seconds,
    )


def print_profile(profile: dict[str, Any]) -> None:
    """The functions that took the renderer's time (self time, from a CDP CPU profile)."""
    deltas = profile.get("timeDeltas", [])
    samples = profile.get("samples", [])
    by_id = {node["id"]: node for node in profile["nodes"]}
    self_ms: dict[str, float] = {}
    for sample, delta in zip(samples, deltas, strict=False):
        frame = by_id[sample]["callFrame"]
        name = f"{frame['functionName'] or '(anonymous)'} {frame['url'].rsplit('/', 1)[-1]}:{frame['lineNumber']}"
        self_ms[name] = self_ms.get(name, 0.0) + delta / 1000
    for name, ms in sorted(self_ms.items(), key=lambda item: -item[1])[:25]:
        print(f"{ms:9.1f} ms  {name}")


async def script_seconds(cdp: Any) -> float:
    """The renderer's JavaScript execution time so far (CDP Performance metrics, `ScriptDuration`)."""
    metrics = (await cdp.send("Performance.getMetrics"))["metrics"]
    return float(next(m["value"] for m in metrics if m["name"] == "ScriptDuration"))


async def main(args: argparse.Namespace) -> None:
    # Chromium inherits this process's cores (through Playwright's driver): this script is pinned to
    # core 0 once Chromium has started, unless all of it is on core 1.
    os.sched_setaffinity(0, {LOAD_CORE} if args.one_core else {SERVER_CORE, LOAD_CORE})
    side_core = LOAD_CORE if args.one_core else SERVER_CORE
    load = os.getloadavg()[0]
    data = Path(tempfile.mkdtemp(prefix="vernis-bench-panel-"))
    text_file = data / "answer.md"
    text_file.write_text(answer_text(args.tokens), encoding="utf-8")
    model_port, vernis_port = free_port(), free_port()
    base_env = {**os.environ, "PYTHONPATH": str(ROOT)}
    model_cmd = [
        sys.executable,
        "bench/model_server.py",
        str(model_port),
        "--pace",
        str(args.pace),
        "--text",
        str(text_file),
    ]
    env = {
        **base_env,
        "VERNIS_DATABASE_URL": f"sqlite+aiosqlite:///{data / 'vernis.db'}",
        "VERNIS_JWT_SECRET": SECRET,
        "VERNIS_LLM_BASE_URL": f"http://127.0.0.1:{model_port}/v1",
        "VERNIS_LLM_API_KEY": "bench",
        "VERNIS_LLM_MODEL": "bench",
        "VERNIS_LOG_LEVEL": "WARNING",
    }
    serve = [sys.executable, "-m", "vernis", "serve", "--demo", "--port", str(vernis_port)]
    url = f"http://127.0.0.1:{vernis_port}"
    results = []
    with process(model_cmd, base_env, side_core) as model, process(serve, env, SERVER_CORE) as server:
        await wait_ready(f"http://127.0.0.1:{model_port}/v1/models", model)
        await wait_ready(f"{url}/readyz", server)
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(
                executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"]
            )
            os.sched_setaffinity(0, {side_core})
            for _ in range(args.runs):
                results.append(await run_once(url, browser, args))
            await browser.close()
    print(
        f"\n{time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores ({cpu_model()}), Chromium (Debian), headless"
    )
    streamed = len(re.findall(r"\s*\S+", text_file.read_text(encoding="utf-8")))
    characters = len(text_file.read_text(encoding="utf-8"))
    print(f"answer: {streamed:,} tokens at {1 / args.pace:.0f} tokens/s, {characters:,} characters")
    print("Chromium on core 1 with the model server" if args.one_core else "Chromium on both cores")
    print(
        "| run | longest main-thread tasks (wall) | (CPU) | tasks of 16 ms or more (wall / CPU)"
        " | scripting (CDP) | scripting CPU | style and layout CPU | most nodes removed in one pass"
        " | streamed for |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n, f in enumerate(results, 1):
        wall = ", ".join(f"{t:.1f}" for t in f.tasks[:3])
        cpu = ", ".join(f"{t:.1f}" for t in f.cpu_tasks[:3])
        over = f"{sum(1 for t in f.tasks if t >= 16)} / {sum(1 for t in f.cpu_tasks if t >= 16)}"
        print(
            f"| {n} | {wall} ms | {cpu} ms | {over} | {f.scripting:.2f} s | {f.script_cpu:.2f} s"
            f" | {f.layout:.2f} s | {f.nodes} | {f.seconds:.1f} s |"
        )
    print(f"load average (1 min): {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--profile", action="store_true", help="print where the renderer's time went")
    parser.add_argument("--trace", help="write the last run's Chromium trace (JSON) to this file")
    parser.add_argument("--tokens", type=int, default=4000)
    parser.add_argument("--pace", type=float, default=0.01)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument(
        "--one-core", action="store_true", help="Chromium on core 1 with the model server and this script"
    )
    asyncio.run(main(parser.parse_args()))
