pytest_plugins = ["tests.fixtures.db", "tests.fixtures.scripted", "tests.fixtures.server"]
