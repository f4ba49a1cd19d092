import pytest


@pytest.fixture(params=["sqlite"])
def backend(request: pytest.FixtureRequest) -> str:
    """The traces' tests run on SQLite (what is traced does not depend on the database)."""
    name: str = request.param
    return name
