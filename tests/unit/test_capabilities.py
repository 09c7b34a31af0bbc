"""The pure decisions of scoped credentials (runbell.domain.capabilities) and what a
principal says of itself (issue 18 item 1)."""

from __future__ import annotations

import pytest

from runbell.domain.capabilities import (
    CAPABILITIES,
    Scope,
    glob_match,
    parse_capabilities,
    parse_patterns,
    wider_than,
)
from runbell.domain.errors import Forbidden, ValidationFailed
from runbell.domain.principal import Principal


@pytest.mark.parametrize(
    ("pattern", "run_id", "matches"),
    [
        ("launch-*", "launch-1", True),
        ("launch-*", "launch-", True),
        ("launch-*", "Launch-1", False),
        ("launch-*", "prelaunch-1", False),
        ("launch-?", "launch-12", False),
        ("a.b", "axb", False),
        ("*", "anything:at@all", True),
    ],
)
def test_glob(pattern: str, run_id: str, matches: bool) -> None:
    assert glob_match(pattern, run_id) is matches


def test_every_limit_applies() -> None:
    scope = Scope(run_patterns=("launch-*",), own_runs=True, creator_id="key_a")
    assert scope.run_in_scope("launch-1", "key_a")
    assert not scope.run_in_scope("launch-1", "key_b")
    assert not scope.run_in_scope("other-1", "key_a")
    assert not scope.run_in_scope("launch-1", None)
    bound = Scope(capabilities=frozenset({"runs.read"}), bound_run="r1")
    assert bound.run_in_scope("r1", None) and not bound.id_in_scope("r2")
    assert Scope().run_in_scope("x", None) and not Scope().limits_runs


def test_parsing_refuses_what_it_does_not_know() -> None:
    assert parse_capabilities(["runs.read", "runs.read"]) == {"runs.read"}
    with pytest.raises(ValidationFailed, match=r"runs\.write"):
        parse_capabilities(["runs.write"])
    assert parse_patterns(["a-*", "a-*", "b?"]) == ("a-*", "b?")
    for bad in (["a[1]"], ["a b"], [], ["%"]):
        with pytest.raises(ValidationFailed):
            parse_patterns(bad)


def test_never_wider() -> None:
    parent = Scope(capabilities=frozenset({"runs.report", "runs.read"}))
    assert wider_than(parent, frozenset({"runs.read"})) is None
    assert wider_than(parent, frozenset({"runs.read", "runs.cancel"})) == "runs.cancel"
    # An unscoped key holds every capability but input_requests.answer, which is never
    # implied (a machine's answer must be granted by name), so it cannot pass that on.
    assert wider_than(None, frozenset(CAPABILITIES) - {"input_requests.answer"}) is None
    assert wider_than(None, frozenset(CAPABILITIES)) == "input_requests.answer"


def test_principal_names_its_credential() -> None:
    key = Principal("ten_1", "key", "runtime", key_id="key_1")
    assert key.actor() == {"kind": "key", "credential_id": "key_1"}
    assert key.holds("runs.cancel") and key.sees_all_runs
    token = Principal(
        "ten_1",
        "key",
        "runtime",
        key_id="key_1",
        token_id="dlg_1",
        scope=Scope(capabilities=frozenset({"runs.read"}), bound_run="r1"),
    )
    assert token.credential_id == "dlg_1"
    assert token.actor() == {"kind": "delegated", "credential_id": "dlg_1"}
    assert not token.sees_all_runs and token.limits_runs
    with pytest.raises(Forbidden) as refused:
        token.require("runs.cancel")
    assert refused.value.extra == {"missing_capability": "runs.cancel"}
    person = Principal("ten_1", "user", "member", user_id="usr_1")
    assert person.actor() == {"kind": "user", "user_id": "usr_1"}
    person.require("runs.cancel")  # people are not scoped here
