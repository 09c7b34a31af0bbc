"""What a runtime credential may do, and to which runs: pure decisions.

A runtime API key may be *scoped* (issue 18): limited to a set of capabilities, to run
ids matching glob patterns (``launch-*``), and/or to the runs it created itself. Every
limit given applies (a run is in scope when it matches one of the patterns *and*, for an
``own_runs`` key, was created by that key). A key without a scope (every key made before
scopes existed, and every admin key) holds every capability on every run of its tenant.

A *delegated token* (``rbd_…``) is minted by a key for a helper: bound to one run, with a
subset of the minting key's capabilities, and an expiry.

People (user tokens, web sessions) are not scoped here: what they may do is decided by
their role and the run's authority.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from runbell.domain.errors import Forbidden, ValidationFailed

REPORT = "runs.report"  # signals, progress, creating and updating a run
DECLARE = "operations.declare"  # declaring operations (and claiming the run for a worker)
SETTLE = "operations.settle"  # moving operations
CANCEL = "runs.cancel"
ASK = "input_requests.create"  # opening (and cancelling) input requests
READ = "runs.read"  # the run, listings, the ledger, the feed
# Answering input requests as a machine (issue 19 item 4). Never implied: a key without a
# scope holds every other capability, but answers only when its scope names this one.
ANSWER = "input_requests.answer"

CAPABILITIES: tuple[str, ...] = (REPORT, DECLARE, SETTLE, CANCEL, ASK, READ, ANSWER)

#: What a run id may contain (api.schemas.RUN_ID_PATTERN), plus the glob's ``*`` and ``?``.
_PATTERN = re.compile(r"^[A-Za-z0-9._:@~*?-]{1,200}$")
MAX_PATTERNS = 20

#: Delegated tokens live at most this long (seconds), and at least a minute.
DELEGATION_MAX_S = 7 * 24 * 3600
DELEGATION_MIN_S = 60


@dataclass(frozen=True, slots=True)
class Scope:
    """The limits of a scoped credential. ``capabilities`` None: every capability;
    ``run_patterns`` None: any run id; ``own_runs``: only runs created by ``creator_id``;
    ``bound_run``: a delegated token's one run."""

    capabilities: frozenset[str] | None = None
    run_patterns: tuple[str, ...] | None = None
    own_runs: bool = False
    creator_id: str | None = None
    bound_run: str | None = None

    @property
    def limits_runs(self) -> bool:
        return self.run_patterns is not None or self.own_runs or self.bound_run is not None

    def holds(self, capability: str) -> bool:
        return self.capabilities is None or capability in self.capabilities

    def names(self, capability: str) -> bool:
        """Whether the scope names ``capability`` explicitly (an unscoped list: no)."""
        return self.capabilities is not None and capability in self.capabilities

    def id_in_scope(self, run_id: str) -> bool:
        """Whether ``run_id`` passes the limits that need no run row (patterns, binding)."""
        if self.bound_run is not None and run_id != self.bound_run:
            return False
        if self.run_patterns is not None:
            return any(glob_match(p, run_id) for p in self.run_patterns)
        return True

    def run_in_scope(self, run_id: str, created_by: str | None) -> bool:
        """Whether an existing run (created by credential ``created_by``) is in scope."""
        if not self.id_in_scope(run_id):
            return False
        return not self.own_runs or (created_by is not None and created_by == self.creator_id)


def glob_match(pattern: str, run_id: str) -> bool:
    """``*`` any run of characters, ``?`` one character; case-sensitive."""
    return _compiled(pattern).fullmatch(run_id) is not None


def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(
        "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    )


def parse_capabilities(values: Iterable[str], field: str = "capabilities") -> frozenset[str]:
    """The capabilities named (each one known), or 422 naming the unknown one."""
    out = set()
    for value in values:
        name = str(value).strip()
        if name not in CAPABILITIES:
            raise ValidationFailed(
                f"unknown capability {name!r}; known: {', '.join(CAPABILITIES)}", field=field
            )
        out.add(name)
    return frozenset(out)


def parse_patterns(values: Iterable[str], field: str = "run_patterns") -> tuple[str, ...]:
    """Run-id glob patterns (``*`` and ``?`` over the run id characters), or 422."""
    out: list[str] = []
    for value in values:
        pattern = str(value).strip()
        if not _PATTERN.match(pattern):
            raise ValidationFailed(
                f"{pattern!r} is not a run id pattern: letters, digits, . _ : @ ~ - "
                "with * (any characters) and ? (one character)",
                field=field,
            )
        if pattern not in out:
            out.append(pattern)
    if not out:
        raise ValidationFailed("give at least one run id pattern", field=field)
    if len(out) > MAX_PATTERNS:
        raise ValidationFailed(f"at most {MAX_PATTERNS} run id patterns", field=field)
    return tuple(out)


def ordered(capabilities: Iterable[str]) -> list[str]:
    """Capabilities in their documented order (for views and storage)."""
    held = set(capabilities)
    return [c for c in CAPABILITIES if c in held]


def refuse(capability: str) -> Forbidden:
    """The 403 for a credential that lacks ``capability``: the detail names it, and so
    does ``missing_capability``."""
    return Forbidden(
        f"this credential lacks the capability {capability!r}",
        missing_capability=capability,
    )


def wider_than(parent: Scope | None, wanted: frozenset[str]) -> str | None:
    """The first capability of ``wanted`` that ``parent`` does not hold (None: a subset)."""
    for capability in ordered(wanted):
        if capability == ANSWER and not (parent is not None and parent.names(ANSWER)):
            return capability  # never implied, so never passed on unless named
        if parent is not None and not parent.holds(capability):
            return capability
    return None


def may_answer(scope: Scope | None) -> bool:
    """Whether a credential answers input requests: only when its scope names
    ``input_requests.answer`` (an unscoped key holds every other capability, not this)."""
    return scope is not None and scope.names(ANSWER)


def delegation_lifetime(seconds: int) -> int:
    """A delegated token's lifetime, checked: required, 1 minute to 7 days."""
    if not DELEGATION_MIN_S <= seconds <= DELEGATION_MAX_S:
        raise ValidationFailed(
            f"expires_in is {DELEGATION_MIN_S} to {DELEGATION_MAX_S} seconds (7 days)",
            field="expires_in",
        )
    return seconds
