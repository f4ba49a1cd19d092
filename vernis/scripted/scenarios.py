"""The scripted model's default answers, for requests that no test rule matched.

A scenario looks at a request body and either answers with a `Reply` or passes (`None`); the
`ScriptedModel` asks its scenarios in order and the first answer wins. `default_scenarios()` ends with
`echo_reply`, which always answers, so the offline demo (`vernis serve --scripted-model`) never goes
silent. Insert more specific scenarios (quick actions with tool calls, ...) before it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Protocol

from vernis.scripted.script import Reply

__all__ = [
    "SCRIPTED_CHAT_MODEL",
    "SCRIPTED_TITLE_MODEL",
    "Scenario",
    "TitleScenario",
    "default_scenarios",
    "echo_reply",
    "first_user_text",
    "last_user_text",
    "system_text",
]

SCRIPTED_CHAT_MODEL = "vernis-scripted"
SCRIPTED_TITLE_MODEL = "vernis-scripted-title"
TITLE_WORDS = 6
QUOTE_CHARS = 200


class Scenario(Protocol):
    def __call__(self, body: Mapping[str, Any], /) -> Reply | None:
        """Answer the chat-completions request `body`, or return None to let the next scenario try."""
        ...


def _text_of(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}, {"type": "image_url"}]
        return " ".join(
            part["text"]
            for part in content
            if isinstance(part, Mapping) and isinstance(part.get("text"), str)
        )
    return ""


def _messages(body: Mapping[str, Any], role: str) -> list[Mapping[str, Any]]:
    messages = body.get("messages")
    if not isinstance(messages, list):
        return []
    return [m for m in messages if isinstance(m, Mapping) and m.get("role") == role]


def last_user_text(body: Mapping[str, Any]) -> str:
    users = _messages(body, "user")
    return _text_of(users[-1]) if users else ""


def first_user_text(body: Mapping[str, Any]) -> str:
    users = _messages(body, "user")
    return _text_of(users[0]) if users else ""


def system_text(body: Mapping[str, Any]) -> str:
    """Every system (or developer) message, joined."""
    parts = [_text_of(m) for m in (*_messages(body, "system"), *_messages(body, "developer"))]
    return "\n".join(parts)


class TitleScenario:
    """Answers title requests with the first words of the first user message (or its `User:` part).

    A title request is one for `title_model`, or one without tools whose system message mentions a
    "title" (so the title prompt works whatever model name the server is configured with).
    """

    def __init__(self, title_model: str = SCRIPTED_TITLE_MODEL) -> None:
        self.title_model = title_model

    def is_title_request(self, body: Mapping[str, Any]) -> bool:
        if body.get("model") == self.title_model:
            return True
        return not body.get("tools") and re.search(r"\btitle\b", system_text(body), re.IGNORECASE) is not None

    def __call__(self, body: Mapping[str, Any], /) -> Reply | None:
        if not self.is_title_request(body):
            return None
        text = first_user_text(body)
        # A transcript ("User: ...\n\nAssistant: ...") is titled from the user's part.
        transcript = re.match(r"\s*user\s*:\s*(.*?)(?:\n\s*assistant\s*:|$)", text, re.IGNORECASE | re.DOTALL)
        words = re.findall(r"[\w'\u2019-]+", transcript.group(1) if transcript else text)
        if not words:
            return Reply("New conversation")
        title = " ".join(words[:TITLE_WORDS])
        return Reply(title[0].upper() + title[1:])


def _quote(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= QUOTE_CHARS else text[: QUOTE_CHARS - 1].rstrip() + "…"


def echo_reply(body: Mapping[str, Any], /) -> Reply:
    """The catch-all answer: says plainly that it is scripted, and quotes the last user message."""
    quote = _quote(last_user_text(body))
    opening = f"You wrote: “{quote}”. " if quote else "Hello! "
    return Reply(
        opening + "This is Vernis's scripted offline model, not a real language model, so this answer "
        "is canned: it repeats what you wrote. To get real answers, set VERNIS_LLM_BASE_URL "
        "(and VERNIS_LLM_MODEL) to an OpenAI-compatible server and restart without --scripted-model."
    )


def default_scenarios(title_model: str = SCRIPTED_TITLE_MODEL) -> list[Scenario]:
    return [TitleScenario(title_model), echo_reply]
