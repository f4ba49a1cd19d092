"""The organization's setup in the demo CRM: voice and text agents, analyzers, phone lines, knowledge.

Made long before the 90 days of activity, so every call and message can name its line and agent.
"""

from __future__ import annotations

from vernis_crm.demo._crm.common import LAST_DAY, Builder
from vernis_crm.models import Analyzer, KnowledgeItem, PhoneNumber, PhoneNumberAnalyzer, TextAgent, VoiceAgent

__all__ = ["add_infrastructure", "add_knowledge"]


def add_infrastructure(builder: Builder) -> None:
    created = builder.clock.event(LAST_DAY + 200, 9 * 60)
    stamps = {"created_at": created, "updated_at": created}
    for name, voice, language, instructions in builder.profile.voice_agents:
        id_ = builder.voice_agents[name] = builder.id("voice_agent", name)
        builder.add(
            VoiceAgent,
            id=id_,
            name=name,
            voice=voice,
            language=language,
            instructions=instructions,
            active=True,
            **stamps,
        )
        builder.known("voice_agent", name, id_)
    text_agents = {}
    for name, instructions in builder.profile.text_agents:
        id_ = text_agents[name] = builder.id("text_agent", name)
        builder.add(TextAgent, id=id_, name=name, instructions=instructions, active=True, **stamps)
        builder.known("text_agent", name, id_)
    analyzers = {}
    for name, description, criteria in builder.profile.analyzers:
        id_ = analyzers[name] = builder.id("analyzer", name)
        builder.add(Analyzer, id=id_, name=name, description=description, criteria=criteria, **stamps)
        builder.known("analyzer", name, id_)
    for line in builder.profile.lines:
        id_ = builder.lines[line.label] = builder.id("phone_number", line.number)
        builder.add(
            PhoneNumber,
            id=id_,
            number=line.number,
            label=line.label,
            voice_agent_id=builder.voice_agents[line.voice_agent] if line.voice_agent else None,
            text_agent_id=text_agents[line.text_agent] if line.text_agent else None,
            created_at=created,
        )
        builder.known("phone_number", line.label, id_)
        for analyzer in line.analyzers:
            builder.add(PhoneNumberAnalyzer, phone_number_id=id_, analyzer_id=analyzers[analyzer])


def add_knowledge(builder: Builder) -> None:
    created = builder.clock.event(LAST_DAY + 100, 9 * 60)
    for title, body, tags in builder.profile.knowledge:
        id_ = builder.id("knowledge_item", title)
        builder.add(
            KnowledgeItem,
            id=id_,
            title=title,
            body=body,
            tags=list(tags),
            created_at=created,
            updated_at=created,
        )
        builder.known("knowledge_item", title, id_)
