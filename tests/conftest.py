pytest_plugins = [
    "tests.fixtures.db",
    "tests.fixtures.redis",
    "tests.fixtures.scripted",
    "tests.fixtures.server",
]
