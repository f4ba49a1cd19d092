"""Conversations: their store, their events, the model's window on them, and a member's data."""
