"""Standard Webhooks signatures: verify inbound provider requests, sign outbound ones.

Provider webhook sources (DESIGN §3) carry one or more ``whsec_`` secrets; a request
is accepted only when its ``webhook-signature`` matches one of them. Several secrets
are accepted at once so a secret can be rotated without dropping events: during the
overlap the provider may still sign with the old secret while we already hold the new
one.

The HMAC itself is computed by the ``standardwebhooks`` library (``Webhook.sign``) so
the byte layout (``{id}.{timestamp}.{body}``) is exactly the reference one. We do not
call ``Webhook.verify``: it checks the timestamp against the real wall clock, which
makes the tolerance untestable with a fixed clock, its error messages do not say which
check failed, and it crashes with ``ValueError`` on a signature entry without a comma.
Instead we check the headers and the tolerance here against an injectable ``now`` and
compare signatures in constant time with :func:`hmac.compare_digest`.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import re
import secrets as _secrets
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from standardwebhooks.webhooks import EmptyWebhookSecretError, Webhook

from runbell.domain.errors import Unauthorized, ValidationFailed

__all__ = [
    "HEADER_ID",
    "HEADER_SIGNATURE",
    "HEADER_TIMESTAMP",
    "SECRET_PREFIX",
    "check_secret",
    "new_secret",
    "sign_headers",
    "verify_signed",
]

HEADER_ID = "webhook-id"
HEADER_TIMESTAMP = "webhook-timestamp"
HEADER_SIGNATURE = "webhook-signature"
SECRET_PREFIX = "whsec_"  # noqa: S105 - a format prefix, not a secret

# Standard Webhooks timestamps are whole seconds since the epoch. We accept only
# that form: the signed string contains the header text verbatim, and a permissive
# float parse (as the library does) would accept "nan", "1e9" or "17.5", which no
# conforming sender produces. Twelve digits is far beyond any real timestamp.
_TIMESTAMP_RE = re.compile(r"[0-9]{1,12}")


def verify_signed(
    body: bytes,
    headers: Mapping[str, str],
    secrets: Sequence[str],
    *,
    now: datetime | None = None,
    tolerance_s: int = 300,
) -> None:
    """Accept the request if ANY of ``secrets`` signed it, else raise :class:`Unauthorized`.

    ``headers`` may use any letter case (HTTP header names are case-insensitive and
    proxies rewrite them). ``now`` is injectable so the replay-tolerance check can be
    tested with a fixed clock; it must be timezone-aware. The timestamp is checked
    before any signature so a replayed old request is rejected with a clear reason
    even when its signature is genuine.

    Details are precise (which header is missing, tolerance exceeded, no match) because
    integrators debug their setup from them; none of them reveals a secret or the
    expected signature.
    """
    lowered = {str(k).lower(): v for k, v in headers.items()}
    msg_id = lowered.get(HEADER_ID, "")
    timestamp_text = lowered.get(HEADER_TIMESTAMP, "")
    signature_header = lowered.get(HEADER_SIGNATURE, "")

    missing = [
        name
        for name, value in (
            (HEADER_ID, msg_id),
            (HEADER_TIMESTAMP, timestamp_text),
            (HEADER_SIGNATURE, signature_header),
        )
        if not value
    ]
    if missing:
        noun = "header" if len(missing) == 1 else "headers"
        raise Unauthorized(f"missing {', '.join(missing)} {noun}")

    timestamp_text = timestamp_text.strip()
    if not _TIMESTAMP_RE.fullmatch(timestamp_text):
        raise Unauthorized("invalid webhook-timestamp header: expected integer seconds")
    sent_at = datetime.fromtimestamp(int(timestamp_text), tz=UTC)

    current = _aware_utc(now, "now") if now is not None else datetime.now(tz=UTC)
    if abs((current - sent_at).total_seconds()) > tolerance_s:
        raise Unauthorized(f"timestamp outside the {_describe_tolerance(tolerance_s)} tolerance")

    if not secrets:
        raise Unauthorized("no signing secret is configured for this source")

    try:
        payload = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        # The library signs text; a body that is not UTF-8 cannot have been signed by
        # a conforming sender (and is not JSON either).
        raise Unauthorized("body is not valid UTF-8, so no signature can match") from exc

    offered = _offered_v1_signatures(signature_header)
    matched = False
    for secret in secrets:
        expected = _signature_bytes(_webhook(secret).sign(msg_id, sent_at, payload))
        # Compare against every offered entry without stopping early, so the time
        # taken does not reveal which entry or which secret matched.
        for candidate in offered:
            if hmac.compare_digest(expected, candidate):
                matched = True
    if not matched:
        raise Unauthorized("no signature matched")


def sign_headers(body: bytes, secret: str, msg_id: str, at: datetime) -> dict[str, str]:
    """Return the three Standard Webhooks headers for ``body`` signed with ``secret`` at ``at``.

    Used by tests to forge valid provider requests and by outbound webhooks. ``at``
    must be timezone-aware: the library's ``sign`` stamps the datetime as UTC without
    converting it, so a naive local time would silently produce a wrong timestamp.
    """
    stamped = _aware_utc(at, "at").replace(microsecond=0)
    signature = _webhook(secret).sign(msg_id, stamped, body.decode("utf-8"))
    return {
        HEADER_ID: msg_id,
        HEADER_TIMESTAMP: str(int(stamped.timestamp())),
        HEADER_SIGNATURE: signature,
    }


def new_secret() -> str:
    """Return a fresh ``whsec_`` secret: 24 random bytes (192 bits) in standard base64."""
    return SECRET_PREFIX + base64.b64encode(_secrets.token_bytes(24)).decode("ascii")


#: What a provider-issued secret may decode to. The specification asks for 24 to 64 bytes
#: (and :func:`new_secret` makes 24); a provider's own secret is taken as it issued it, so
#: the bounds are wider, refusing only what cannot be a real HMAC key.
_PROVIDED_MIN_BYTES = 16
_PROVIDED_MAX_BYTES = 128


def check_secret(secret: str) -> str:
    """A provider-issued ``whsec_`` secret (e.g. the one OpenAI shows when a webhook
    endpoint is created), checked: raises :class:`ValidationFailed` naming
    ``signing_secret``, never echoing the value."""
    field = "signing_secret"
    if not isinstance(secret, str) or not secret.startswith(SECRET_PREFIX):
        raise ValidationFailed(f"signing_secret must start with {SECRET_PREFIX}", field=field)
    try:
        raw = base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValidationFailed(
            "signing_secret must be whsec_ followed by standard base64", field=field
        ) from exc
    if not _PROVIDED_MIN_BYTES <= len(raw) <= _PROVIDED_MAX_BYTES:
        raise ValidationFailed(
            f"signing_secret must decode to {_PROVIDED_MIN_BYTES} to {_PROVIDED_MAX_BYTES} bytes",
            field=field,
        )
    return secret


def _offered_v1_signatures(header: str) -> list[bytes]:
    """Decode every ``v1,<base64>`` entry of a space-separated signature header.

    Entries of other versions (e.g. ``v1a`` asymmetric signatures) and malformed
    entries are skipped rather than fatal: one bad entry must not hide a good one.
    """
    offered: list[bytes] = []
    for entry in header.split():
        version, sep, encoded = entry.partition(",")
        if not sep or version != "v1":
            continue
        try:
            offered.append(base64.b64decode(encoded, validate=True))
        except (binascii.Error, ValueError):
            continue
    return offered


def _webhook(secret: str) -> Webhook:
    """The library signer for ``secret``; a malformed secret is a configuration bug.

    It raises ``ValueError`` (a server error), not ``Unauthorized``: the sender did
    nothing wrong, and a 401 would send them debugging the wrong side. The message
    never contains the secret.
    """
    try:
        return Webhook(secret)
    except (binascii.Error, EmptyWebhookSecretError, TypeError, RuntimeError) as exc:
        raise ValueError("a configured webhook secret is empty or not valid base64") from exc


def _signature_bytes(versioned: str) -> bytes:
    """Raw HMAC bytes from the library's ``v1,<base64>`` output."""
    return base64.b64decode(versioned.partition(",")[2])


def _aware_utc(value: datetime, name: str) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must be timezone-aware")
    return value.astimezone(UTC)


def _describe_tolerance(tolerance_s: int) -> str:
    if tolerance_s % 60 == 0:
        return f"{tolerance_s // 60} minute"
    return f"{tolerance_s} second"
