"""UI block rules (SPEC §16) in-process: which links a block may carry, and toolkit kinds checked when
the catalog is built."""

from __future__ import annotations

import pytest

from vernis.tools import Toolkit, ToolkitError, block, entity, links
from vernis.tools.blocks import BlockRules
from vernis.tools.catalog import Catalog

RULES = BlockRules(link_origins=["https://partner.example"])


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("/contacts/7", True),
        ("tickets?open=1", True),
        ("#top", True),
        ("https://partner.example/a", True),
        ("https://PARTNER.example/a", True),
        ("https://partner.example:8443/a", False),
        ("http://partner.example/a", False),
        ("https://evil.example/a", False),
        ("https://partner.example.evil.example/", False),
        ("//evil.example/a", False),
        ("javascript:alert(1)", False),
        (" JavaScript:alert(1)", False),
        ("data:text/html,<script>", False),
        ("/\\evil.example", False),
        ("/ok\nno", False),
        ("", False),
        (7, False),
    ],
)
def test_a_link_is_a_relative_path_or_on_a_listed_origin(url: object, allowed: bool) -> None:
    """Relative paths pass; absolute links only on an origin of [embed] link_origins; scripts, other schemes, protocol-relative and control characters never."""
    assert RULES.link_allowed(url) is allowed


def test_a_bad_link_leaves_the_block_without_that_link() -> None:
    """An entity's bad url is removed (the card stays); a links block keeps only its good links, and goes when none is left."""
    kept = RULES.clean(
        "t",
        [
            entity("contact", "7", "Jane", [("Phone", "+1 555")], url="javascript:alert(1)"),
            links([("Open", "/contacts/7"), ("Bad", "https://evil.example")]),
            links([("Bad", "vbscript:x")]),
        ],
    )
    assert kept == [
        {
            "kind": "entity",
            "data": {
                "entity_type": "contact",
                "entity_id": "7",
                "title": "Jane",
                "fields": [{"label": "Phone", "value": "+1 555"}],
            },
        },
        {"kind": "links", "data": {"links": [{"label": "Open", "url": "/contacts/7"}]}},
    ]


def test_blocks_that_are_not_a_list_or_not_json_are_dropped() -> None:
    """Blocks given as a string, a block without a kind, and data that is not JSON leave nothing."""
    assert RULES.clean("t", "table") == []
    assert (
        RULES.clean(
            "t",
            [
                {"data": {}},
                block("table", {"columns": [{"key": "a", "label": "A"}], "rows": [{"a": {1, 2}}]}),
            ],
        )
        == []
    )


def test_a_toolkit_kind_must_carry_its_name_and_a_valid_schema() -> None:
    """A kind not named toolkit.kind stops the toolkit; an invalid schema stops the catalog, naming the kind."""
    with pytest.raises(ToolkitError, match=r"must be named shop\.<kind>"):
        Toolkit("shop", ui_kinds={"receipt": {"type": "object"}})
    broken: Toolkit[None] = Toolkit("shop", ui_kinds={"shop.receipt": {"type": "no-such-type"}})
    with pytest.raises(ToolkitError, match=r"shop\.receipt"):
        Catalog([broken])
