"""Notifications of the demo CRM: each member's missed calls, new SMS, tasks due, plans completed and
mentions, drawn from what the other parts made, the recent ones unread more often.
"""

from __future__ import annotations

from datetime import timedelta

from vernis_crm.demo._crm.common import Builder, Source, recent
from vernis_crm.models import Notification

__all__ = ["add_notifications"]

_MENTIONS = (
    "@{me} can you take this one?",
    "@{me} please call back today.",
    "@{me} FYI, see my note.",
    "@{me} can you check the open balance?",
    "@{me} they asked for you specifically.",
)


def add_notifications(builder: Builder) -> None:
    rng = builder.rng("notifications")
    count = builder.profile.notifications_per_member
    shares = {
        "missed_call": 0.28,
        "new_sms": 0.28,
        "task_due": 0.2,
        "plan_completed": 0.12,
        "mention": 0.12,
    }
    noted = [person for person in builder.people if person.notes][:40]
    for member in builder.members:
        others = [other for other in builder.writers if other.id != member.id]
        wanted = {kind: round(share * count) for kind, share in shares.items()}
        if not others:
            wanted["mention"] = 0
        wanted["new_sms"] += count - sum(wanted.values())
        mine = [task for task in builder.open_tasks if task.assignee in (member.id, None)]
        pools = {
            "missed_call": recent(builder.missed_calls, 3 * wanted["missed_call"]),
            "task_due": recent(mine or builder.open_tasks, 3 * wanted["task_due"]),
            "plan_completed": recent(builder.completed_plans, 3 * wanted["plan_completed"]),
        }
        chosen: list[tuple[str, Source]] = []
        for kind, pool in pools.items():
            picked = rng.sample(pool, min(len(pool), wanted[kind]))
            wanted["new_sms"] += wanted[kind] - len(picked)
            chosen += [(kind, source) for source in picked]
        for _ in range(wanted["mention"]):
            person, other = rng.choice(noted), rng.choice(others)
            days_ago = rng.randint(0, 13)
            body = rng.choice(_MENTIONS).format(me=member.name.split()[0])
            chosen.append(
                (
                    "mention",
                    Source(
                        days_ago,
                        builder.clock.event(days_ago, builder.business_minute(rng)),
                        f"{other.name} mentioned you on {person.name}",
                        body,
                        f"/contacts/{person.id}",
                    ),
                )
            )
        sms_pool = recent(builder.inbound_sms, 3 * wanted["new_sms"])
        picked = rng.sample(sms_pool, min(len(sms_pool), wanted["new_sms"]))
        chosen += [("new_sms", source) for source in picked]
        for index, (kind, source) in enumerate(chosen):
            read = rng.random() < (0.85 if source.days_ago >= 3 else 0.3)
            read_at = min(source.at + timedelta(minutes=rng.randint(3, 600)), builder.clock.anchor)
            builder.add(
                Notification,
                id=builder.id("notification", f"{member.email}:{index}"),
                member_id=member.id,
                kind=kind,
                title=source.title,
                body=source.body,
                link=source.link,
                read_at=read_at if read else None,
                created_at=source.at,
            )
