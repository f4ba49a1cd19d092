"""Compaction (SPEC §19): a long conversation's older messages summarised instead of forgotten.

Before an answer's request is built, a window that is `due` (past its size or its token budget) is
cut (`ConversationWindow.cut`): the messages before the cut, with the summary they follow, go to the
title model (then the `[[model.fallbacks]]` in turn) as a transcript, old tool results cut to their
first lines. Its reply, through the guards (no card number or key in a summary), is stored as the
conversation's new checkpoint (`SummaryStore`), every socket showing the conversation hears
`conversation_compacted`, and the request carries the summary in place of those messages.

A summary that cannot be had (every model failing or slow, an empty reply, one the guards refuse)
costs the conversation those messages instead: they are dropped, as a window without summaries
would, and the log says so. A reply longer than `MAX_SUMMARY_CHARS` is cut at a line. Compaction
never fails an answer.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from uuid import UUID

import orjson

from vernis.conversation.events import ConversationCompacted
from vernis.conversation.summaries import SummaryInfo, SummaryStore
from vernis.conversation.window import ConversationWindow, WindowEntry, for_model, head
from vernis.guards import GuardService
from vernis.guards.service import Subject
from vernis.hub.base import EventHub
from vernis.model.base import ChatModel, ChatRequest, ModelRoute, first_reply

__all__ = ["MAX_SUMMARY_CHARS", "SUMMARY_INSTRUCTIONS", "Compactor", "transcript"]

logger = logging.getLogger("vernis.compaction")

SUMMARY_INSTRUCTIONS = (
    "You keep the memory of a long conversation between a user and an assistant. Write the summary "
    "the assistant will read instead of the messages below: the user's goals and preferences, every "
    "fact and figure stated (names, numbers, identifiers, dates), what was decided or done, what the "
    "tools returned that still matters, and open questions. Keep every point of the earlier summary "
    "that still holds. Plain text, at most 400 words. Reply with the summary only."
)
# How long a summary may take, per model, before the next one is asked.
SUMMARY_TIMEOUT = 30.0
SUMMARY_MAX_TOKENS = 1_000
# A longer reply is cut at a line: a summary must stay much smaller than what it replaces.
MAX_SUMMARY_CHARS = 6_000
# What one message may bring to the transcript: the summary model has a context limit too.
MESSAGE_CHARS = 4_000
ARGUMENT_CHARS = 300


def _cut_text(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]} [… {len(text) - limit} more characters]"


def transcript(entries: Sequence[WindowEntry]) -> str:
    """The messages as the summary model reads them: one paragraph each, long texts cut, tool
    results to their first lines."""
    parts = []
    for entry in entries:
        for call in entry.tool_calls:
            arguments = orjson.dumps(call.get("arguments", {})).decode()
            result = orjson.dumps(for_model(call.get("result"))).decode()
            parts.append(
                f"Tool {call.get('tool_name', '?')}({_cut_text(arguments, ARGUMENT_CHARS)}) returned: "
                f"{head(result, lines=5, chars=500)}"
            )
        if entry.content:
            speaker = "User" if entry.role == "user" else "Assistant"
            parts.append(f"{speaker}: {_cut_text(entry.content, MESSAGE_CHARS)}")
    return "\n\n".join(parts)


def clean_summary(raw: str) -> str | None:
    """The model's reply as a summary, or None when nothing usable is left."""
    text = raw.strip()
    if not text:
        return None
    if len(text) > MAX_SUMMARY_CHARS:
        cut = text[:MAX_SUMMARY_CHARS]
        line = cut.rfind("\n")
        text = (cut[:line] if line >= MAX_SUMMARY_CHARS // 2 else cut).rstrip() + " …"
    return text


class Compactor:
    def __init__(
        self,
        *,
        model: ChatModel,
        model_name: str,
        summaries: SummaryStore,
        hub: EventHub,
        guards: GuardService | None = None,
        fallbacks: Sequence[ModelRoute] = (),
        timeout: float = SUMMARY_TIMEOUT,
    ) -> None:
        self._routes = (ModelRoute(model, model_name), *fallbacks)
        self._summaries = summaries
        self._hub = hub
        self._guards = guards
        self._timeout = timeout

    async def compact(
        self,
        conversation_id: UUID,
        window: ConversationWindow,
        member: Subject | None,
        *,
        force: bool = False,
    ) -> SummaryInfo | None:
        """Cut `window` if it is due: summarised when a summary can be had (stored, published, and
        returned), else dropped (None). With `force` (`compact_conversation`), whether due or not,
        and a failed summary drops nothing. Called holding the conversation's lease."""
        if not (force or window.due):
            return None
        entries = list(window)
        count = window.cut()
        older = entries[:count]
        through = next((entry.message_id for entry in reversed(older) if entry.message_id), None)
        if not older or through is None:  # nothing stored to summarise
            if not force:
                window.drop()
            return None
        text, model = await self._summarise(window.summary, older)
        if text is not None and self._guards is not None and member is not None:
            verdict = await self._guards.check_input(text, member, conversation_id)
            text = None if verdict.blocked else verdict.text
        if text is None:
            if force:
                logger.warning("compaction asked for failed: nothing changed")
                return None
            window.drop()
            logger.warning(
                "compaction failed: %d older messages dropped instead of summarised",
                count,
                extra={"conversation_id": str(conversation_id)},
            )
            return None
        summary = await self._summaries.add(conversation_id, text, through, model=model)
        window.compacted(summary, count)
        logger.info(
            "conversation compacted: %d messages summarised",
            count,
            extra={"conversation_id": str(conversation_id)},
        )
        self._hub.publish(
            conversation_id,
            ConversationCompacted(conversation_id=conversation_id, through_message_id=through),
        )
        return summary

    async def _summarise(
        self, earlier: SummaryInfo | None, entries: Sequence[WindowEntry]
    ) -> tuple[str | None, str | None]:
        """The summary of `entries` and the `earlier` summary they follow, and the model that wrote
        it; (None, None) when no model gave one."""
        opening = f"Earlier summary:\n{earlier.text}\n\n" if earlier is not None else ""
        request = ChatRequest(
            model=self._routes[0].model,
            messages=[
                {"role": "system", "content": SUMMARY_INSTRUCTIONS},
                {"role": "user", "content": f"{opening}Conversation:\n{transcript(entries)}"},
            ],
            max_tokens=SUMMARY_MAX_TOKENS,
        )
        found = await first_reply(
            self._routes, request, seconds_each=self._timeout, clean=clean_summary, what="summary"
        )
        return found if found is not None else (None, None)
