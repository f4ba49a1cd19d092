"""The conversation window: the stored messages a conversation shows the model (SPEC §4, §19).

A `ConversationWindow` holds at most `size` stored messages, held per conversation in a
`WindowCache` and rebuilt from storage whenever a conversation is loaded and the cache does not
have it. A rolled-over conversation starts with a copy of its predecessor's window, so the assistant
keeps its context across the rollover.

A full window does not slide one message at a time: that would change the start of every request
and no provider prompt cache would ever hit past the system message. It drops its oldest messages
in one go, down to the last `keep` (starting at a user message), and then grows again unchanged at
its start, so consecutive requests share everything but the newest message (SPEC §19). A window is
full at `size` messages, or when its messages pass `budget` tokens (VERNIS_CONTEXT_BUDGET_TOKENS,
estimated at four characters a token); after a cut for the budget the window holds at most half of
it (older exchanges among the last `keep` go too, down to the newest one), so that it grows again
for a while before the next cut.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol
from uuid import UUID

import orjson
from cachetools import LRUCache

from vernis.conversation.records import continues

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
# What an entry costs beyond its text: the objects around it.
_ENTRY_OVERHEAD = 200
# The token estimate's rule of thumb (as `vernis.limits.usage.CHARS_PER_TOKEN`).
_CHARS_PER_TOKEN = 4


class StoredLike(Protocol):
    """What the window needs of a stored message."""

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
    # About what the entry holds in memory: its text and its tool calls' JSON.
    nbytes: int = field(init=False, repr=False, compare=False)
    # About the tokens it takes in a request: the same text, estimated.
    tokens: int = field(init=False, repr=False, compare=False)

    @classmethod
    def from_stored(cls, message: StoredLike) -> WindowEntry:
        return cls(message.role, message.content, tuple(message.tool_calls or ()))

    def __post_init__(self) -> None:
        calls = len(orjson.dumps(self.tool_calls)) if self.tool_calls else 0
        object.__setattr__(self, "nbytes", len(self.content) + calls + _ENTRY_OVERHEAD)
        object.__setattr__(self, "tokens", -(-(len(self.content) + calls) // _CHARS_PER_TOKEN))


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
    ) -> None:
        self._size = size
        # Fewer than the size, or a full window would stay full and slide again on every message.
        self.keep = max(1, min(keep, size - 1))
        self.budget = budget
        self._entries: deque[WindowEntry] = deque(entries)
        while len(self._entries) > size:
            self._entries.popleft()
        self.nbytes = sum(entry.nbytes for entry in self._entries)
        self.tokens = sum(entry.tokens for entry in self._entries)
        if self._over(budget):
            self._fit(None if budget is None else budget // 2)
        # Set by the cache holding the window, so that a window that grows is accounted again.
        self._grew: Callable[[ConversationWindow], None] | None = None
        # The lease under which this instance last brought the window up to date with what it
        # wrote (`EventHub.lease_mark`): with several instances, whether the window can be used
        # again without reading it anew (`EventHub.unchanged`).
        self.mark: str | None = None

    @property
    def size(self) -> int:
        return self._size

    def append(self, entry: WindowEntry) -> None:
        """Add the newest message; a window that would pass its size drops its oldest messages down
        to the last `keep`, from the user message that opens them."""
        entries = self._entries
        entries.append(entry)
        self.nbytes += entry.nbytes
        self.tokens += entry.tokens
        if len(entries) > self._size or self._over(self.budget):
            self._drop(max(0, len(entries) - self.keep))
            # Down to half the budget, so that the window grows again for a while before the next
            # cut (a window kept just under the budget would drop an exchange every turn).
            self._fit(None if self.budget is None else self.budget // 2)
        if self._grew is not None:
            self._grew(self)

    def _drop(self, count: int) -> None:
        entries = self._entries
        # A request that opens with an answer, or with tool results, reads oddly to the model: the
        # cut moves back to the user message before it (keeping one more exchange), else forward.
        start = next((index for index in range(count, 0, -1) if entries[index].role == "user"), None)
        if start is None:
            start = next(
                (index for index in range(count, len(entries)) if entries[index].role == "user"), count
            )
        for _ in range(start):
            dropped = entries.popleft()
            self.nbytes -= dropped.nbytes
            self.tokens -= dropped.tokens

    def _over(self, tokens: int | None) -> bool:
        return tokens is not None and self.tokens > tokens

    def _fit(self, tokens: int | None) -> None:
        """Past `tokens`, drop whole exchanges from the start, down to the newest one."""
        entries = self._entries
        while self._over(tokens):
            start = next((index for index in range(1, len(entries)) if entries[index].role == "user"), None)
            if start is None:
                return  # the newest exchange goes whole; the request is as small as it can be
            for _ in range(start):
                dropped = entries.popleft()
                self.nbytes -= dropped.nbytes
                self.tokens -= dropped.tokens

    def copy(self) -> ConversationWindow:
        """A window of its own with the same entries (not held by any cache until put there)."""
        return ConversationWindow(self._size, self._entries, keep=self.keep, budget=self.budget)

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[WindowEntry]:
        return iter(self._entries)

    def to_messages(self) -> list[dict[str, Any]]:
        """The window as OpenAI chat messages: tool calls become call + result message pairs."""
        messages: list[dict[str, Any]] = []
        for entry in self._entries:
            if entry.role == "user":
                messages.append({"role": "user", "content": entry.content})
                continue
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

    def build(self, conversation_id: UUID, messages: Iterable[StoredLike]) -> ConversationWindow:
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
            self.size, map(WindowEntry.from_stored, latest), keep=self.keep, budget=self.budget
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
