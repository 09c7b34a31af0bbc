"""runtime.credentials: what a process remembers about verified tokens, and for how long."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from runbell.domain.principal import Principal
from runbell.runtime.credentials import Credentials

T0 = datetime(2026, 1, 1, tzinfo=UTC)
WHO = Principal(tenant_id="ten_1", kind="key", role="runtime", key_id="key_1")


def test_remembered_for_the_ttl_only() -> None:
    memo = Credentials(5)
    memo.put("rbk_a", WHO, T0, None, generation=memo.generation)
    assert memo.get("rbk_a", T0 + timedelta(seconds=4.9)) == WHO
    assert memo.get("rbk_a", T0 + timedelta(seconds=5)) is None
    assert memo.get("rbk_b", T0) is None


def test_a_clock_that_steps_back_ends_the_entry() -> None:
    memo = Credentials(5)
    memo.put("rbk_a", WHO, T0, None, generation=memo.generation)
    assert memo.get("rbk_a", T0 - timedelta(seconds=1)) is None


def test_never_past_the_credentials_own_expiry() -> None:
    memo = Credentials(5)
    memo.put("rbu_a", WHO, T0, T0 + timedelta(seconds=2), generation=memo.generation)
    assert memo.get("rbu_a", T0 + timedelta(seconds=1)) == WHO
    assert memo.get("rbu_a", T0 + timedelta(seconds=2)) is None


def test_a_read_from_before_a_revocation_is_not_kept() -> None:
    memo = Credentials(5)
    before = memo.generation  # a lookup starts reading...
    memo.forget()  # ...a revocation in this process commits meanwhile
    memo.put("rbk_a", WHO, T0, None, generation=before)
    assert memo.get("rbk_a", T0) is None


def test_zero_turns_it_off_and_the_size_is_bounded() -> None:
    off = Credentials(0)
    off.put("rbk_a", WHO, T0, None, generation=off.generation)
    assert off.get("rbk_a", T0) is None
    memo = Credentials(5, max_entries=3)
    for i in range(10):
        memo.put(f"rbd_{i}", WHO, T0, None, generation=memo.generation)
    assert sum(memo.get(f"rbd_{i}", T0) is not None for i in range(10)) <= 3
    assert memo.get("rbd_9", T0) == WHO
