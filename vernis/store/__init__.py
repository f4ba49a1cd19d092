"""The database layer: the core's tables (`models`), the engine, and the migrations that make them.
A toolkit's tables live in the toolkit, with their own Alembic branch."""
