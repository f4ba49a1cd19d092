"""The conversation window: the last N stored messages a conversation shows the model (SPEC §4).

A `ConversationWindow` is a bounded deque of stored messages, held per conversation in a
`WindowCache` and rebuilt from storage whenever a conversation is loaded and the cache does not
have it. A rolled-over conversation starts with a copy of its predecessor's window, so the assistant
keeps its context across the rollover.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol
from uuid import UUID

import orjson
from cachetools import LRUCache

__all__ = ["DEFAULT_MAX_BYTES", "ConversationWindow", "StoredLike", "WindowCache", "WindowEntry"]

# What the window cache may hold in all, measured as the text it keeps (a window of 50 long messages
# with tool results is easily 100 KB; a count of conversations says nothing about memory).
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
# What an entry costs beyond its text: the objects around it.
_ENTRY_OVERHEAD = 200


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

    @classmethod
    def from_stored(cls, message: StoredLike) -> WindowEntry:
        return cls(message.role, message.content, tuple(message.tool_calls or ()))

    def __post_init__(self) -> None:
        calls = len(orjson.dumps(self.tool_calls)) if self.tool_calls else 0
        object.__setattr__(self, "nbytes", len(self.content) + calls + _ENTRY_OVERHEAD)


class ConversationWindow:
    def __init__(self, size: int, entries: Iterable[WindowEntry] = ()) -> None:
        self._entries: deque[WindowEntry] = deque(entries, maxlen=size)
        self.nbytes = sum(entry.nbytes for entry in self._entries)
        # Set by the cache holding the window, so that a window that grows is accounted again.
        self._grew: Callable[[ConversationWindow], None] | None = None
        # The lease under which this instance last brought the window up to date with what it
        # wrote (`EventHub.lease_mark`): with several instances, whether the window can be used
        # again without reading it anew (`EventHub.unchanged`).
        self.mark: str | None = None

    @property
    def size(self) -> int:
        assert self._entries.maxlen is not None
        return self._entries.maxlen

    def append(self, entry: WindowEntry) -> None:
        entries = self._entries
        if len(entries) == entries.maxlen:
            self.nbytes -= entries[0].nbytes
        entries.append(entry)
        self.nbytes += entry.nbytes
        if self._grew is not None:
            self._grew(self)

    def copy(self) -> ConversationWindow:
        """A window of its own with the same entries (not held by any cache until put there)."""
        return ConversationWindow(self.size, self._entries)

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
                        "content": orjson.dumps(call.get("result")).decode(),
                    }
                    for call in calls
                )
            if entry.content:
                messages.append({"role": "assistant", "content": entry.content})
        return messages


class WindowCache:
    """Windows of recently active conversations, least recently used evicted first, bounded by the
    bytes they hold (`max_bytes`), not by their number."""

    def __init__(self, size: int, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.size = size
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
        # An answer followed by another answer was written again (`regenerate`): only the newest counts.
        latest = [
            message
            for index, message in enumerate(listed)
            if not (
                message.role == "assistant"
                and index + 1 < len(listed)
                and listed[index + 1].role == "assistant"
            )
        ]
        window = ConversationWindow(self.size, map(WindowEntry.from_stored, latest))
        self.put(conversation_id, window)
        return window

    def discard(self, conversation_id: UUID) -> None:
        self._cache.pop(conversation_id, None)
