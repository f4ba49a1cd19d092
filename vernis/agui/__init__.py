"""Vernis as an AG-UI agent (SPEC §20): the input, the event translation and the run."""
