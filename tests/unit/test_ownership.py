"""The completion-owner rule and what a claim does to ownership (domain.ownership), and
which operation states block new work (domain.operations) — pure."""

from __future__ import annotations

import pytest

from runbell.domain.operations import BLOCKS_NEW_WORK, FINAL, MAY_HAVE_LANDED
from runbell.domain.ownership import Caller, Owner, change_kind, owner_refusal

OWNER = Owner("key_a", "worker-a")


@pytest.mark.parametrize(
    ("caller", "refused"),
    [
        (Caller("key_a", None, False), False),  # the owning credential, no worker named
        (Caller("key_a", "worker-a", False), False),  # the owner itself
        (Caller("key_a", "worker-b", False), True),  # another worker behind the same key
        (Caller("key_b", None, False), True),  # another credential (a helper)
        (Caller("key_b", "worker-a", False), True),  # naming the owner's worker is not enough
        (Caller(None, None, False), True),  # a person who is not an admin
        (Caller("key_admin", None, True), False),  # an admin acts as the owner
        (Caller(None, None, True), False),
    ],
)
def test_only_the_owner_or_an_admin_may_decide(caller: Caller, refused: bool) -> None:
    why = owner_refusal(OWNER, caller, "report the run completed")
    assert (why is not None) == refused
    if why is not None:
        assert why.startswith("only the run's completion owner may report the run completed")
        assert "'worker-a'" in why  # the owner is named


def test_a_run_without_a_recorded_owner_refuses_nobody() -> None:
    legacy = Owner(None, "worker-a")
    assert owner_refusal(legacy, Caller("key_b", "worker-z", False), "settle") is None


@pytest.mark.parametrize(
    ("before", "after", "kind"),
    [
        (Owner("key_a", None), Owner("key_a", "worker-a"), "claim"),  # names its first worker
        (Owner(None, None), Owner("key_a", "worker-a"), "claim"),  # a legacy run gets one
        (Owner("key_a", "worker-a"), Owner("key_a", "worker-a"), None),  # the same again
        (Owner("key_a", "worker-a"), Owner("key_a", "worker-b"), "takeover"),
        (Owner("key_a", "worker-a"), Owner("key_b", "worker-a"), "takeover"),
        (Owner("key_a", None), Owner("key_b", "worker-b"), "takeover"),
    ],
)
def test_what_a_claim_does_to_ownership(before: Owner, after: Owner, kind: str | None) -> None:
    assert change_kind(before, after) == kind


def test_in_flight_blocks_new_work_like_an_effect_that_may_have_landed() -> None:
    assert MAY_HAVE_LANDED | {"sent"} == BLOCKS_NEW_WORK
    assert not BLOCKS_NEW_WORK & FINAL  # a settled operation never blocks
    assert "planned" not in BLOCKS_NEW_WORK  # nothing went out yet
