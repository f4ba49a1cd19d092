"""The conversation window: the stored messages a conversation shows the model (SPEC §4, §19).

A `ConversationWindow` holds the messages after the conversation's summary checkpoint (if it has
one), held per conversation in a `WindowCache` and rebuilt from storage whenever a conversation is
loaded and the cache does not have it. A rolled-over conversation starts with a copy of its
predecessor's window, summary included, so the assistant keeps its context across the rollover.

A window does not slide one message at a time: that would change the start of every request and no
provider prompt cache would ever hit past the system message. It grows unchanged at its start until
it is `due`: past `size` messages, or past `budget` tokens (VERNIS_CONTEXT_BUDGET_TOKENS, estimated
with `vernis.conversation.tokens`, or what the provider counted for the history when that is more:
`observe`). Then everything before its last `keep` messages (from the user message that opens them,
and fewer when those alone take more than half the budget) is summarised in one go
(`vernis.answers.compaction`, then `compacted`), or, when summarising fails, dropped (`drop`).
Consecutive requests so share everything but the newest message, except right after a cut.

A history whose newest exchange alone passes the budget is sent cut (`to_messages`): tool results to
their first lines, then the longest texts, each with a note saying so.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol
from uuid import UUID

import orjson
from cachetools import LRUCache

from vernis.conversation import tokens as token_count
from vernis.conversation.records import continues
from vernis.conversation.summaries import SummaryInfo

__all__ = [
    "DEFAULT_KEEP",
    "DEFAULT_MAX_BYTES",
    "ConversationWindow",
    "StoredLike",
    "WindowCache",
    "WindowEntry",
    "for_model",
]

# What the window cache may hold in all, measured as the text it keeps (a window of 50 long messages
# with tool results is easily 100 KB; a count of conversations says nothing about memory).
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
# What an entry costs beyond its text: the objects around it, its chat messages' dictionaries
# included (`to_messages` keeps them), whose tool results are its calls' text again. Measured with
# tracemalloc for a one-message entry: about 130 bytes for the entry, 190 for its message.
_ENTRY_OVERHEAD = 350
# A window that is never compacted (no answer ran on it) still stops growing at this many times
# its size: it drops its older messages as a window without summaries would.
_HARD_CAP = 2


class StoredLike(Protocol):
    """What the window needs of a stored message."""

    @property
    def id(self) -> UUID: ...
    @property
    def position(self) -> int: ...
    @property
    def role(self) -> str: ...
    @property
    def content(self) -> str: ...
    @property
    def tool_calls(self) -> list[dict[str, Any]] | None: ...


@dataclass(frozen=True, slots=True)
class WindowEntry:
    role: str
    content: str
    tool_calls: tuple[dict[str, Any], ...] = ()
    # The stored message's id (what a summary covering it names); None for one not stored.
    message_id: UUID | None = field(default=None, compare=False)
    # About what the entry holds in memory: its text and its tool calls' JSON.
    nbytes: int = field(init=False, repr=False, compare=False)
    # About the tokens it takes in a request: the same text, estimated.
    tokens: int = field(init=False, repr=False, compare=False)

    @classmethod
    def from_stored(cls, message: StoredLike) -> WindowEntry:
        return cls(message.role, message.content, tuple(message.tool_calls or ()), message.id)

    def __post_init__(self) -> None:
        calls = orjson.dumps(self.tool_calls).decode() if self.tool_calls else ""
        object.__setattr__(self, "nbytes", len(self.content) + 2 * len(calls) + _ENTRY_OVERHEAD)
        object.__setattr__(self, "tokens", token_count.count(self.content) + token_count.count(calls))


# Messages a full window keeps when it drops the older ones (VERNIS_CONTEXT_KEEP_RECENT).
DEFAULT_KEEP = 10


class ConversationWindow:
    def __init__(
        self,
        size: int,
        entries: Iterable[WindowEntry] = (),
        *,
        keep: int = DEFAULT_KEEP,
        budget: int | None = None,
        summary: SummaryInfo | None = None,
    ) -> None:
        self._size = size
        # Fewer than the size, or a full window would stay full and be cut again on every message.
        self.keep = max(1, min(keep, size - 1))
        self.budget = budget
        # The checkpoint the window's messages follow (SPEC §19); None: they start the conversation.
        self.summary = summary
        self._entries: deque[WindowEntry] = deque(entries)
        self.nbytes = sum(entry.nbytes for entry in self._entries)
        self.tokens = sum(entry.tokens for entry in self._entries)
        # What the provider counted for the history beyond this estimate (`observe`).
        self._uncounted = 0
        # The entries as chat messages (`to_messages`), made when first asked for and extended as
        # entries are appended; None: to be made again (after a cut).
        self._messages: list[dict[str, Any]] | None = None
        self._cap()
        # Set by the cache holding the window, so that a window that grows is accounted again.
        self._grew: Callable[[ConversationWindow], None] | None = None
        # The lease under which this instance last brought the window up to date with what it
        # wrote (`EventHub.lease_mark`): with several instances, whether the window can be used
        # again without reading it anew (`EventHub.unchanged`).
        self.mark: str | None = None

    @property
    def size(self) -> int:
        return self._size

    @property
    def due(self) -> bool:
        """Whether the window must be cut (summarised, or dropped) before the next request."""
        if len(self._entries) > self._size:
            return True
        return self.budget is not None and self.tokens + self._uncounted > self.budget

    def append(self, entry: WindowEntry) -> None:
        """Add the newest message (the window is cut before a request, when it is `due`)."""
        self._entries.append(entry)
        self.nbytes += entry.nbytes
        self.tokens += entry.tokens
        if self._messages is not None:
            self._messages.extend(_messages_of(entry))
        self._cap()
        if self._grew is not None:
            self._grew(self)

    def observe(self, history_tokens: int) -> None:
        """What the provider counted for the window's messages in the last request (its reported
        prompt tokens, less the system message, tools and new message): when more than the
        estimate, the budget counts the difference until the next cut."""
        self._uncounted = max(0, history_tokens - self.tokens)

    def cut(self) -> int:
        """How many of the oldest messages a cut takes: all but the last `keep`, from the user message
        before them (else after them); then whole exchanges more while the rest takes more than half
        the budget (so the window grows again for a while before the next cut), down to the newest
        exchange. 0: nothing to cut."""
        entries = self._entries
        count = max(0, len(entries) - self.keep)
        start = next((index for index in range(count, 0, -1) if entries[index].role == "user"), None)
        if start is None:
            start = next(
                (index for index in range(count, len(entries)) if entries[index].role == "user"), count
            )
        if self.budget is not None:
            rest = sum(entry.tokens for entry in itertools.islice(entries, start, None))
            while rest > self.budget // 2:
                later = next(
                    (index for index in range(start + 1, len(entries)) if entries[index].role == "user"),
                    None,
                )
                if later is None:
                    break  # the newest exchange stays whole; `to_messages` cuts it if it must
                rest -= sum(entries[index].tokens for index in range(start, later))
                start = later
        return start

    def compacted(self, summary: SummaryInfo, count: int) -> None:
        """The oldest `count` messages are now in `summary` (which covers the one before)."""
        self.summary = summary
        self._remove(count)

    def drop(self) -> int:
        """Without a summary: the messages `cut` names are forgotten. How many went."""
        count = self.cut()
        self._remove(count)
        return count

    def _remove(self, count: int) -> None:
        for _ in range(min(count, len(self._entries))):
            dropped = self._entries.popleft()
            self.nbytes -= dropped.nbytes
            self.tokens -= dropped.tokens
        self._uncounted = 0
        self._messages = None

    def _cap(self) -> None:
        if len(self._entries) > _HARD_CAP * self._size:
            self.drop()

    def copy(self) -> ConversationWindow:
        """A window of its own with the same entries (not held by any cache until put there)."""
        return ConversationWindow(
            self._size, self._entries, keep=self.keep, budget=self.budget, summary=self.summary
        )

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[WindowEntry]:
        return iter(self._entries)

    def last_user_text(self) -> str:
        """The text of the message an answer replies to: the last user message."""
        return next((entry.content for entry in reversed(self._entries) if entry.role == "user"), "")

    def untrusted_sources(self) -> list[str]:
        """The tools whose results here were marked untrusted (the guards)."""
        return [
            str(call.get("tool_name", "a tool"))
            for entry in self._entries
            for call in entry.tool_calls
            if isinstance(call.get("result"), dict) and "untrusted" in call["result"]
        ]

    def to_messages(self) -> list[dict[str, Any]]:
        """The window as OpenAI chat messages: tool calls become call + result message pairs; cut
        (`within_budget`) when even what is left after the last cut passes the budget.

        A new list each time, of message dictionaries the window keeps from one request to the next
        (only an appended entry's are made anew, not the whole history's with every answer): they
        are shared, and must not be changed in place (the prompt's helpers copy what they change)."""
        messages = self._messages
        if messages is None:
            messages = self._messages = [
                message for entry in self._entries for message in _messages_of(entry)
            ]
        if self.budget is not None and self.tokens > self.budget:
            return within_budget(messages, self.budget)
        return list(messages)


def _messages_of(entry: WindowEntry) -> list[dict[str, Any]]:
    """One entry as chat messages (`ConversationWindow.to_messages`)."""
    if entry.role == "user":
        return [{"role": "user", "content": entry.content}]
    messages: list[dict[str, Any]] = []
    calls = [call for call in entry.tool_calls if call.get("call_id") and call.get("tool_name")]
    if calls:
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call["call_id"],
                        "type": "function",
                        "function": {
                            "name": call["tool_name"],
                            "arguments": orjson.dumps(call.get("arguments", {})).decode(),
                        },
                    }
                    for call in calls
                ],
            }
        )
        messages.extend(
            {
                "role": "tool",
                "tool_call_id": call["call_id"],
                "content": orjson.dumps(for_model(call.get("result"))).decode(),
            }
            for call in calls
        )
    if entry.content:
        messages.append({"role": "assistant", "content": entry.content})
    return messages


class WindowCache:
    """Windows of recently active conversations, least recently used evicted first, bounded by the
    bytes they hold (`max_bytes`), not by their number."""

    def __init__(
        self,
        size: int,
        max_bytes: int = DEFAULT_MAX_BYTES,
        *,
        keep: int = DEFAULT_KEEP,
        budget: int | None = None,
    ) -> None:
        self.size = size
        self.keep = keep
        self.budget = budget
        self._cache: LRUCache[UUID, ConversationWindow] = LRUCache(
            maxsize=max_bytes, getsizeof=lambda window: window.nbytes + _ENTRY_OVERHEAD
        )

    @property
    def nbytes(self) -> int:
        return int(self._cache.currsize)

    def __len__(self) -> int:
        return len(self._cache)

    def get(self, conversation_id: UUID) -> ConversationWindow | None:
        return self._cache.get(conversation_id)

    def put(self, conversation_id: UUID, window: ConversationWindow) -> None:
        def grew(changed: ConversationWindow) -> None:
            # Put again so the cache counts its new size (and evicts others if it must); a window
            # that was evicted or replaced meanwhile stays out.
            if self._cache.get(conversation_id) is changed:
                try:
                    self._cache[conversation_id] = changed
                except ValueError:  # larger than the whole cache on its own
                    self._cache.pop(conversation_id, None)

        window._grew = grew
        try:
            self._cache[conversation_id] = window
        except ValueError:
            self._cache.pop(conversation_id, None)

    def build(
        self, conversation_id: UUID, messages: Iterable[StoredLike], summary: SummaryInfo | None = None
    ) -> ConversationWindow:
        """The window of stored `messages`: those after `summary`, the conversation's checkpoint (the
        ones it covers are left out here)."""
        covered = 0 if summary is None else summary.covered
        messages = [message for message in messages if message.position >= covered]
        # An edited exchange's earlier version (`edit_message`) is out of the window.
        listed = [message for message in messages if getattr(message, "status", None) != "superseded"]
        # An answer followed by another answer was written again (`regenerate`): only the newest
        # counts; unless the later one continues it (`CONTINUATION_PREFIX`: after a review's outcome).
        latest = [
            message
            for index, message in enumerate(listed)
            if not (
                message.role == "assistant"
                and index + 1 < len(listed)
                and listed[index + 1].role == "assistant"
                and not continues(listed[index + 1])
            )
        ]
        window = ConversationWindow(
            self.size,
            map(WindowEntry.from_stored, latest),
            keep=self.keep,
            budget=self.budget,
            summary=summary,
        )
        self.put(conversation_id, window)
        return window

    def discard(self, conversation_id: UUID) -> None:
        self._cache.pop(conversation_id, None)


def for_model(result: Any) -> Any:
    """A tool's result envelope as the model reads it: without the UI blocks (SPEC §16), which are
    the user's only."""
    if isinstance(result, dict) and "ui" in result:
        return {key: value for key, value in result.items() if key != "ui"}
    return result


# What a result cut for the budget keeps: its first lines, up to this many characters.
RESULT_HEAD_CHARS = 1_000
RESULT_HEAD_LINES = 20
# A text is never cut below this many characters.
_TEXT_FLOOR = 500


def head(text: str, *, lines: int = RESULT_HEAD_LINES, chars: int = RESULT_HEAD_CHARS) -> str:
    """The first `lines` lines of `text`, at most `chars` characters, with a note when it is cut."""
    kept = "\n".join(text.splitlines()[:lines])[:chars]
    if len(kept) >= len(text):
        return text
    return f"{kept}\n[cut to its first lines: {len(text) - len(kept)} more characters left out]"


def within_budget(messages: list[dict[str, Any]], budget: int) -> list[dict[str, Any]]:
    """`messages` cut to about `budget` tokens, never dropped: tool results first, to their first
    lines; then the longest texts, each by half at a time, down to 500 characters. Each cut says so
    in the text, so the model can tell the user what it did not read."""
    out = [dict(message) for message in messages]
    sizes = [token_count.count(m["content"]) if isinstance(m.get("content"), str) else 0 for m in out]
    for index, message in enumerate(out):
        if sum(sizes) <= budget:
            return out
        if message["role"] == "tool":
            message["content"] = head(message["content"])
            sizes[index] = token_count.count(message["content"])
    originals = {index: m["content"] for index, m in enumerate(out) if isinstance(m.get("content"), str)}
    kept = {index: len(text) for index, text in originals.items()}
    while sum(sizes) > budget and kept:
        index = max(kept, key=lambda key: kept[key])
        if kept[index] <= _TEXT_FLOOR:
            break  # as small as it can be made: sent so
        kept[index] = max(_TEXT_FLOOR, kept[index] // 2)
        text = originals[index]
        out[index]["content"] = (
            f"{text[: kept[index]]}\n[Vernis cut this message to fit the context budget: the last "
            f"{len(text) - kept[index]} of its {len(text)} characters are left out.]"
        )
        sizes[index] = token_count.count(out[index]["content"])
    return out
