"""Normalisation: what the model sees is cleaned of hidden text; what the detectors read is folded."""

from __future__ import annotations

from vernis.guards.normalise import normalise, skeleton


def test_ascii_is_left_as_it_is() -> None:
    """Plain ASCII (most messages) is the same text in every view."""
    prepared = normalise("Call Jane at 10, then log it.")
    assert prepared.clean == prepared.scan == "Call Jane at 10, then log it."


def test_hidden_characters_are_removed_and_compatibility_forms_folded() -> None:
    """Zero-width spaces, bidi overrides, tag characters and soft hyphens go; full-width and NBSP become plain."""
    smuggled = "".join(chr(0xE0000 + ord(c)) for c in "hi")
    prepared = normalise(f"ig\u200bnore\u202e \uff46\uff55\uff4c\uff4c\u00a0width\u00ad{smuggled}")
    assert prepared.clean == "ignore full width"


def test_joiners_stay_for_the_model_but_not_for_the_detectors() -> None:
    """ZWJ/ZWNJ stay in the text sent on (emoji, Persian spelling) but not in what detectors read; spans map back."""
    prepared = normalise("family 👨\u200d👩 card 4111\u200d1111")
    assert "\u200d" in prepared.clean
    assert "\u200d" not in prepared.scan
    start = prepared.scan.index("4111")
    begin, end = prepared.to_clean(start, start + len("41111111"))
    assert prepared.clean[begin:end] == "4111\u200d1111"


def test_skeleton_undoes_homoglyphs_leetspeak_accents_and_spacing() -> None:
    """Cyrillic/Greek look-alikes, digits for letters, accents and spaced letters all fold to plain words."""
    assert skeleton("\u0456gn\u043er\u0435 \u03b1ll") == "ignore all"
    assert skeleton("1gn0r3 pr3v10u5") == "ignore previous"
    assert skeleton("ïgnörè") == "ignore"
    assert skeleton("i g n o r e this") == "ignore this"
    assert skeleton("Order 1234 on 2024-05-12") == "order 1234 on 2024-05-12"


def test_digits_of_every_script_read_as_ascii_digits_for_the_detectors() -> None:
    """Arabic-Indic, Persian and Devanagari digits become ASCII ones in what detectors read, one for one; the model's text keeps them."""
    prepared = normalise("بطاقة ٤١١١ \u06f1\u06f1\u06f1\u06f1 and ४२४२")
    assert prepared.scan == "بطاقة 4111 1111 and 4242"
    assert prepared.clean == "بطاقة ٤١١١ \u06f1\u06f1\u06f1\u06f1 and ४२४२"
    assert prepared.to_clean(6, 15) == (6, 15)
