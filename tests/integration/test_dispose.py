"""Closing the database while a background thread still holds a connection.

A feed read in flight or a presence heartbeat may hold a pooled connection when the
process (or a test) disposes the engine. Disposed first, the engine's pool would be
replaced and that connection, returned later, never closed: the driver warns when it is
collected (a ``ResourceWarning`` the suite turns into a failure of whichever test is
running then). :meth:`Database.dispose` waits a moment for it instead.
"""

from __future__ import annotations

import gc
import threading
import warnings
from datetime import UTC, datetime

from runbell.store.db import Database


def test_a_connection_returned_after_dispose_began_is_closed(db_url: str) -> None:
    db = Database(db_url, clock=lambda: datetime.now(UTC))
    holding, release = threading.Event(), threading.Event()

    def background_read() -> None:
        with db.read() as conn:
            conn.exec_driver_sql("SELECT 1")
            holding.set()
            release.wait(5)

    thread = threading.Thread(target=background_read)
    thread.start()
    assert holding.wait(5)
    assert db.engine.pool.checkedout() == 1
    # The read ends while dispose waits for it.
    threading.Timer(0.05, release.set).start()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        db.dispose()
        thread.join(5)
        gc.collect()
    leaked = [w for w in caught if issubclass(w.category, ResourceWarning)]
    assert not leaked, [str(w.message) for w in leaked]
    assert db.engine.pool.checkedout() == 0
