// The quick actions of an empty conversation (SPEC §11), each with the prompt it sends.

export const QUICK_ACTIONS = [
  { label: "Search contacts", prompt: "Search my contacts and show me the ten most recently added ones." },
  { label: "Recent calls", prompt: "Show me my most recent calls: who called, when, and how each call ended." },
  { label: "Send an SMS", prompt: "I want to send an SMS to a contact. Ask me who it is for and what it should say." },
  { label: "Dashboard stats", prompt: "Give me the dashboard stats for this week." },
  { label: "Follow up with a contact", prompt: "Which contacts are waiting for a reply or a follow-up? List them with what each one needs." },
  { label: "Review today's activity", prompt: "Review today's activity for me: calls, messages and tasks." },
  { label: "Create a new contact", prompt: "I want to create a new contact. Ask me for the details you need." },
  { label: "Check engagement stats", prompt: "How is engagement going? Show me the engagement stats." },
  { label: "View my plans", prompt: "Show me my active plans and where each one stands." },
];

const ENTITY_NAMES = {
  contact: "contact",
  call: "call",
  plan: "plan",
  plan_template: "plan template",
  agent: "voice agent",
  task: "task",
  phone: "phone number",
  knowledge: "knowledge item",
  analyzer: "analyzer",
  text_agent: "text agent",
};

/** An action about the record the host page shows ("Summarize this contact"), or null. */
export function pageAction(entityType) {
  const name = ENTITY_NAMES[entityType];
  if (!name) {
    return null;
  }
  return { label: `Summarize this ${name}`, prompt: `Summarize this ${name} for me.` };
}
