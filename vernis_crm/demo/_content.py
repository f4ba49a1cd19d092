"""What the demo CRM of each demo organization is made of: names, companies, texts, agents, plans.

Plain data (`Profile`); `vernis_crm.demo._crm` turns a profile into rows. Texts may use the placeholders
`{first}`, `{last}`, `{name}`, `{company}`, `{org}`, `{other}` (another contact's first name) and one
per `Profile.words` key (`{weekday}`, `{time}`, `{insurer}`, ...), each filled with a random choice.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ACME", "GLOBEX", "PROFILES", "ContactKind", "Line", "NamedContact", "Profile"]


@dataclass(frozen=True, slots=True)
class ContactKind:
    """A kind of contact the organization deals with, and how often it appears."""

    weight: float
    tags: tuple[str, ...]
    extra_tags: tuple[tuple[str, float], ...] = ()  # (tag, probability)
    companies: tuple[str, ...] = ()  # those of its company; none: an employer, sometimes
    company_probability: float = 0.0
    activity: float = 1.0  # how much calling and texting, relative to others
    plans: bool = False  # may be on a plan


@dataclass(frozen=True, slots=True)
class NamedContact:
    """A contact with fixed details, the same in every demo database: tests and docs refer to them."""

    first_name: str
    last_name: str
    company: str | None
    tags: tuple[str, ...]
    email: str
    phone: str  # as typed
    note: str


@dataclass(frozen=True, slots=True)
class Line:
    """One of the organization's own phone numbers."""

    label: str
    number: str  # E.164
    voice_agent: str | None
    text_agent: str | None
    analyzers: tuple[str, ...]
    inbound_share: float  # of the inbound calls it takes
    outbound_share: float  # of the outbound calls and messages it sends
    after_hours: bool = False  # its inbound calls come outside business hours


@dataclass(frozen=True, slots=True)
class Profile:
    slug: str
    country_code: str  # for numbers typed without one
    contacts: int
    calls: int
    messages: int
    plans: int
    tasks: int
    notifications_per_member: int
    first_names: tuple[str, ...]
    last_names: tuple[str, ...]
    named_contacts: tuple[NamedContact, ...]
    kinds: tuple[ContactKind, ...]
    email_domains: tuple[str, ...]
    employers: tuple[str, ...]
    # Numbers contacts are given: (E.164 prefix, digits that follow it, first and last suffix, lengths
    # of the first two groups of the national number: `{a}` and `{b}`; `{c}` is the rest).
    number_ranges: tuple[tuple[str, int, int, int, tuple[int, int]], ...]
    # How people type numbers: `{n}` the national number, `{a}`/`{b}`/`{c}` its groups.
    number_formats: tuple[str, ...]
    business_hours: tuple[int, int]  # local minutes after midnight
    words: dict[str, tuple[str, ...]]
    notes: tuple[str, ...]
    call_summaries: dict[tuple[str, str], tuple[str, ...]]  # (direction, status) -> texts
    # SMS conversations: each a sequence of (direction, possible texts).
    threads: tuple[tuple[tuple[str, tuple[str, ...]], ...], ...]
    unanswered: tuple[str, ...]  # inbound texts nobody has answered yet
    outbox: tuple[str, ...]  # texts the assistant queued moments ago
    voice_agents: tuple[tuple[str, str, str, str], ...]  # (name, voice, language, instructions)
    text_agents: tuple[tuple[str, str], ...]  # (name, instructions)
    analyzers: tuple[tuple[str, str, str], ...]  # (name, description, criteria)
    lines: tuple[Line, ...]
    # (name, description, steps: (day, channel, action)); the first ones are used most.
    plan_templates: tuple[tuple[str, str, tuple[tuple[int, str, str], ...]], ...]
    task_titles: tuple[str, ...]  # with a contact
    chores: tuple[str, ...]  # tasks about no contact
    knowledge: tuple[tuple[str, str, tuple[str, ...]], ...]  # (title, body, tags)
    # The named contact the well-known call, message, plan and task are about, and that task's title.
    star: str = "Jane Cooper"
    star_task: str = ""
    star_call: str = ""
    star_plan: str = ""
    star_message: str = ""
    new_tag: str | None = None  # given to contacts of a kind with `plans` created in the last 60 days


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday")

ACME = Profile(
    slug="acme",
    country_code="1",
    contacts=300,
    calls=2500,
    messages=2000,
    plans=40,
    tasks=60,
    notifications_per_member=25,
    first_names=_words(
        "James Mary Robert Patricia John Jennifer Michael Linda David Elizabeth William Barbara Richard "
        "Susan Joseph Jessica Thomas Sarah Christopher Karen Daniel Lisa Matthew Nancy Anthony Betty "
        "Mark "
        "Sandra Donald Margaret Steven Ashley Andrew Kimberly Joshua Emily Kevin Donna Brian Michelle "
        "George Carol Timothy Amanda Ronald Melissa Jason Deborah Ethan Olivia Liam Sophia Noah Isabella "
        "Mateo Camila Santiago Valentina Diego Lucia Wei Mei Hiroshi Yuki Arjun Ananya Rohan Aisha Omar "
        "Fatima Kwame Amara Chidi Ngozi Dmitri Anya Luca Giulia Sean Siobhan Mohammed Layla Jamal Imani "
        "Tyrone Keisha Javier Rosa Minh Linh Seo-yeon Ji-ho Priya Ravi Grace Henry Chloe Owen Zoe Caleb "
        "Nora Levi Hazel Isaac"
    ),
    last_names=_words(
        "Smith Johnson Williams Brown Jones Garcia Miller Davis Rodriguez Martinez Hernandez Lopez "
        "Gonzalez Wilson Anderson Thomas Taylor Moore Jackson Martin Lee Perez Thompson White Harris "
        "Sanchez Clark Ramirez Lewis Robinson Walker Young Allen King Wright Scott Torres Nguyen Hill "
        "Flores Green Adams Nelson Baker Hall Rivera Campbell Mitchell Carter Roberts Kim Park Chen Wang "
        "Li Patel Shah Singh Kumar Okafor Adeyemi Mensah O'Brien Murphy Kelly Sullivan Rossi Bianchi "
        "Ivanov Petrov Kowalski Novak Cohen Levy Haddad Khalil Tanaka Suzuki Sato Yamamoto Tran Pham "
        "Cruz "
        "Reyes Morales Ortiz Gutierrez Chavez Ramos Diaz Fischer Weber Schneider Dubois Moreau Jensen "
        "Larsen Andersson Lindqvist McAllister"
    ),
    named_contacts=(
        NamedContact(
            "Jane",
            "Cooper",
            "Hudson Yards Capital",
            ("patient", "vip"),
            "jane.cooper@gmail.com",
            "(212) 555-0147",
            "Prefers late-afternoon appointments. Crown on #14 placed last month.",
        ),
        NamedContact(
            "Janet",
            "Cooper",
            None,
            ("patient", "recall-due"),
            "janet.cooper62@yahoo.com",
            "646-555-0188",
            "Jane Cooper's aunt; not the same patient. Hard of hearing: prefers texts.",
        ),
        NamedContact(
            "Robert",
            "Fox",
            None,
            ("lead", "referral"),
            "robfox@outlook.com",
            "+1 917 555 0123",
            "Referred by Jane Cooper. Interested in Invisalign; asked for a payment plan.",
        ),
        NamedContact(
            "Esther",
            "Howard",
            "MetLife Dental",
            ("insurance",),
            "ehoward@metlife-dental.example",
            "1-800-555-0134",
            "Provider relations rep for MetLife; handles our pre-authorizations.",
        ),
        NamedContact(
            "Cameron",
            "Williamson",
            None,
            ("patient", "insurance-pending"),
            "cam.williamson@icloud.com",
            "718.555.0162",
            "Waiting on Delta Dental pre-authorization for two implants.",
        ),
        NamedContact(
            "Brooklyn",
            "Simmons",
            None,
            ("patient", "orthodontics"),
            "brooklyn.simmons@gmail.com",
            "3475550119",
            "Teen patient; mother Leslie Alexander is the guarantor.",
        ),
        NamedContact(
            "Leslie",
            "Alexander",
            "NewYork-Presbyterian",
            ("patient",),
            "leslie.alexander@gmail.com",
            "+13475550156",
            "Guarantor for Brooklyn Simmons. Prefers e-mail for statements.",
        ),
        NamedContact(
            "Guy",
            "Hawkins",
            "Henry Schein",
            ("vendor",),
            "guy.hawkins@henryschein.example",
            "(201) 555-0171",
            "Our Henry Schein rep. Orders by Thursday noon ship the next day.",
        ),
    ),
    kinds=(
        ContactKind(
            weight=70,
            tags=("patient",),
            extra_tags=(
                ("vip", 0.06),
                ("insurance-pending", 0.12),
                ("recall-due", 0.25),
                ("orthodontics", 0.08),
                ("referral", 0.1),
            ),
            company_probability=0.35,
            activity=1.0,
            plans=True,
        ),
        ContactKind(weight=17, tags=("lead",), extra_tags=(("referral", 0.25),), activity=0.6, plans=True),
        ContactKind(
            weight=6,
            tags=("vendor",),
            companies=(
                "Henry Schein",
                "Patterson Dental",
                "Dentsply Sirona",
                "Benco Dental",
                "Align Technology",
                "Hudson Dental Lab",
                "Brooklyn Ortho Lab",
            ),
            company_probability=1.0,
            activity=0.4,
        ),
        ContactKind(
            weight=4,
            tags=("insurance",),
            companies=("Delta Dental", "Aetna", "Cigna", "MetLife Dental", "Guardian", "UnitedHealthcare"),
            company_probability=1.0,
            activity=0.5,
        ),
        ContactKind(
            weight=3,
            tags=("referral",),
            companies=(
                "Bright Smile Orthodontics",
                "Hudson Oral Surgery",
                "Midtown Periodontics",
                "Chelsea Endodontics",
            ),
            company_probability=1.0,
            activity=0.4,
        ),
    ),
    email_domains=("gmail.com", "yahoo.com", "outlook.com", "icloud.com", "hotmail.com", "aol.com"),
    employers=(
        "NYU Langone",
        "Mount Sinai",
        "Con Edison",
        "JPMorgan Chase",
        "Columbia University",
        "MTA",
        "Verizon",
        "Pfizer",
        "Bloomberg",
        "NYC Department of Education",
        "Goldman Sachs",
        "Macy's",
        "The New York Times",
        "Etsy",
        "Self-employed",
        "Deloitte",
        "Citi",
        "NBCUniversal",
    ),
    number_ranges=(
        ("+1212555", 4, 110, 199, (3, 3)),
        ("+1646555", 4, 100, 199, (3, 3)),
        ("+1718555", 4, 100, 199, (3, 3)),
        ("+1917555", 4, 100, 199, (3, 3)),
        ("+1347555", 4, 100, 199, (3, 3)),
        ("+1929555", 4, 100, 199, (3, 3)),
        ("+1201555", 4, 100, 199, (3, 3)),
        ("+1914555", 4, 100, 199, (3, 3)),
        ("+1516555", 4, 100, 199, (3, 3)),
    ),
    number_formats=(
        "({a}) {b}-{c}",
        "({a}) {b}-{c}",
        "{a}-{b}-{c}",
        "{a}-{b}-{c}",
        "{a}.{b}.{c}",
        "+1 {a} {b} {c}",
        "{n}",
        "1-{a}-{b}-{c}",
        "+1{n}",
        "+1 ({a}) {b}-{c}",
    ),
    business_hours=(8 * 60, 17 * 60 + 30),
    words={
        "weekday": _WEEKDAYS,
        "time": ("8:30 AM", "9:00 AM", "10:15 AM", "11:30 AM", "1:00 PM", "2:45 PM", "3:30 PM", "4:15 PM"),
        "insurer": ("Delta Dental", "Aetna", "Cigna", "MetLife", "Guardian", "UnitedHealthcare"),
        "treatment": (
            "cleaning",
            "filling",
            "crown",
            "root canal",
            "extraction",
            "whitening",
            "implant consult",
            "Invisalign check",
            "night guard fitting",
            "deep cleaning",
        ),
        "amount": ("$45", "$80", "$120", "$185", "$240", "$310", "$95"),
        "doctor": ("Dr. Patel", "Dr. Morgan", "Dr. Okafor"),
    },
    notes=(
        "Prefers morning appointments before work.",
        "Anxious about needles; book a longer slot and mention the numbing gel.",
        "Asked about whitening options; sent the brochure by e-mail.",
        "Insurance: {insurer}. Card on file, verified at the last visit.",
        "Referred by {other}. Send a thank-you card to {other}.",
        "Sensitive to cold on the lower left; re-check at the next {treatment}.",
        "Wants to spread the cost of the {treatment} over three months.",
        "Allergic to latex: use nitrile gloves.",
        "Spanish speaker; Rosa at the front desk can help with calls.",
        "Moved to Jersey City; may switch to a closer practice.",
        "Outstanding balance of {amount}; agreed to pay at the next visit.",
        "Has a night guard from {doctor}; bring it to each cleaning.",
        "Prefers texts over calls.",
        "Rescheduled twice this quarter; confirm the day before.",
        "Very happy with the {treatment}; left a 5-star review.",
    ),
    call_summaries={
        ("inbound", "answered"): (
            "{first} called to reschedule a {treatment} to {weekday} at {time}.",
            "{first} confirmed the {treatment} on {weekday} at {time}.",
            "{first} asked whether {insurer} covers a {treatment}; we will send a pre-authorization.",
            "New patient inquiry from {first}; booked a consultation with {doctor} for {weekday}.",
            "{first} had a billing question about a {amount} charge; explained the co-pay.",
            "{first} reported sensitivity after the {treatment}; booked a follow-up for {weekday}.",
            "{first} asked for our hours on {weekday} and parking options.",
            "{first} asked to update their insurance to {insurer}; new card details taken.",
            "{first} called about a chipped tooth; seen as an emergency on {weekday} at {time}.",
            "{first} asked for a copy of their X-rays to be sent to {doctor}.",
        ),
        ("outbound", "answered"): (
            "Recall call: {first} booked a {treatment} for {weekday} at {time}.",
            "Called {first} to confirm tomorrow's {treatment}; confirmed.",
            "Followed up with {first} after the {treatment}; healing well, no pain.",
            "Called {first} about the {insurer} pre-authorization; approved, booked for {weekday}.",
            "Reminded {first} of the open balance of {amount}; will pay online.",
            "Called {first} to offer an earlier {treatment} slot on {weekday}; accepted.",
        ),
        ("inbound", "voicemail"): (
            "Voicemail from {first}: please call back about the {treatment} on {weekday}.",
            "Voicemail from {first}: needs to cancel the appointment on {weekday}.",
            "Voicemail from {first}: question about the {insurer} claim.",
        ),
        ("outbound", "voicemail"): (
            "Left {first} a voicemail about their overdue recall visit.",
            "Left {first} a voicemail to confirm the {treatment} on {weekday} at {time}.",
            "Left {first} a voicemail asking for their new {insurer} member ID.",
        ),
    },
    threads=(
        (
            (
                "outbound",
                (
                    "Hi {first}, this is {org} reminding you of your {treatment} on {weekday} at {time}. "
                    "Reply C to confirm or R to reschedule. - {org}",
                ),
            ),
            ("inbound", ("C", "c", "Confirmed, thanks!", "C - see you then", "Yes I'll be there")),
            ("outbound", ("Thanks {first}, see you on {weekday}! - {org}",)),
        ),
        (
            (
                "outbound",
                (
                    "Hi {first}, this is {org} reminding you of your {treatment} on {weekday} at {time}. "
                    "Reply C to confirm or R to reschedule. - {org}",
                ),
            ),
            ("inbound", ("R", "Can we move it to next week?", "Something came up, can I reschedule?")),
            ("outbound", ("No problem! Would {weekday} at {time} work instead? - {org}",)),
            ("inbound", ("Yes that works", "Perfect, thank you", "Yes please")),
            ("outbound", ("You're booked for {weekday} at {time}. See you then! - {org}",)),
        ),
        (
            (
                "inbound",
                (
                    "Hi, do you take {insurer}?",
                    "Do you accept {insurer} insurance?",
                    "Hello, is {insurer} in network with you?",
                ),
            ),
            (
                "outbound",
                (
                    "Hi {first}, yes, we are in network with {insurer}. Would you like to book a visit? "
                    "- {org}",
                ),
            ),
            ("inbound", ("Yes, a cleaning please", "Not yet, thanks", "Great, I'll call tomorrow")),
        ),
        (
            (
                "outbound",
                (
                    "Hi {first}, it's been six months since your last cleaning. Reply YES and we'll find you "
                    "a time. - {org}",
                ),
            ),
            ("inbound", ("YES", "Yes please", "Yes, mornings are best", "Can you call me?")),
            ("outbound", ("Great! We have {weekday} at {time}. Shall I book it? - {org}",)),
            ("inbound", ("Book it", "Yes", "Perfect")),
        ),
        (
            ("outbound", ("Thanks for visiting {org} today, {first}! How did we do? Reply 1-5. - {org}",)),
            ("inbound", ("5", "5!", "4", "5 - great as always")),
        ),
        (
            (
                "inbound",
                (
                    "Running 10 minutes late, sorry!",
                    "Stuck in traffic, be there in 15",
                    "Is there parking nearby?",
                ),
            ),
            ("outbound", ("No problem {first}, see you soon. - {org}",)),
        ),
        (
            (
                "outbound",
                (
                    "Hi {first}, your {insurer} pre-authorization for the {treatment} was approved. "
                    "Call us to book. - {org}",
                ),
            ),
            ("inbound", ("Great news, thanks!", "Thank you! I'll call tomorrow")),
        ),
    ),
    unanswered=(
        "Can someone call me back about my bill?",
        "Hi, my filling fell out. Can I come in this week?",
        "Do you have anything open on {weekday}?",
        "I think I was charged twice for my last visit",
        "Is Dr. Patel in on {weekday}?",
        "Can you send me the forms for my son?",
        "My gums are bleeding since the cleaning, is that normal?",
        "What's the cancellation policy?",
    ),
    outbox=(
        "Hi {first}, this is {org}: we have a cancellation on {weekday} at {time} if you'd like an earlier "
        "{treatment}. Reply YES to book. - {org}",
        "Hi {first}, a quick reminder that your {insurer} card on file has expired. Please text us a photo "
        "of the new one. - {org}",
        "Hi {first}, please call us at (212) 555-0100 to schedule your overdue recall visit. - {org}",
        "Hi {first}, your {treatment} is confirmed for {weekday} at {time}. - {org}",
    ),
    voice_agents=(
        (
            "Front Desk Ava",
            "ava",
            "en-US",
            "You are the front desk of Acme Dental. Book, confirm and reschedule appointments, answer "
            "questions about hours, insurance and location, and take messages for the dentists. Never give "
            "medical advice. For severe pain, swelling or bleeding, give the emergency line.",
        ),
        (
            "After-hours Max",
            "max",
            "en-US",
            "You answer Acme Dental's line outside office hours. Take a message with the caller's name, "
            "number and reason, tell them when the office opens, and give the emergency line for "
            "urgent problems.",
        ),
    ),
    text_agents=(
        (
            "SMS Concierge",
            "Answer texts to Acme Dental in under 300 characters and sign them '- Acme Dental'. Confirm or "
            "reschedule appointments; hand anything about money or treatment to the front desk.",
        ),
    ),
    analyzers=(
        (
            "Appointment intent",
            "Whether the caller wanted to book, reschedule or cancel, and whether it was done.",
            "Intent: book / reschedule / cancel / none. Resolved on the call: yes / no. Requested day.",
        ),
        (
            "Call quality",
            "How well the call was handled.",
            "Greeting given; caller's name confirmed; no medical advice given; next step agreed; "
            "tone polite. Score 1-5.",
        ),
    ),
    lines=(
        Line(
            "Main line",
            "+12125550100",
            "Front Desk Ava",
            "SMS Concierge",
            ("Appointment intent", "Call quality"),
            inbound_share=0.82,
            outbound_share=0.7,
        ),
        Line(
            "After-hours line",
            "+12125550101",
            "After-hours Max",
            None,
            ("Call quality",),
            inbound_share=0.12,
            outbound_share=0.0,
            after_hours=True,
        ),
        Line(
            "Recall line",
            "+12125550102",
            None,
            "SMS Concierge",
            (),
            inbound_share=0.06,
            outbound_share=0.3,
        ),
    ),
    plan_templates=(
        (
            "New patient onboarding",
            "Welcome a new patient, collect their forms and insurance, and book the first cleaning.",
            (
                (0, "sms", "Send the welcome text with the new-patient forms link"),
                (1, "task", "Verify insurance eligibility"),
                (3, "call", "Call to book the first exam and cleaning"),
                (10, "sms", "Send a reminder two days before the first visit"),
            ),
        ),
        (
            "Recall reminder",
            "Bring patients due for a six-month cleaning back in.",
            (
                (0, "sms", "Text: six months since the last cleaning"),
                (5, "call", "Call if there was no reply"),
                (14, "sms", "Second reminder text"),
                (30, "task", "Mark as lapsed if still not booked"),
            ),
        ),
        (
            "Post-treatment follow-up",
            "Check on a patient after a procedure and catch problems early.",
            (
                (1, "call", "Call to check on pain and healing"),
                (7, "sms", "Text: how are you feeling?"),
                (21, "task", "Book the follow-up visit if needed"),
            ),
        ),
        (
            "Insurance follow-up",
            "Chase a pending pre-authorization or claim until it is settled.",
            (
                (0, "task", "Submit the pre-authorization"),
                (7, "call", "Call the insurer for the status"),
                (14, "sms", "Update the patient"),
                (21, "task", "Escalate to the office manager if still pending"),
            ),
        ),
    ),
    task_titles=(
        "Call {name} about the {insurer} pre-authorization",
        "Send {name} post-op care instructions",
        "Confirm {name}'s {treatment} on {weekday}",
        "Follow up on {name}'s open balance of {amount}",
        "Review new-patient forms for {name}",
        "Request X-rays for {name} from the previous dentist",
        "Book {name}'s six-month cleaning",
        "Call {name} back about the {treatment}",
        "Send {name} a treatment plan estimate",
        "Update {name}'s insurance details",
    ),
    chores=(
        "Order more impression material",
        "Restock the hygiene rooms",
        "Renew the X-ray equipment certification",
        "Update the office holiday hours on the website",
        "Reconcile this week's card payments",
        "Schedule the sterilizer maintenance",
    ),
    knowledge=(
        (
            "Office hours",
            "Monday to Friday, 8:00 to 17:00 Eastern time. Closed on weekends and federal holidays. "
            "Emergency line: (555) 010-2200.",
            ("hours", "contact"),
        ),
        (
            "Insurance we accept",
            "In network with Delta Dental, Aetna, Cigna, MetLife, Guardian and UnitedHealthcare. Other "
            "PPO plans are billed out of network; we file the claim for the patient.",
            ("insurance", "billing"),
        ),
        (
            "New patient forms",
            "New patients fill in the medical history and consent forms online before the first visit; "
            "bring a photo ID and the insurance card.",
            ("new-patient", "forms"),
        ),
        (
            "Cancellation policy",
            "Please cancel or reschedule at least 24 hours ahead. A second late cancellation within a year "
            "carries a $50 fee.",
            ("policy", "appointments"),
        ),
        (
            "Emergencies",
            "Severe pain, swelling, bleeding that does not stop, or a knocked-out tooth: call the emergency "
            "line at (555) 010-2200 at once, day or night.",
            ("emergency",),
        ),
        (
            "Payment plans",
            "Treatments over $500 can be paid in 3, 6 or 12 monthly instalments without interest through "
            "CareCredit. Ask the front desk.",
            ("billing",),
        ),
        (
            "Parking and directions",
            "We are at 350 W 42nd St, 2nd floor. Validated parking at the garage on 41st St; the A/C/E "
            "trains stop at 42nd St - Port Authority.",
            ("location",),
        ),
        (
            "Whitening",
            "In-office whitening takes 90 minutes; take-home trays are ready a week after the impressions. "
            "Not recommended during pregnancy.",
            ("treatment", "cosmetic"),
        ),
        (
            "After an extraction",
            "Bite on gauze for 30 minutes, no straws or smoking for 72 hours, soft foods for two days. Call "
            "if bleeding continues after 24 hours.",
            ("aftercare",),
        ),
        (
            "Children's visits",
            "We see children from age 3. Parents may stay in the room. Sealants are covered by most plans "
            "until age 14.",
            ("children", "appointments"),
        ),
    ),
    star_task="Call Jane Cooper about her crown fitting",
    star_call="Jane Cooper asked how long the new crown takes to settle; booked a check on Friday.",
    star_plan="Post-treatment follow-up",
    star_message="Hi, is it normal that my new crown feels a bit high when I bite?",
    new_tag="new-patient",
)

GLOBEX = Profile(
    slug="globex",
    country_code="49",
    contacts=40,
    calls=250,
    messages=200,
    plans=5,
    tasks=12,
    notifications_per_member=15,
    first_names=_words(
        "Lukas Anna Felix Lea Jonas Sophie Maximilian Marie Paul Hannah Leon Emma Finn Mia Tobias Laura "
        "Mehmet Ayse Jan Katharina Stefan Julia Matthias Sarah Andreas Lena Piotr Agnieszka Luca Chiara"
    ),
    last_names=_words(
        "Müller Schmidt Schneider Fischer Weber Meyer Wagner Becker Schulz Hoffmann Koch Richter Klein "
        "Wolf Neumann Schwarz Zimmermann Braun Krüger Hartmann Yilmaz Kaya Nowak Kowalczyk Rossi Lange "
        "Vogt"
    ),
    named_contacts=(
        NamedContact(
            "Jane",
            "Cooper",
            "Initech GmbH",
            ("customer", "key-account"),
            "jane.cooper@initech.example",
            "+49 30 23125101",
            "Head of purchasing at Initech. Quarterly framework order for sensors.",
        ),
        NamedContact(
            "Jonas",
            "Becker",
            "Umbrella Logistik AG",
            ("prospect",),
            "j.becker@umbrella-logistik.example",
            "0151 23456710",
            "Evaluating our conveyor controllers for the Leipzig hub.",
        ),
    ),
    kinds=(
        ContactKind(
            weight=60,
            tags=("customer",),
            extra_tags=(("key-account", 0.15),),
            companies=(
                "Initech GmbH",
                "Stark Industrie AG",
                "Wayne Metallbau GmbH",
                "Vandelay Import KG",
                "Hooli Europe GmbH",
                "Soylent Foods GmbH",
                "Cyberdyne Systeme AG",
            ),
            company_probability=1.0,
            plans=True,
        ),
        ContactKind(
            weight=30,
            tags=("prospect",),
            companies=("Umbrella Logistik AG", "Tyrell Robotik GmbH", "Gringotts Bank AG", "Acme Werkzeuge"),
            company_probability=1.0,
            activity=0.6,
            plans=True,
        ),
        ContactKind(
            weight=10,
            tags=("supplier",),
            companies=("Bosch Rexroth", "Siemens Components", "Würth Industrie"),
            company_probability=1.0,
            activity=0.4,
        ),
    ),
    email_domains=("gmx.de", "web.de", "t-online.de"),
    employers=(),
    number_ranges=(("+493023125", 3, 110, 999, (2, 5)), ("+4915123456", 3, 720, 999, (3, 4))),
    number_formats=("+49 {a} {b}{c}", "0{a} {b}{c}", "0{a}/{b}-{c}", "+49 (0){a} {b} {c}", "0{a}-{b}{c}"),
    business_hours=(8 * 60, 17 * 60),
    words={
        "weekday": ("Montag", "Dienstag", "Mittwoch", "Donnerstag", "Freitag"),
        "time": ("09:00", "10:30", "11:00", "14:00", "15:30"),
        "product": ("proximity sensors", "conveyor controllers", "servo drives", "PLC modules", "cable sets"),
        "quantity": ("50", "120", "200", "500", "1,000"),
        "amount": ("EUR 4,800", "EUR 12,500", "EUR 27,000", "EUR 2,150"),
    },
    notes=(
        "Prefers e-mail for quotes; calls only for urgent deliveries.",
        "Framework contract renews in Q3; volume discount of 4 % agreed.",
        "Asked for CE documentation for the {product}.",
        "Payment terms: 30 days net. Invoice to the Hamburg office.",
        "Introduced by {other}.",
    ),
    call_summaries={
        ("inbound", "answered"): (
            "{first} asked for a quote for {quantity} {product}.",
            "{first} asked about the delivery date of the {product}; confirmed for {weekday}.",
            "{first} reported a faulty batch of {product}; replacement arranged.",
            "{first} wanted the invoice of {amount} split across two cost centers.",
        ),
        ("outbound", "answered"): (
            "Followed up with {first} on the quote for {quantity} {product}; decision by {weekday}.",
            "Called {first} to confirm the delivery window on {weekday} at {time}.",
        ),
        ("inbound", "voicemail"): ("Voicemail from {first}: please call back about the {product} order.",),
        ("outbound", "voicemail"): ("Left {first} a voicemail about the open quote.",),
    },
    threads=(
        (
            ("outbound", ("Hello {first}, your {product} ship on {weekday}; tracking follows. - Globex",)),
            ("inbound", ("Thanks!", "Great, thank you", "OK")),
        ),
        (
            ("inbound", ("Can you call me about the quote?", "Is the {product} order on time?")),
            ("outbound", ("Hi {first}, I'll call you on {weekday} at {time}. - Globex",)),
            ("inbound", ("Perfect", "OK, thanks")),
        ),
    ),
    unanswered=("Do you have the {product} in stock?", "Please send the updated price list"),
    outbox=("Hello {first}, your quote for {quantity} {product} is ready. - Globex",),
    voice_agents=(
        (
            "Globex Reception",
            "nova",
            "de-DE",
            "You are Globex's reception. Answer in German or English, route sales questions to the account "
            "manager and take messages.",
        ),
    ),
    text_agents=(("Globex Orders", "Answer order status questions by SMS; never quote prices."),),
    analyzers=(("Lead qualification", "Whether a caller is a qualified lead.", "Budget, need, timeline."),),
    lines=(
        Line(
            "Zentrale",
            "+493023125100",
            "Globex Reception",
            "Globex Orders",
            ("Lead qualification",),
            inbound_share=1.0,
            outbound_share=1.0,
        ),
    ),
    plan_templates=(
        (
            "Quote follow-up",
            "Keep a sent quote moving until it is won or lost.",
            (
                (0, "task", "Send the quote"),
                (3, "call", "Call about the quote"),
                (10, "task", "Close or drop"),
            ),
        ),
    ),
    task_titles=(
        "Send {name} a quote for {quantity} {product}",
        "Call {name} about the delivery on {weekday}",
        "Check {name}'s open invoice of {amount}",
    ),
    chores=("Prepare the trade fair stand",),
    knowledge=(
        (
            "Delivery times",
            "Stock items ship within 2 working days from Berlin; custom cable sets take 3 weeks.",
            ("logistics",),
        ),
        ("Payment terms", "30 days net; 2 % discount for payment within 10 days.", ("billing",)),
        ("Returns", "Unused goods can be returned within 30 days with the delivery note.", ("policy",)),
    ),
    star_task="Send Jane Cooper the renewal quote",
    star_call="Jane Cooper asked for the renewal quote for the framework order.",
    star_plan="Quote follow-up",
    star_message="Can you send the renewal quote by Friday?",
)

PROFILES: dict[str, Profile] = {profile.slug: profile for profile in (ACME, GLOBEX)}
