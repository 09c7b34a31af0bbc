"""Failed authentication: counted across processes, throttled past a burst, logged once.

The faces call :func:`failed` when a credential did not check out (an unknown, revoked or
expired bearer token on the API or ``/mcp``, a sign-in link that names nothing, a
provider webhook whose signature matches no secret); it answers ``None`` (answer the
failure as usual: 401, 404) or :class:`~runbell.domain.errors.TooManyAttempts` to raise
(429 with ``Retry-After``). The rules are :mod:`runbell.domain.throttle`'s; the counts live
in the database (:mod:`runbell.store.auth_failures`), so every API process sharing it
keeps one limit.

A request whose credential checks out never comes here: the success path costs nothing.
A key this process already saw over its burst answers 429 from memory until its window
ends, without writing, so a flood of guesses costs the database one upsert per key and
process and window beyond the burst, not one per guess.

Every failure counts in ``runbell_auth_failures_total{kind, answer}``; the first failure
over a key's burst in each window logs one warning, ``auth.throttled``, naming the key
(the address, or the credential's short prefix: never the credential).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal

import structlog

from runbell import metrics
from runbell.domain.errors import TooManyAttempts
from runbell.domain.throttle import address_key, credential_prefix, verdict
from runbell.flows.context import Core
from runbell.store import auth_failures as store

log = structlog.get_logger(__name__)

Kind = Literal["bearer", "sign_in_link", "webhook_signature"]
_MEMO = "auth_failures.over"  # core.memo[_MEMO][key]: when that key's window ends
_MEMO_MAX = 4096  # keys remembered at most; past it, the ended ones are forgotten


def failed(
    core: Core,
    kind: Kind,
    address: str | None,
    *,
    credential: str | None = None,
    source_id: str | None = None,
) -> TooManyAttempts | None:
    """Count a failed attempt from ``address`` with ``credential`` (a bearer token or a
    sign-in link's token) or against ``source_id`` (a webhook source)."""
    where = address_key(address)
    keys = {f"{kind}:addr:{where}": ("address", where)}
    if credential is not None:
        prefix = credential_prefix(credential)
        keys[f"{kind}:cred:{prefix}"] = ("credential", prefix)
    if source_id is not None:
        keys[f"{kind}:source:{source_id[:100]}"] = ("source", source_id[:100])
    now = core.db.clock()
    known = _known_over(core, keys, now)
    if known is not None:
        metrics.AUTH_FAILURES.labels(kind=kind, answer="throttled").inc()
        return known
    settings = core.settings
    with core.db.transaction(now=now) as tx:
        counts = store.record(tx.conn, list(keys), now, settings.auth_failure_window_s)
    refusal: TooManyAttempts | None = None
    for key, (failures, started) in sorted(counts.items()):
        v = verdict(
            failures,
            window_start=started,
            now=now,
            burst=settings.auth_failure_burst,
            window_s=settings.auth_failure_window_s,
        )
        if not v.throttled:
            continue
        _remember(core, key, now + timedelta(seconds=v.retry_after_s), now)
        if v.first_over:
            by, value = keys[key]
            log.warning(
                "auth.throttled",
                kind=kind,
                by=by,
                **{by: value},
                failures=failures,
                window_s=settings.auth_failure_window_s,
                retry_after_s=v.retry_after_s,
            )
        if refusal is None or v.retry_after_s > refusal.extra["retry_after"]:
            refusal = _too_many(v.retry_after_s)
    metrics.AUTH_FAILURES.labels(kind=kind, answer="throttled" if refusal else "refused").inc()
    return refusal


def _known_over(
    core: Core, keys: dict[str, tuple[str, str]], now: datetime
) -> TooManyAttempts | None:
    """A key this process saw over its burst, while its window lasts."""
    over: dict[str, datetime] = core.memo.get(_MEMO, {})
    longest: datetime | None = None
    for key in keys:
        until = over.get(key)
        if until is None:
            continue
        if until <= now:
            over.pop(key, None)
        elif longest is None or until > longest:
            longest = until
    if longest is None:
        return None
    return _too_many(max(1, int((longest - now).total_seconds() + 0.999)))


def _remember(core: Core, key: str, until: datetime, now: datetime) -> None:
    over: dict[str, datetime] = core.memo.setdefault(_MEMO, {})
    if len(over) >= _MEMO_MAX:
        for old in [k for k, v in over.items() if v <= now]:
            del over[old]
    if len(over) < _MEMO_MAX:
        over[key] = until


def _too_many(retry_after_s: int) -> TooManyAttempts:
    return TooManyAttempts(
        f"too many failed attempts from this address or with this credential; try again in "
        f"{retry_after_s} s",
        retry_after=retry_after_s,
    )


def prune(core: Core, now: datetime) -> int:
    """Forget counts whose windows ended (the retention sweep calls it)."""
    with core.db.transaction(now=now) as tx:
        return store.prune(tx.conn, now - timedelta(seconds=core.settings.auth_failure_window_s))
