"""Scoped API keys and delegated tokens (issue 18 item 1; docs/api.md "Scoped keys and
delegated tokens")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, cast

from fastapi import APIRouter, Path, Response

from runbell.api.deps import Admin, CoreDep, Runtime, Who
from runbell.api.openapi import problems, rule, rules
from runbell.api.schemas import RUN_ID_PATTERN, DelegationIn, KeyIn
from runbell.flows import accounts, delegations
from runbell.flows.inputs import DelegationBody, KeyBody

router = APIRouter(tags=["credentials"])
RunId = Annotated[
    str, Path(min_length=1, pattern=RUN_ID_PATTERN, description="client-chosen run id")
]
KeyId = Annotated[str, Path(max_length=64, description="the key's id (key_…), not its secret")]
DelegationId = Annotated[str, Path(max_length=64, description="the token's id (dlg_…)")]


@router.post(
    "/v1/keys",
    status_code=201,
    responses=problems(401, 403, 413, 422, 503),
    openapi_extra=rules(
        rule(
            "role",
            "an admin key is never scoped: capabilities, run_patterns, own_runs "
            "are for a runtime key",
        ),
    ),
)
def create_key(body: KeyIn, who: Admin, core: CoreDep) -> Mapping[str, Any]:
    """Create an API key of your tenant (admins). A runtime key may be scoped:
    ``capabilities`` (omitted: all), ``run_patterns`` (omitted: any run), ``own_runs``.
    The secret (``key``) is shown once."""
    fields = cast(KeyBody, body.model_dump(exclude_unset=True))  # KeyIn's fields
    return accounts.create_key_for(core, who, fields)


@router.delete(
    "/v1/keys/{key_id}", status_code=204, responses=problems(401, 403, 404, 413, 422, 503)
)
def revoke_key(key_id: KeyId, who: Admin, core: CoreDep) -> Response:
    """Revoke an API key at once (admins); the delegated tokens it minted stop with it."""
    accounts.revoke_key_for(core, who, key_id)
    return Response(status_code=204)


@router.post(
    "/v1/runs/{run_id}/delegations",
    status_code=201,
    responses=problems(401, 403, 404, 413, 422, 503),
    openapi_extra=rules(rule("name", "not blank once control characters are removed")),
)
def mint(run_id: RunId, body: DelegationIn, who: Runtime, core: CoreDep) -> Mapping[str, Any]:
    """Mint a delegated token (``rbd_…``, shown once) for a helper: bound to this run, a
    subset of your key's capabilities (a wider one is a 403 naming it), an expiry."""
    fields = cast(DelegationBody, body.model_dump())  # DelegationIn's fields
    return delegations.mint(core, who, run_id, fields)


@router.get("/v1/runs/{run_id}/delegations", responses=problems(401, 403, 404, 422, 503))
def list_delegations(run_id: RunId, who: Who, core: CoreDep) -> Mapping[str, Any]:
    """The run's delegated tokens (never a secret): for its keys and admins."""
    return delegations.list_for_run(core, who, run_id)


@router.delete("/v1/delegations/{delegation_id}", responses=problems(401, 403, 404, 413, 422, 503))
def revoke_delegation(delegation_id: DelegationId, who: Who, core: CoreDep) -> Mapping[str, Any]:
    """Revoke a delegated token at once (the key that minted it, or an admin)."""
    return delegations.revoke(core, who, delegation_id)
