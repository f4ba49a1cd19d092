"""Answers: admission, the assistant loop, the registry of running answers, and titles."""
