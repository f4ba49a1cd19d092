import pytest

pytest_plugins = [
    "tests.fixtures.db",
    "tests.fixtures.figures",
    "tests.fixtures.redis",
    "tests.fixtures.scripted",
    "tests.fixtures.server",
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests marked `slow` first, in their order: pytest-xdist (`--dist load`) hands the first
    tests out one per worker in turn, so each long test then runs beside short ones from the start
    rather than alone at the end while the other workers wait."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
