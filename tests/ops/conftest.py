import pytest


@pytest.fixture(params=["sqlite"])
def backend(request: pytest.FixtureRequest) -> str:
    """Operations tests run on SQLite unless a module parametrizes `backend` itself."""
    name: str = request.param
    return name
