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

import orjson

from vernis.model.scripted.script import Quirk, Reply, ScriptedToolCall

__all__ = [
    "SCRIPTED_CHAT_MODEL",
    "SCRIPTED_TITLE_MODEL",
    "Scenario",
    "TitleScenario",
    "ask_user_scenario",
    "context_text",
    "default_scenarios",
    "echo_reply",
    "first_user_text",
    "last_user_text",
    "prompt_text",
    "reasoning_scenario",
    "summary_scenario",
    "system_text",
    "without_context",
]

SCRIPTED_CHAT_MODEL = "vernis-scripted"
SCRIPTED_TITLE_MODEL = "vernis-scripted-title"
TITLE_WORDS = 6
QUOTE_CHARS = 200


class Scenario(Protocol):
    def __call__(self, body: Mapping[str, Any], /) -> Reply | None:
        """Answer the chat-completions request `body`, or return None to let the next scenario try."""
        ...


# Vernis opens the new user message with the turn's context (`vernis.model.prompt`: the date, the
# page); the scenarios answer what the user wrote.
_CONTEXT = re.compile(r"\A<context>\n.*?\n</context>(?:\n\n|\Z)", re.DOTALL)


def _text_of(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return _CONTEXT.sub("", content, count=1)
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}, {"type": "image_url"}]
        texts = [
            part["text"]
            for part in content
            if isinstance(part, Mapping) and isinstance(part.get("text"), str)
        ]
        return " ".join(text for text in texts if not _CONTEXT.fullmatch(text))
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


def without_context(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`messages` with the turn's context taken off the user's, as the conversation holds them."""
    return [
        {**message, "content": _text_of(message)}
        if message.get("role") == "user" and isinstance(message.get("content"), str)
        else message
        for message in messages
    ]


def context_text(body: Mapping[str, Any]) -> str:
    """The turn's context Vernis put with the last user message (or the system message), if any."""
    for message in reversed(body.get("messages") or []):
        content = message.get("content") if isinstance(message, Mapping) else None
        texts = [content] if isinstance(content, str) else []
        if isinstance(content, list):
            texts = [p["text"] for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str)]
        for text in texts:
            start = text.find("<context>\n")
            end = text.find("\n</context>", start)
            if start >= 0 and end > start:
                return text[start + len("<context>\n") : end]
    return ""


def prompt_text(body: Mapping[str, Any]) -> str:
    """What Vernis tells the model besides the conversation: the system message(s), then the turn's
    context (the date, the current page, SPEC §19)."""
    return f"{system_text(body)}\n{context_text(body)}"


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
    """The catch-all answer: says plainly that it is scripted, quotes the last user message, and
    describes the files attached to it (their name, type and first words), as Vernis sends them."""
    users = _messages(body, "user")
    content = users[-1].get("content") if users else None
    parts = content if isinstance(content, list) else []
    files = [match for part in parts if (match := _ATTACHED.match(str(part.get("text", ""))))]
    own = " ".join(
        str(part["text"])
        for part in parts
        if part.get("type") == "text" and not _ATTACHED.match(str(part["text"]))
    )
    quote = _quote(_text_of({"content": own}) if files else last_user_text(body))
    opening = f"You wrote: “{quote}”. " if quote else "Hello! "
    if files:
        opening += "You attached " + "; ".join(_described(match) for match in files) + ". "
    return Reply(
        opening + "This is Vernis's scripted offline model, not a real language model, so this answer "
        "is canned: it repeats what you wrote. To get real answers, set VERNIS_LLM_BASE_URL "
        "(and VERNIS_LLM_MODEL) to an OpenAI-compatible server and restart without --scripted-model."
    )


# An attachment's part as `vernis.attachments` writes it: a bracketed header, then its text.
_ATTACHED = re.compile(
    r'\[Attachment \d+ of \d+: "(?P<name>[^"]*)" \((?P<type>[^,)]+)[^\n]*\n?(?P<text>.*)', re.DOTALL
)
ATTACHMENT_WORDS = 12


def _described(match: re.Match[str]) -> str:
    lines = [line for line in match["text"].splitlines() if not line.startswith("[")]
    words = " ".join(lines).split()
    described = f"“{match['name']}” ({match['type']})"
    if words:
        more = "…" if len(words) > ATTACHMENT_WORDS else ""
        described += f", which begins: “{' '.join(words[:ATTACHMENT_WORDS])}{more}”"
    return described


ASK_ME = re.compile(r"\bask me (a few |some )?questions\b", re.IGNORECASE)
FOLLOW_UP_FORM: dict[str, Any] = {
    "title": "Plan the follow-up",
    "questions": [
        {"id": "topic", "label": "What should the follow-up be about?", "type": "text", "required": True},
        {
            "id": "channel",
            "label": "How should we reach out?",
            "type": "choice",
            "options": ["Call", "SMS", "E-mail"],
            "required": True,
        },
        {
            "id": "prepare",
            "label": "What should be ready beforehand?",
            "type": "multi_choice",
            "options": ["Call notes", "Latest invoice", "Open tasks"],
        },
        {"id": "minutes", "label": "How many minutes should it take?", "type": "number"},
        {"id": "day", "label": "Which day?", "type": "date"},
        {"id": "remind", "label": "Remind me the day before?", "type": "boolean"},
    ],
}


def _offered(body: Mapping[str, Any], name: str) -> bool:
    tools = body.get("tools")
    return isinstance(tools, list) and any(
        isinstance(tool, Mapping) and tool.get("function", {}).get("name") == name for tool in tools
    )


def _asked_result(body: Mapping[str, Any]) -> Any:
    """The result of the `ask_user` call made since the last user message, once answered."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return None
    asked: set[str] = set()
    result = None
    for message in messages:
        if not isinstance(message, Mapping):
            continue
        if message.get("role") == "user":
            asked, result = set(), None
        for call in message.get("tool_calls") or ():
            if isinstance(call, Mapping) and call.get("function", {}).get("name") == "ask_user":
                asked.add(str(call.get("id")))
        if message.get("role") == "tool" and message.get("tool_call_id") in asked:
            try:
                result = orjson.loads(message.get("content") or "null")
            except orjson.JSONDecodeError:
                result = None
    return result


def ask_user_scenario(body: Mapping[str, Any], /) -> Reply | None:
    """A message asking "ask me (a few) questions" gets a form (`ask_user`, SPEC §17) when the
    tool is offered; once the user answered (or closed the form), the next answer says what came
    back."""
    result = _asked_result(body)
    if isinstance(result, Mapping):
        data = result.get("data")
        if isinstance(data, Mapping) and isinstance(data.get("answers"), Mapping):
            answers = data["answers"]
            lines = "\n".join(f"- **{key}**: {_quote(str(value))}" for key, value in answers.items())
            return Reply(f"Thanks, that is what I needed. You answered:\n\n{lines or '- nothing'}")
        if result.get("ok") is False:
            return Reply("All right, we will leave it there. Tell me if you want to plan it later.")
    messages = body.get("messages")
    last = messages[-1] if isinstance(messages, list) and messages else None
    if not isinstance(last, Mapping) or last.get("role") != "user" or not _offered(body, "ask_user"):
        return None
    if not ASK_ME.search(last_user_text(body)):
        return None
    return Reply(
        "A few questions first, so I do not guess.",
        tool_calls=[ScriptedToolCall("ask_user", FOLLOW_UP_FORM)],
    )


THINK = re.compile(r"\b(think|reason)\b", re.IGNORECASE)


def reasoning_scenario(body: Mapping[str, Any], /) -> Reply | None:
    """A message asking to "think" (or "reason") is answered the way reasoning models answer: their
    reasoning streamed first (`delta.reasoning_content`, then `delta.reasoning`: both names in one
    stream), then the text (SPEC §19, the panel folds the reasoning under "Thinking…")."""
    messages = body.get("messages")
    last = messages[-1] if isinstance(messages, list) and messages else None
    if not isinstance(last, Mapping) or last.get("role") != "user":
        return None
    text = last_user_text(body)
    if not THINK.search(text):
        return None
    quote = _quote(text)
    reasoning = (
        f"The user wrote “{quote}” and wants me to think before answering. "
        "A scripted model has nothing to think with, so this reasoning is canned too: it shows how a "
        "reasoning model's thoughts stream before its answer."
    )
    answer = echo_reply(body)
    return Reply(answer.text, reasoning=reasoning, quirks=Quirk.REASONING)


# A summary request (`vernis.answers.compaction`): no tools, a system message about a summary, and a
# transcript after "Conversation:".
_SUMMARY_ASKED = re.compile(r"\bsummary\b", re.IGNORECASE)
_EARLIER = re.compile(r"\AEarlier summary:\n(.*?)\n\nConversation:\n", re.DOTALL)
SUMMARY_LINE_CHARS = 160


def summary_scenario(body: Mapping[str, Any], /) -> Reply | None:
    """Summarises the way an extractive summariser would, so that a fact goes on from summary to
    summary: the earlier summary's lines, then one line per user message of the transcript (its
    first 160 characters)."""
    text = last_user_text(body)
    if body.get("tools") or not _SUMMARY_ASKED.search(system_text(body)) or "Conversation:\n" not in text:
        return None
    earlier = _EARLIER.match(text)
    lines = earlier.group(1).splitlines() if earlier else []
    conversation = text.split("Conversation:\n", 1)[1]
    for paragraph in conversation.split("\n\n"):
        if paragraph.startswith("User: "):
            said = " ".join(paragraph[len("User: ") :].split())
            lines.append(f"- The user said: {said[:SUMMARY_LINE_CHARS]}")
    return Reply("\n".join(lines) or "- Nothing was said yet.")


def default_scenarios(title_model: str = SCRIPTED_TITLE_MODEL) -> list[Scenario]:
    return [
        summary_scenario,
        TitleScenario(title_model),
        ask_user_scenario,
        reasoning_scenario,
        echo_reply,
    ]
