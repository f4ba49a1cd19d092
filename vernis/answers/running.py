"""An answer as the answers' service runs it: what starts it (`AnswerSpec`), its state while it
runs and once it ends (`RunningAnswer`), and the hooks its end calls (`AnswerStored`, `FinalRows`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from uuid import UUID

import orjson

from vernis.answers.loop import LoopSettings
from vernis.conversation.window import ConversationWindow
from vernis.identity.members import MemberInfo
from vernis.ids import random_hex, random_uuid
from vernis.limits.usage import estimate_tokens
from vernis.tools.runner import ToolRunner

if TYPE_CHECKING:
    import sqlalchemy as sa

__all__ = ["AnswerSpec", "AnswerStored", "FinalRows", "RunningAnswer"]


@dataclass(frozen=True, slots=True)
class AnswerSpec:
    conversation_id: UUID
    messages: list[dict[str, Any]]
    runner: ToolRunner | None
    window: ConversationWindow
    loop: LoopSettings
    message_id: UUID = field(default_factory=random_uuid)
    # The first user message of the conversation when this answer completes its first exchange
    # (the title is made from it); None otherwise.
    first_user_message: str | None = None
    # Whose tokens these are (usage and quotas, vernis.limits.quotas); None: nobody's.
    member_id: UUID | None = None
    organization_id: UUID | None = None
    # Who asked (the guards of what the answer leaves behind, such as its title); None: nobody.
    member: MemberInfo | None = None
    # It continues the answer before it (after a review's outcome), nobody's message asked it.
    continues: bool = False
    # The traceparent of the tool call it goes on from (SPEC §22): its trace is that answer's.
    trace_parent: str | None = None
    # The tokens (estimated) of what the first request carries beside the window's messages: the
    # system message, the turn's context, the tool list (`ConversationWindow.observe`).
    overhead_tokens: int = 0
    # The tokens (estimated) of `messages` after the system message; None: not known.
    history_tokens: int | None = None


@dataclass(eq=False)
class RunningAnswer:
    spec: AnswerSpec
    message_id: UUID = field(default_factory=random_uuid)
    owner: str = field(default_factory=random_hex)
    parts: list[str] = field(default_factory=list)
    # The reasoning the model streamed (SPEC §19), kept apart from the text.
    reasoning: list[str] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    # Of `prompt_tokens`, read from the provider's prompt cache (SPEC §19).
    cached_tokens: int = 0
    # The provider's count of the first request alone (the window's history is in it).
    first_prompt_tokens: int = 0
    started_at: float = field(default_factory=time.monotonic)
    first_token_at: float | None = None
    task: asyncio.Task[None] | None = None
    # The model that answers: the chat model, or the fallback that took over (SPEC §19).
    model: str = ""
    _dirty: bool = False

    def __post_init__(self) -> None:
        self.model = self.model or self.spec.loop.model

    @property
    def conversation_id(self) -> UUID:
        return self.spec.conversation_id

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def tokens(self) -> tuple[int, int]:
        """(input, output) tokens: the provider's figures, or an estimate when it sent none
        (`vernis.limits.usage.estimate_tokens`)."""
        if self.prompt_tokens or self.completion_tokens:
            return self.prompt_tokens, self.completion_tokens
        prompt = (m.get("content") for m in self.spec.messages)
        arguments = (orjson.dumps(call["arguments"]).decode() for call in self.tool_calls)
        return (
            estimate_tokens(text for text in prompt if isinstance(text, str)),
            estimate_tokens([self.text, *arguments]),
        )


# Called once an answer's final row is written (or failed to be): the answer, its final status.
AnswerStored = Callable[[RunningAnswer, str], Awaitable[None]]
# What answers ending together change beside their rows, written in the same transaction: a
# statement and its rows (none: nothing), given those answers (`AnswerService.with_final_rows`).
FinalRows = Callable[[Sequence[RunningAnswer]], "tuple[sa.Executable, list[dict[str, Any]]] | None"]
