"""Conversation titles, made in the background after the first exchange (SPEC §4 step 9).

A light model (`VERNIS_TITLE_MODEL`) proposes a title; when it fails, the `[[model.fallbacks]]`
models are asked in turn (SPEC §19); whatever goes wrong (every model down or slow, or an answer
that is nonsense), the title falls back to the first words of the first user message. A title never
delays or breaks the chat.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Sequence
from uuid import UUID

from vernis.conversation.events import TitleUpdated
from vernis.conversation.store import ConversationStore
from vernis.guards import GuardService
from vernis.guards.service import Subject
from vernis.hub.base import EventHub
from vernis.model.base import ChatModel, ChatRequest, ModelRoute, first_reply

__all__ = ["MAX_TITLE_CHARS", "TitleService", "clean_title", "fallback_title"]

logger = logging.getLogger("vernis.titles")

MAX_TITLE_CHARS = 60
TITLE_TIMEOUT = 20.0

TITLE_INSTRUCTIONS = (
    "Write a title for this conversation: at most six words, no quotes, no trailing period. "
    "Reply with the title only."
)


def fallback_title(first_message: str) -> str:
    words = first_message.split()
    title = ""
    for word in words:
        candidate = f"{title} {word}".strip()
        if len(candidate) > MAX_TITLE_CHARS - 1:
            break
        title = candidate
    if not title:
        title = first_message.strip()[: MAX_TITLE_CHARS - 1]
    if len(title) < len(" ".join(words)):
        title += "…"
    return title or "New conversation"


def clean_title(raw: str) -> str | None:
    """The model's reply as a title, or None when nothing usable is left."""
    line = next((part for part in raw.strip().splitlines() if part.strip()), "")
    line = re.sub(r"^(title\s*:\s*)", "", line.strip(), flags=re.IGNORECASE)
    line = line.strip().strip("\"'`*#").strip().rstrip(".").strip()
    line = " ".join(line.split())
    if not line:
        return None
    if len(line) > MAX_TITLE_CHARS:
        # At a word boundary when there is one in the second half: never half a word.
        cut = line[: MAX_TITLE_CHARS - 1]
        space = cut.rfind(" ")
        line = (cut[:space] if space >= MAX_TITLE_CHARS // 2 else cut).rstrip(" ,;:-") + "…"
    return line


class TitleService:
    """Titles made in the background. With `guards`, a proposed title passes the input guards of the
    member who asked (`schedule`'s `member`): redacted where needed, and the first words of the
    message instead when it is refused."""

    def __init__(
        self,
        *,
        model: ChatModel,
        model_name: str,
        store: ConversationStore,
        hub: EventHub,
        guards: GuardService | None = None,
        fallbacks: Sequence[ModelRoute] = (),
    ) -> None:
        self._routes = (ModelRoute(model, model_name), *fallbacks)
        self._store = store
        self._hub = hub
        self._guards = guards
        self._tasks: set[asyncio.Task[None]] = set()

    def schedule(
        self, conversation_id: UUID, user_message: str, answer: str, member: Subject | None = None
    ) -> None:
        task = asyncio.create_task(self._title(conversation_id, user_message, answer, member))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def propose(self, user_message: str, answer: str) -> str:
        """A title for a first exchange: the model's, or the fallback."""
        request = ChatRequest(
            model=self._routes[0].model,
            messages=[
                {"role": "system", "content": TITLE_INSTRUCTIONS},
                {"role": "user", "content": f"User: {user_message[:2000]}\n\nAssistant: {answer[:2000]}"},
            ],
            max_tokens=32,
        )
        found = await first_reply(
            self._routes, request, seconds_each=TITLE_TIMEOUT, clean=clean_title, what="title generation"
        )
        return found[0] if found is not None else fallback_title(user_message)

    async def _title(
        self, conversation_id: UUID, user_message: str, answer: str, member: Subject | None
    ) -> None:
        title = await self.propose(user_message, answer)
        if self._guards is not None and member is not None:
            # The model wrote it: shown in every tab and the picker, kept, exported. `user_message`
            # passed the guards already.
            verdict = await self._guards.check_input(title, member, conversation_id)
            if verdict.blocked:
                title = fallback_title(user_message)
            elif verdict.redacted:
                title = verdict.text
        try:
            await self._store.set_title(conversation_id, title)
        except Exception:
            logger.exception("storing the title failed")
            return
        self._hub.publish(conversation_id, TitleUpdated(conversation_id=conversation_id, title=title))
