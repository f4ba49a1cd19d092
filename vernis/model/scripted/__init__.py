"""The scripted model: an OpenAI-compatible server on loopback that answers from a script.

The tests point the real `openai` client at it; `vernis serve --scripted-model` mounts it at
`/scripted` so the whole UI works offline (every answer says it is scripted).
"""

from vernis.model.scripted.scenarios import (
    SCRIPTED_CHAT_MODEL,
    SCRIPTED_TITLE_MODEL,
    Scenario,
    default_scenarios,
)
from vernis.model.scripted.script import Fault, Quirk, Reply, ScriptedToolCall
from vernis.model.scripted.server import Exchange, Rule, ScriptedModel, create_app

__all__ = [
    "SCRIPTED_CHAT_MODEL",
    "SCRIPTED_TITLE_MODEL",
    "Exchange",
    "Fault",
    "Quirk",
    "Reply",
    "Rule",
    "Scenario",
    "ScriptedModel",
    "ScriptedToolCall",
    "create_app",
    "default_scenarios",
]
