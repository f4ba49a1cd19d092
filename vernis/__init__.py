"""Vernis: a self-hosted, real-time AI assistant server that a SaaS product embeds in its own UI."""
