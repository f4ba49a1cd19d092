"""What `/metrics` shows (SPEC §15), in the Prometheus text format, through prometheus-client.

One `Metrics` per app, each with a registry of its own (several apps in one process, as in tests,
do not add up). With several worker processes (`vernis serve --workers N`) the supervisor sets
`PROMETHEUS_MULTIPROC_DIR` to a directory of its run before the workers start: each worker then
writes its values to files there, and whichever worker is scraped reads all of them
(prometheus-client's multiprocess mode), so a scrape shows the whole server, not one worker.
Gauges add up the live workers only (`livesum`).

Names follow the OpenTelemetry GenAI conventions where one exists, `vernis_…` otherwise. No label
holds a member, organization or conversation id, and every label has a bounded set of values: a
tool name the model made up is counted as `tool="(unknown)"`, never as a label of its own. Nothing
here is called per streamed delta: an answer is recorded once, at its end; frames are counted in
batches by the socket.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

from vernis.exceptions import LLMError, LLMNotConfigured, LLMNotStarted, LLMStalled, LLMTruncated

__all__ = ["CONTENT_TYPE", "MULTIPROC_ENV", "UNKNOWN_TOOL", "Metrics", "fault_kind"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

# Chat latencies: a first token in 50 ms (a cache) to an answer of a minute with tool rounds.
SECONDS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0)
# Tokens of one answer: a short reply to a long context (the OpenTelemetry advice, shortened).
TOKENS = (16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576)
# The `tool` label of a call to a name that is no tool of the catalog.
UNKNOWN_TOOL = "(unknown)"


class Metrics:
    def __init__(self, *, is_tool: Callable[[str], bool] | None = None) -> None:
        """`is_tool` says whether a name is a tool of the catalog (it may change while Vernis runs:
        a remote toolkit's list); without it every tool is counted as `(unknown)`."""
        self._is_tool = is_tool
        self.multiprocess = MULTIPROC_ENV in os.environ
        self.registry = CollectorRegistry(auto_describe=True)
        registry = self.registry
        self.sockets_open = Gauge(
            "vernis_sockets_open",
            "Assistant sockets open now.",
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.answers_in_flight = Gauge(
            "vernis_answers_in_flight",
            "Answers being written now.",
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.answers = Counter("vernis_answers", "Answers ended, by outcome.", ["outcome"], registry=registry)
        self.time_to_first_chunk = Histogram(
            "gen_ai_client_operation_time_to_first_chunk_seconds",
            "Time from the start of an answer to its first streamed text.",
            ["gen_ai_operation_name", "gen_ai_request_model"],
            buckets=SECONDS,
            registry=registry,
        )
        self.duration = Histogram(
            "gen_ai_client_operation_duration_seconds",
            "Duration of an answer, tool rounds included.",
            ["gen_ai_operation_name", "gen_ai_request_model"],
            buckets=SECONDS,
            registry=registry,
        )
        self.token_usage = Histogram(
            "gen_ai_client_token_usage",
            "Tokens of an answer, by type (input, output); the _sum is the total.",
            ["gen_ai_operation_name", "gen_ai_request_model", "gen_ai_token_type"],
            buckets=TOKENS,
            registry=registry,
        )
        self.tool_calls = Counter(
            "vernis_tool_calls", "Tool calls, by tool and outcome.", ["tool", "outcome"], registry=registry
        )
        self.llm_errors = Counter(
            "vernis_llm_errors",
            "Upstream model faults, by kind, whether retried or not.",
            ["kind"],
            registry=registry,
        )
        self.messages_refused = Counter(
            "vernis_messages_refused",
            "Answers refused before any model call, by reason (rate_limited, quota_exceeded, "
            "response_in_progress).",
            ["reason"],
            registry=registry,
        )
        self.guard_findings = Counter(
            "vernis_guard_findings",
            "Guard findings, by where (user_input, tool_arguments, tool_result), category and action.",
            ["where", "category", "action"],
            registry=registry,
        )
        self.frames = Counter(
            "vernis_frames", "WebSocket frames, by direction (in, out).", ["direction"], registry=registry
        )
        self.frames_in = self.frames.labels("in")
        self.frames_out = self.frames.labels("out")
        # Labelled series looked up once each (`labels()` takes a lock and builds its key every call).
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        # Traces (SPEC §22): counted from the exporter's thread (prometheus-client is thread-safe).
        self.trace_spans_dropped = Counter(
            "vernis_trace_spans_dropped",
            "Trace spans that could not be sent: the collector down, slow or refusing them.",
            registry=registry,
        )

    def answer_ended(
        self,
        *,
        model: str,
        outcome: str,
        duration: float,
        time_to_first_chunk: float | None,
        input_tokens: int,
        output_tokens: int,
        tool_outcomes: list[tuple[str, str]],
        cached_tokens: int = 0,
    ) -> None:
        """Everything one answer adds, recorded at its end."""
        child = self._child
        child(self.answers, outcome).inc()
        child(self.duration, "chat", model).observe(duration)
        if time_to_first_chunk is not None:
            child(self.time_to_first_chunk, "chat", model).observe(time_to_first_chunk)
        if input_tokens or output_tokens:
            child(self.token_usage, "chat", model, "input").observe(input_tokens)
            child(self.token_usage, "chat", model, "output").observe(output_tokens)
        if cached_tokens:
            # Of the input tokens, those the provider read from its prompt cache (SPEC §19).
            child(self.token_usage, "chat", model, "cache_read").observe(cached_tokens)
        for tool, tool_outcome in tool_outcomes:
            self.tool_calls.labels(self.tool_label(tool), tool_outcome).inc()

    def _child(self, metric: Counter | Histogram, *labels: str) -> Any:
        """`metric.labels(*labels)`, made once (the series appears when first used, as before)."""
        key = (id(metric), labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found

    def tool_label(self, name: str) -> str:
        """The `tool` label of a call to `name`: the name of a tool of the catalog, else `(unknown)`
        (the model may call any name: each one a new series would grow without bound)."""
        return name if self._is_tool is not None and self._is_tool(name) else UNKNOWN_TOOL

    def guard_finding(self, where: str, category: str, action: str) -> None:
        """One finding of the guards (never its text: only where, what kind, what was done)."""
        self.guard_findings.labels(where, category, action).inc()

    def llm_fault(self, error: LLMError) -> None:
        """One fault of the model endpoint (the adapter tells of each, retried ones too)."""
        self.llm_errors.labels(fault_kind(error)).inc()

    def render(self) -> bytes:
        """The text format of every value: this process's, or every worker's in multiprocess mode."""
        if self.multiprocess:
            _forget_dead_workers(os.environ[MULTIPROC_ENV])
            registry = CollectorRegistry()
            MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
            return generate_latest(registry)
        return generate_latest(self.registry)


_LIVE_GAUGE_FILE = re.compile(r"gauge_live\w+_(\d+)\.db")


def _forget_dead_workers(directory: str) -> None:
    """Drop the gauges of workers that died (a SIGKILL, an out-of-memory kill: the supervisor starts
    another): else `livesum` would still add the sockets and answers they held."""
    for name in os.listdir(directory):
        found = _LIVE_GAUGE_FILE.fullmatch(name)
        if found is None:
            continue
        pid = int(found[1])
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            mark_process_dead(pid, directory)  # type: ignore[no-untyped-call]
        except PermissionError:
            pass  # alive, another user's: not one of ours, left alone


def fault_kind(error: LLMError) -> str:
    """The `kind` label of an upstream fault: `not_started` (a stall before the answer began),
    `stalled`, `truncated`, `not_configured`, `unavailable` (the rest: 429, 5xx, a cut, an error
    object in the stream)."""
    if isinstance(error, LLMStalled):
        return "stalled"
    if isinstance(error, LLMTruncated):
        return "truncated"
    if isinstance(error, LLMNotConfigured):
        return "not_configured"
    if isinstance(error, LLMNotStarted):
        return "not_started"
    return "unavailable"
