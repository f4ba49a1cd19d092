"""Plans and tasks of the demo CRM: the plan templates, plans started from them (active, completed or
cancelled), and tasks falling due around today, some of them steps of an active plan.

Completed plans and tasks due in the last few days later become notifications.
"""

from __future__ import annotations

import random
import uuid
from datetime import timedelta

from vernis_crm.demo._crm.common import LAST_DAY, Builder, DemoMember, Person, Source
from vernis_crm.models import Plan, PlanStatus, PlanTemplate, Task, TaskStatus
from vernis_crm.permissions import Role

__all__ = ["add_plans", "add_tasks"]


def add_plans(builder: Builder) -> None:
    rng = builder.rng("plans")
    profile = builder.profile
    created = builder.clock.event(LAST_DAY + 300, 9 * 60)
    for name, description, steps in profile.plan_templates:
        id_ = builder.id("plan_template", name)
        builder.templates[name] = (id_, steps)
        builder.add(
            PlanTemplate,
            id=id_,
            name=name,
            description=description,
            steps=[{"day": day, "channel": channel, "action": action} for day, channel, action in steps],
            active=True,
            created_at=created,
            updated_at=created,
        )
        builder.known("plan_template", name, id_)
    star = builder.by_name[profile.star]
    eligible = [
        person
        for person in builder.people
        if person.kind is not None and person.kind.plans and person is not star
    ]
    people = [star, *rng.sample(eligible, profile.plans - 1)]
    names = [name for name, _, _ in profile.plan_templates]
    template_weights = [len(names) - position for position in range(len(names))]
    for index, person in enumerate(people):
        if index == 0:
            template, status, days_ago = profile.star_plan, PlanStatus.ACTIVE, 3
        else:
            template = rng.choices(names, template_weights)[0]
            status = rng.choices(list(PlanStatus), (55, 35, 10))[0]
            last_day = builder.templates[template][1][-1][0]
            if status is PlanStatus.COMPLETED:
                days_ago = rng.randint(last_day + 2, LAST_DAY)
            elif status is PlanStatus.ACTIVE:
                days_ago = rng.randint(0, min(30, last_day))
            else:
                days_ago = rng.randint(5, LAST_DAY)
        _plan(builder, rng, index, person, template, status, days_ago)
    builder.known("plan", star.name, builder.id("plan", "0"))


def _plan(
    builder: Builder,
    rng: random.Random,
    index: int,
    person: Person,
    template: str,
    status: PlanStatus,
    days_ago: int,
) -> None:
    template_id, steps = builder.templates[template]
    started = builder.clock.event(days_ago, builder.business_minute(rng))
    done_steps = sum(1 for day, _, _ in steps if day <= days_ago)
    completed_at = None
    if status is PlanStatus.COMPLETED:
        current = len(steps)
        completed_at = min(started + timedelta(days=steps[-1][0] + 1), builder.clock.anchor)
    else:
        current = min(done_steps, len(steps) - 1)
    if index == 0:
        assignee = builder.member_with_role(Role.MEMBER)
    else:
        assignee = builder.writer(rng) if rng.random() < 0.9 else None
    id_ = builder.id("plan", str(index))
    builder.add(
        Plan,
        id=id_,
        template_id=template_id,
        contact_id=person.id,
        assignee_id=assignee.id if assignee else None,
        status=status.value,
        current_step=current,
        started_at=started,
        completed_at=completed_at,
        created_at=started,
    )
    if completed_at is not None:
        builder.completed_plans.append(
            Source(
                max(0, days_ago - steps[-1][0] - 1),
                completed_at,
                f"Plan completed: {template} for {person.name}",
                f"All {len(steps)} steps are done.",
                f"/plans/{id_}",
            )
        )
    elif status is PlanStatus.ACTIVE:
        builder.active_plans.append((id_, person, template))


def add_tasks(builder: Builder) -> None:
    rng = builder.rng("tasks")
    profile = builder.profile
    star = builder.by_name[profile.star]
    assignee = builder.member_with_role(Role.MEMBER)
    _task(builder, rng, 0, profile.star_task, star, None, TaskStatus.OPEN, 0, 16 * 60, assignee, "")
    builder.known("task", profile.star_task, builder.id("task", "0"))
    with_phone, weights = builder.reachable()
    for index in range(1, profile.tasks):
        status = rng.choices(list(TaskStatus), (55, 33, 12))[0]
        if status is TaskStatus.OPEN:
            # Some due today, some overdue, most ahead.
            due_in = rng.choice((0, 0, rng.randint(-7, -1), rng.randint(1, 14), rng.randint(1, 5)))
        elif status is TaskStatus.DONE:
            due_in = rng.randint(-30, 0)
        else:
            due_in = rng.randint(-30, 5)
        minute = rng.choice((9 * 60, 12 * 60, 17 * 60))
        plan_id = None
        if rng.random() < 0.15 and builder.active_plans:
            plan_id, person, template = rng.choice(builder.active_plans)
            steps = [action for _, channel, action in builder.templates[template][1] if channel == "task"]
            title = f"{person.name}: {rng.choice(steps or [template])}"
        elif rng.random() < 0.8:
            person = rng.choices(with_phone, cum_weights=weights)[0]
            title = builder.fill(rng, rng.choice(profile.task_titles), person)
        else:
            person, title = None, rng.choice(profile.chores)
        owner = builder.writer(rng) if rng.random() < 0.92 else None
        description = builder.fill(rng, "Came up on {weekday}'s call.", person) if rng.random() < 0.3 else ""
        _task(builder, rng, index, title, person, plan_id, status, due_in, minute, owner, description)


def _task(
    builder: Builder,
    rng: random.Random,
    index: int,
    title: str,
    person: Person | None,
    plan_id: uuid.UUID | None,
    status: TaskStatus,
    due_in: int,
    minute: int,
    assignee: DemoMember | None,
    description: str,
) -> None:
    due = builder.clock.at(due_in, minute)
    created = builder.clock.event(max(1, -due_in + rng.randint(1, 10)), builder.business_minute(rng))
    closed = min(created + timedelta(hours=rng.randint(2, 96)), builder.clock.anchor)
    id_ = builder.id("task", str(index))
    builder.add(
        Task,
        id=id_,
        title=title[:255],
        description=description,
        status=status.value,
        due_at=due,
        assignee_id=assignee.id if assignee else None,
        contact_id=person.id if person else None,
        plan_id=plan_id,
        created_at=created,
        updated_at=created if status is TaskStatus.OPEN else closed,
        completed_at=closed if status is TaskStatus.DONE else None,
    )
    if status is TaskStatus.OPEN and -3 <= due_in <= 0:
        local_due = due.astimezone(builder.clock.zone)
        builder.open_tasks.append(
            Source(
                max(0, -due_in),
                min(due, builder.clock.anchor) - timedelta(hours=3),
                f"Task due: {title}"[:255],
                f"Due {local_due:%a %d %b, %H:%M}.",
                f"/tasks/{id_}",
                assignee.id if assignee else None,
            )
        )
