"""Title cleaning and the first-words fallback."""

from __future__ import annotations

from vernis.answers.titles import MAX_TITLE_CHARS, clean_title, fallback_title


def test_clean_title_strips_decoration() -> None:
    """Quotes, a `Title:` prefix, markdown and a trailing period are removed; blank replies give None."""
    assert clean_title('Title: "Booking a cleaning."\nmore') == "Booking a cleaning"
    assert clean_title("**Dental plan questions**") == "Dental plan questions"
    assert clean_title("  \n ") is None


def test_clean_title_caps_length() -> None:
    """A long model reply is cut to at most 60 characters."""
    title = clean_title("word " * 40)
    assert title is not None
    assert len(title) <= MAX_TITLE_CHARS


def test_fallback_uses_first_words_within_the_cap() -> None:
    """The fallback keeps whole first words, marks the cut, and never exceeds 60 characters."""
    assert fallback_title("Find Jane Doe") == "Find Jane Doe"
    long = fallback_title("Please find every contact who called us last week and did not get a call back yet")
    assert long.endswith("…")
    assert len(long) <= MAX_TITLE_CHARS
    assert fallback_title("x" * 200) == "x" * (MAX_TITLE_CHARS - 1) + "…"


def test_clean_title_cuts_at_a_word_boundary() -> None:
    """A model title over 60 characters is cut after a whole word (never half a word), and marked."""
    title = clean_title("Reviewing quarterly engagement statistics for the northeastern dental practices")
    assert title == "Reviewing quarterly engagement statistics for the…"
    assert clean_title("x" * 80) == "x" * (MAX_TITLE_CHARS - 1) + "…"
