"""The conversation window: the last N stored messages a conversation shows the model (SPEC §4).

A `ConversationWindow` is a bounded deque of stored messages, held per conversation in a
`WindowCache` and rebuilt from storage whenever a conversation is loaded and the cache does not
have it. A rolled-over conversation starts with a copy of its predecessor's window, so the assistant
keeps its context across the rollover.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import orjson
from cachetools import LRUCache

from vernis.services.persistence import StoredMessage

__all__ = ["ConversationWindow", "WindowCache", "WindowEntry"]


@dataclass(frozen=True, slots=True)
class WindowEntry:
    role: str
    content: str
    tool_calls: tuple[dict[str, Any], ...] = ()

    @classmethod
    def from_stored(cls, message: StoredMessage) -> WindowEntry:
        return cls(message.role, message.content, tuple(message.tool_calls or ()))


class ConversationWindow:
    def __init__(self, size: int, entries: Iterable[WindowEntry] = ()) -> None:
        self._entries: deque[WindowEntry] = deque(entries, maxlen=size)

    @property
    def size(self) -> int:
        assert self._entries.maxlen is not None
        return self._entries.maxlen

    def append(self, entry: WindowEntry) -> None:
        self._entries.append(entry)

    def copy(self) -> ConversationWindow:
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
    """Windows of recently active conversations, least recently used evicted first."""

    def __init__(self, size: int, max_conversations: int = 10_000) -> None:
        self.size = size
        self._cache: LRUCache[UUID, ConversationWindow] = LRUCache(maxsize=max_conversations)

    def get(self, conversation_id: UUID) -> ConversationWindow | None:
        return self._cache.get(conversation_id)

    def put(self, conversation_id: UUID, window: ConversationWindow) -> None:
        self._cache[conversation_id] = window

    def build(self, conversation_id: UUID, messages: Iterable[StoredMessage]) -> ConversationWindow:
        window = ConversationWindow(self.size, map(WindowEntry.from_stored, messages))
        self._cache[conversation_id] = window
        return window

    def discard(self, conversation_id: UUID) -> None:
        self._cache.pop(conversation_id, None)
