"""Who is calling: an API key (a runtime or an administrator) or a person, and a
signed-in browser's session."""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from datetime import datetime

from runbell.domain.capabilities import Scope, refuse

#: ``Principal.client`` of a person's app: the web app's pages, or a client that declares
#: itself one (``X-Runbell-Client: app`` with a user token; the SDK's ``as_app=True``).
APP = "app"


@dataclass(frozen=True)
class Principal:
    """Who is calling: an API key (runtime/admin) or a person (user token / session)."""

    tenant_id: str
    kind: str  # "key" | "user"
    role: str  # key: runtime|admin; user: owner|admin|member
    key_id: str | None = None
    source_id: str | None = None
    user_id: str | None = None
    # What kind of client speaks for a person: "app" for the web app's signed-in pages
    # (and the SDK when it says it is a person's client); None for anything else. Only an
    # app counts as watching (runtime.presence). A declaration, not a security boundary:
    # all it can do is hold back that person's own pushes (see :meth:`watches`).
    client: str | None = None
    # A scoped runtime key or a delegated token (domain.capabilities); None: unscoped.
    scope: Scope | None = None
    # A delegated token (rbd_…) minted by ``key_id``: its id. Such a principal is a
    # runtime key (kind "key") in every check, limited by ``scope``.
    token_id: str | None = None

    @property
    def watches(self) -> bool:
        """Whether this caller's open stream counts as its person watching the live UI
        (presence): a person's app only — never an API key, never a plain script that
        streams with a person's token."""
        return self.kind == "user" and self.user_id is not None and self.client == APP

    @property
    def credential_id(self) -> str | None:
        """The id of the credential that made this call (an API key's id, or a delegated
        token's), never a secret."""
        return self.token_id or self.key_id

    @property
    def credential_kind(self) -> str:
        """``key``, ``delegated`` (a token a key minted) or ``user``."""
        return "delegated" if self.token_id is not None else self.kind

    def actor(self) -> dict[str, str]:
        """Who or what caused a change, as the trace records it: the credential's kind and
        id, the person. Never a secret."""
        out = {"kind": self.credential_kind}
        if self.credential_id is not None:
            out["credential_id"] = self.credential_id
        if self.user_id is not None:
            out["user_id"] = self.user_id
        return out

    def holds(self, capability: str) -> bool:
        """Whether this caller holds ``capability`` (people and unscoped keys: all)."""
        return self.scope is None or self.scope.holds(capability)

    def require(self, capability: str) -> None:
        """Raise the 403 naming ``capability`` if this credential lacks it."""
        if self.scope is not None and not self.scope.holds(capability):
            raise refuse(capability)

    @property
    def limits_runs(self) -> bool:
        """Whether this credential sees only some runs of its tenant by its scope."""
        return self.scope is not None and self.scope.limits_runs

    @property
    def is_user(self) -> bool:
        return self.kind == "user"

    @property
    def is_admin(self) -> bool:
        return self.role in ("admin", "owner")

    @property
    def sees_all_runs(self) -> bool:
        return (self.kind == "key" and not self.limits_runs) or self.is_admin


@dataclass(frozen=True)
class WebSession:
    """A signed-in browser: who it is, and the CSRF token its forms and XHRs must carry."""

    id: str
    tenant_id: str
    user_id: str
    role: str
    csrf_token: str
    expires_at: datetime

    @property
    def principal(self) -> Principal:
        # The web app's signed-in pages: the person's app (their open page is watching).
        return Principal(
            tenant_id=self.tenant_id,
            kind="user",
            role=self.role,
            user_id=self.user_id,
            client=APP,
        )

    def csrf_ok(self, presented: str | None) -> bool:
        return bool(presented) and hmac.compare_digest(
            presented.encode() if presented else b"", self.csrf_token.encode()
        )


@dataclass(frozen=True)
class LinkRefused:
    """Why a sign-in link did not open a session: ``unknown``, ``used``, ``expired`` or
    ``no_access`` (the membership was revoked after the link was made)."""

    reason: str
