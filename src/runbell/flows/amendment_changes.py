"""What an amendment may change, who may propose one, and applying an approved one's
changes to the operations ledger (issue 18 item 4). :mod:`runbell.flows.amendments`
records proposals and decisions; this module holds the rules about ``changes``.

``changes`` may set the run's ``objective`` and ``title`` (as before), and exclude
operations of the run's ledger: ``{"exclude_operations": ["t7", "task:legal-review"]}``,
each an operation id or a target (``type:id``) of the run's ledger. When proposed, each
is resolved to the operation ids it names, and each must still be ``planned`` (work
not yet sent can be left out; work sent may already have landed, and excluding it would
claim something nobody knows). The amendment stores the ids as its change and their
states as its ``base``; approving it needs them still ``planned`` (else 409, as for a
field that changed meanwhile), and moves each ``planned → not_started`` with the
amendment as evidence (``{"excluded_by_amendment": id, "approved_by": user}``) — the
ledger's own state machine, no new state: an excluded operation is work that will not
begin, said so. Including (adding) operations is not an amendment: a run's operations
are declared by the runtime that will carry them out.

Who may propose: the run's owner, tenant owners and admins, and members whose access to
the run lets them amend (``authority.users``, ``authority.amenders``, amender grants of
its subject). A member who may see the run but not amend gets 403 saying so; one who may
not see it, 404.
"""

from __future__ import annotations

from typing import Any, TypedDict, cast

from runbell.domain.errors import Forbidden, ValidationFailed
from runbell.domain.jobs import DoneWhen, check_done_when
from runbell.domain.operations import OpState
from runbell.domain.people import NOT_AN_AMENDER
from runbell.domain.principal import Principal
from runbell.domain.records import Run, RunChanges
from runbell.flows import operations
from runbell.store import access
from runbell.store import operations as ledger
from runbell.store.db import Tx

#: The run fields an amendment may change, with their limits (as ``PUT /v1/runs``).
FIELDS = {"objective": 10_000, "title": 500}
EXCLUDE = "exclude_operations"
DONE_WHEN = "done_when"
MAX_EXCLUDED = 200


class Changes(TypedDict, total=False):
    """An amendment's ``changes``: run fields to set, operations to exclude."""

    objective: str
    title: str
    done_when: DoneWhen  # what counts as done (issue 18 item 5), checked as PUT checks it
    exclude_operations: list[str]  # as proposed: ids or targets; as stored: ids


class Base(TypedDict, total=False):
    """What the changes were proposed against: the fields' values, the operations'
    states."""

    objective: str | None
    title: str | None
    done_when: DoneWhen | None
    operations: dict[str, str]


def stored(changes: object) -> Changes:
    """An amendment row's ``changes`` (written by :func:`against`)."""
    return cast(Changes, changes or {})


def stored_base(base: object) -> Base:
    """An amendment row's ``base`` (written by :func:`against`)."""
    return cast(Base, base or {})


def check_may_amend(conn: Any, who: Principal, run: Run) -> None:
    """403 for a member who sees the run but may not propose amendments to it."""
    if who.user_id == run.owner_user_id or who.is_admin:
        return
    granted = access.granted(conn, who, run.run_id)
    if granted is None or not granted.may_amend:
        raise Forbidden(NOT_AN_AMENDER)


def parse(changes: object) -> Changes:
    """The ``changes`` of a proposal, checked for shape (not yet against the run)."""
    changes = changes or {}
    if not isinstance(changes, dict):
        raise ValidationFailed("changes must be an object", field="changes")
    out: dict[str, str | list[str] | DoneWhen] = {}
    for name, value in changes.items():
        if name == EXCLUDE:
            out[name] = _refs(value)
            continue
        if name == DONE_WHEN:
            done_when = check_done_when(value, f"changes.{DONE_WHEN}")
            if done_when is None:
                raise ValidationFailed(
                    "changes.done_when is {text, operations?}", field=f"changes.{DONE_WHEN}"
                )
            out[name] = done_when
            continue
        if name not in FIELDS:
            raise ValidationFailed(
                f"changes may name {', '.join([*FIELDS, DONE_WHEN, EXCLUDE])}, not {name!r}",
                field=f"changes.{name}",
            )
        if not isinstance(value, str) or not value.strip() or len(value) > FIELDS[name]:
            raise ValidationFailed(
                f"changes.{name} is 1 to {FIELDS[name]} characters", field=f"changes.{name}"
            )
        out[name] = value
    return cast(Changes, out)


def _refs(value: object) -> list[str]:
    if (
        not isinstance(value, list)
        or not value
        or len(value) > MAX_EXCLUDED
        or not all(isinstance(v, str) and v.strip() for v in value)
    ):
        raise ValidationFailed(
            f"changes.{EXCLUDE} is a list of 1 to {MAX_EXCLUDED} operation ids or targets "
            "(type:id) of the run's ledger",
            field=f"changes.{EXCLUDE}",
        )
    return [v.strip() for v in value]


def against(conn: Any, run: Run, changes: Changes) -> tuple[Changes, Base]:
    """``(changes, base)`` as stored: the exclusion resolved to operation ids, and the
    values (and operation states) the change was proposed against. 422 for a change that
    changes nothing, an unknown operation or target, or one no longer ``planned``."""
    resolved: Changes = {**changes}
    base: Base = {}
    if "objective" in changes:
        base["objective"] = run.objective
    if "title" in changes:
        base["title"] = run.title
    if DONE_WHEN in changes:
        base["done_when"] = run.done_when
    if "exclude_operations" in changes:
        ids = _resolve(conn, run, changes["exclude_operations"])
        resolved["exclude_operations"] = ids
        base["operations"] = dict.fromkeys(ids, OpState.PLANNED.value)
    fields = run_fields(resolved)
    if fields and EXCLUDE not in resolved and all(getattr(run, n) == v for n, v in fields.items()):
        raise ValidationFailed("changes match the run as it is; nothing to amend", field="changes")
    return resolved, base


def _resolve(conn: Any, run: Run, refs: list[str]) -> list[str]:
    ops = ledger.for_run(conn, run.tenant_id, run.run_id)
    by_id = {op.operation_id: op for op in ops}
    out: list[str] = []
    for ref in refs:
        named = (
            [by_id[ref]]
            if ref in by_id
            else [op for op in ops if f"{op.target_type}:{op.target_id}" == ref]
        )
        if not named:
            raise ValidationFailed(
                f"changes.{EXCLUDE}: {ref!r} is neither an operation id nor a target "
                f"(type:id) of run {run.run_id!r}",
                field=f"changes.{EXCLUDE}",
            )
        for op in named:
            if op.state != OpState.PLANNED:
                raise ValidationFailed(
                    f"changes.{EXCLUDE}: operation {op.operation_id!r} is {op.state}; only "
                    "planned operations (not yet sent) can be excluded",
                    field=f"changes.{EXCLUDE}",
                )
            if op.operation_id not in out:
                out.append(op.operation_id)
    return out


def moved_since(conn: Any, run: Run, base: Base) -> list[str]:
    """What changed since the amendment was proposed: the run fields no longer at their
    base value, and ``operation <id>`` for each excluded operation no longer planned."""
    was: dict[str, object] = {n: v for n, v in base.items() if n != "operations"}
    moved = sorted(n for n in was if getattr(run, n) != was[n])
    states = base.get("operations") or {}
    if states:
        now = {op.operation_id: op.state for op in ledger.for_run(conn, run.tenant_id, run.run_id)}
        moved += [f"operation {i}" for i in sorted(states) if now.get(i) != states[i]]
    return moved


def run_fields(changes: Changes) -> RunChanges:
    """The run columns an approved amendment sets (its exclusion is not one)."""
    out: RunChanges = {}
    if "objective" in changes:
        out["objective"] = changes["objective"]
    if "title" in changes:
        out["title"] = changes["title"]
    if DONE_WHEN in changes:
        out["done_when"] = changes["done_when"]
    return out


def exclude(tx: Tx, run: Run, changes: Changes, amendment_id: str, by: str) -> int:
    """An approved exclusion: its operations ``planned → not_started``, the amendment as
    their evidence. Returns how many moved."""
    ids = changes.get("exclude_operations") or []
    if not ids:
        return 0
    because = {"excluded_by_amendment": amendment_id, "approved_by": by}
    return operations.mark_not_started(tx, run, only=set(ids), because=because)
