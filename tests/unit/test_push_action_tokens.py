"""The pure part of acting from a web push (issue 19 item 2): which buttons a push
offers, their neutral titles, and the token's signing."""

from __future__ import annotations

from dataclasses import replace

import pytest

from runbell.domain import push_actions as pa
from runbell.domain.errors import ValidationFailed
from runbell.domain.policy import Policy

CLAIMS = pa.Claims(
    tenant_id="ten_1",
    delivery_id="dlv_1",
    notification_id="ntf_1",
    recipient="usr_1",
    destination="psub_1",
    expires_at=1_900_000_000,
    request_id="req_1",
    run_version=3,
    request_version=1,
    answers=True,
)
KEY = b"k" * 32


@pytest.mark.parametrize(
    ("rule_allows", "risks", "answerable"),
    [
        (True, [], True),
        (True, ["recursive_delete"], False),
        (True, ["force_push", "curl_pipe_sh"], False),
        (False, [], False),
        (False, ["recursive_delete"], False),
    ],
)
def test_lock_screen_answerable(rule_allows: bool, risks: list[str], answerable: bool) -> None:
    assert pa.lock_screen_answerable(rule_allows, risks) is answerable


def test_buttons_lead_with_the_decision_and_say_nothing_of_the_request() -> None:
    assert [b["action"] for b in pa.offered(True, 3600)] == [
        "approve",
        "reject",
        "acknowledge",
        "snooze",
    ]
    assert pa.offered(False, 3600) == [
        {"action": "acknowledge", "title": "Acknowledge"},
        {"action": "snooze", "title": "Snooze 1 h"},
    ]


def test_a_token_verifies_only_under_its_key_and_unaltered() -> None:
    token = pa.sign(CLAIMS, KEY)
    assert pa.sign(CLAIMS, KEY) == token  # deterministic: a retried send, the same token
    assert pa.verify(token, KEY) == CLAIMS
    assert pa.verify(token, b"x" * 32) is None
    prefix, body, mac = token.split(".")
    other = pa.sign(replace(CLAIMS, answers=False), KEY).split(".")[1]
    assert pa.verify(f"{prefix}.{other}.{mac}", KEY) is None
    for bad in ("", "rbpa", "rbpa..", "x.y.z", f"{prefix}.{body}", "rbpa.é.é", token + "."):
        assert pa.verify(bad, KEY) is None
    assert pa.verify(pa.sign(replace(CLAIMS, run_version=4), KEY), KEY) != CLAIMS
    assert pa.expired(CLAIMS, CLAIMS.expires_at) and not pa.expired(CLAIMS, CLAIMS.expires_at - 1)


def test_rule_flags_parse_and_default_off() -> None:
    base = {"id": "r", "decision": "push", "urgency": "normal"}
    policy = Policy.from_mapping({"rules": [base], "replace_defaults": True})
    rule = policy.rule("r")
    assert rule is not None and rule.lock_screen_answers is False and rule.snooze_s is None
    on = Policy.from_mapping(
        {"rules": [{**base, "lock_screen_answers": True, "snooze_s": 600}]}
    ).rule("r")
    assert on is not None and on.lock_screen_answers and on.snooze_s == 600
    assert Policy.default().rule("no such rule") is None
    with pytest.raises(ValidationFailed, match="lock_screen_answers"):
        Policy.from_mapping({"rules": [{**base, "lock_screen_answers": 1}]})
    with pytest.raises(ValidationFailed, match="snooze_s"):
        Policy.from_mapping({"rules": [{**base, "snooze_s": 59}]})
