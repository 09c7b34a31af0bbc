"""What a LangGraph interrupt's value asks a person (runbell.integrations._interrupts):
the summary, the typed action preview, the request kind; and the ids that make a retried
resume find the same request."""

from __future__ import annotations

from runbell.client import Answer
from runbell.integrations._interrupts import question, request_id_for, resume_value, run_id_for


def test_a_string_is_an_approval_with_a_generic_action_carrying_it() -> None:
    q = question("Delete 42 stale objects?\nfrom staging", "tidy", "abc")
    assert q.kind == "approval"
    assert q.summary == "Delete 42 stale objects? from staging"
    assert q.action == {
        "kind": "generic",
        "tool": "langgraph:tidy",
        "arguments": {"value": "Delete 42 stale objects?\nfrom staging"},
    }
    assert q.details == {
        "langgraph": {"node": "tidy", "interrupt_id": "abc"},
        "value": "Delete 42 stale objects?\nfrom staging",
    }


def test_a_command_is_a_shell_action_and_a_tool_a_tool_call() -> None:
    shell = question({"summary": "Deploy?", "command": "make deploy", "cwd": "/srv"}, "n", "i")
    assert shell.action == {"kind": "shell", "command": "make deploy", "cwd": "/srv"}
    tool = question({"question": "Refund?", "tool": "refund", "args": {"order": 7}}, "n", "i")
    assert tool.summary == "Refund?"
    assert tool.action == {"kind": "generic", "tool": "refund", "arguments": {"order": 7}}
    typed = question({"summary": "Fetch?", "kind": "web_fetch", "url": "https://x.test"}, "n", "i")
    assert typed.kind == "approval"
    assert typed.action == {"kind": "web_fetch", "url": "https://x.test"}
    given = question({"action": {"kind": "file_write", "path": "a.txt"}}, "writer", "i")
    assert given.summary == "writer needs your input"
    assert given.action == {"kind": "file_write", "path": "a.txt"}


def test_options_make_a_choice_and_text_has_no_action() -> None:
    choice = question({"summary": "Region?", "options": ["eu", "us"]}, "n", "i")
    assert (choice.kind, choice.options, choice.action) == ("choice", ["eu", "us"], None)
    text = question({"summary": "Message?", "kind": "text"}, "n", "i")
    assert (text.kind, text.action, text.options) == ("text", None, None)


def test_an_editable_value_goes_with_an_approval_and_not_into_the_action() -> None:
    editable = {"schema": {"type": "string"}, "value": "v1"}
    q = question({"summary": "Tag?", "editable": editable, "release": 3}, "n", "i")
    assert q.editable == editable
    assert q.action == {"kind": "generic", "tool": "langgraph:n", "arguments": {"release": 3}}


def test_long_values_are_cut_and_unknown_objects_become_text() -> None:
    q = question({"summary": "x" * 500, "blob": "y" * 10_000, "obj": object()}, "n", "i")
    assert len(q.summary) == 300
    assert q.action is not None
    assert len(q.action["arguments"]["blob"]) < 5000
    assert isinstance(q.action["arguments"]["obj"], str)


def test_ids_are_stable_and_valid() -> None:
    assert run_id_for("deploy-7") == "deploy-7"
    odd = run_id_for("user 42/chat")
    assert odd == run_id_for("user 42/chat") and odd.startswith("langgraph-")
    assert request_id_for("deploy-7", "f00d") == "deploy-7.lg.f00d"
    long = request_id_for("r" * 199, "f00d")
    assert long == request_id_for("r" * 199, "f00d") and len(long) <= 200


def test_the_resume_value_is_the_recorded_answer_as_json() -> None:
    answer = Answer(
        outcome="answered", request_id="q", run_id="r", decision="approve", value={"a": 1}
    )
    assert resume_value(answer) == {
        "outcome": "answered",
        "approved": True,
        "decision": "approve",
        "value": {"a": 1},
        "edited": False,
        "answered_by": None,
        "request_id": "q",
    }
    expired = resume_value(Answer(outcome="expired", request_id="q", run_id="r"))
    assert expired["approved"] is False and expired["outcome"] == "expired"
