"""Liveness and readiness."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from fastapi import APIRouter

from runbell.api.deps import Core
from runbell.domain.errors import RunbellError
from runbell.store.migrate import current_revision

router = APIRouter(tags=["operations"])


class NotReady(RunbellError):
    status = 503
    title = "Not ready"
    type_slug = "not-ready"


@router.get("/healthz")
def healthz() -> dict[str, Any]:
    return {"status": "ok"}


@router.get("/readyz")
def readyz(core: Core) -> dict[str, Any]:
    try:
        with core.db.read() as conn:
            conn.execute(sa.text("SELECT 1"))
        revision = current_revision(core.db.engine)
    except Exception as exc:
        raise NotReady(f"database unreachable: {type(exc).__name__}") from exc
    if revision is None:
        raise NotReady("database is not migrated; run `runbell migrate`")
    return {"status": "ready", "database": core.db.dialect, "schema": revision}
