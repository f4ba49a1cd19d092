"""The event hub: a conversation's events to every socket showing it, in memory or through Redis."""
