"""Which errors of a command say the database is out of reach (error `unavailable`, SPEC §15) rather than that the command failed (`internal`)."""

from __future__ import annotations

import sqlalchemy.exc as sa_exc

from vernis.ws.connection import out_of_reach


def test_a_cut_or_refused_connection_is_out_of_reach_whatever_its_error_class() -> None:
    """A refused connection (OSError), the driver's operational and interface errors, and a plain DBAPIError whose connection was invalidated (asyncpg's "connection was closed in the middle of operation") say unavailable; a DBAPIError on a live connection, an integrity error and any other exception do not."""
    cut = Exception("connection was closed in the middle of operation")
    assert out_of_reach(ConnectionRefusedError(111, "Connect call failed"))
    assert out_of_reach(sa_exc.OperationalError("SELECT 1", None, cut))
    assert out_of_reach(sa_exc.InterfaceError("SELECT 1", None, cut))
    assert out_of_reach(sa_exc.DBAPIError("SELECT 1", None, cut, connection_invalidated=True))
    assert not out_of_reach(sa_exc.DBAPIError("SELECT 1", None, cut))
    assert not out_of_reach(sa_exc.IntegrityError("INSERT", None, Exception("duplicate key")))
    assert not out_of_reach(ValueError("bad"))
