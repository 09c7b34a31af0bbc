"""LangGraph through Runbell (issue 20 item 6): the real ``langgraph`` package, graphs that
need no model (a StateGraph whose node calls ``interrupt()``, an in-memory checkpointer),
against a live Runbell on SQLite and PostgreSQL. The person answers through the API from
another thread, as the web app does.

What a user would notice: the graph resumes with the answer the person gave, once; a
retried resume (or a replay from the same checkpoint, LangGraph issue #6663) cannot give
the interrupt another value; the run's state in Runbell follows the graph."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Annotated, Any, TypedDict

import httpx
import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from runbell.client import Client
from runbell.integrations.langgraph import RunbellGraph, request_id_for
from runbell.testing import TenantCreds
from tests.conftest import LiveServer, bearer
from tests.timeouts import WAIT

SCHEMA = {
    "type": "object",
    "properties": {"tasks": {"type": "array", "items": {"type": "string"}, "maxItems": 5}},
    "required": ["tasks"],
}


class State(TypedDict, total=False):
    ask: Any
    answer: Any
    effects: list[str]


def build(log: list[Any] | None = None, fail: bool = False) -> Any:
    """One node that asks (``state["ask"]`` is the interrupt's value), records what it got
    and, when approved, an effect; ``log`` sees every value the node was resumed with."""

    def decide(state: State) -> State:
        answer = interrupt(state["ask"])
        if log is not None:
            log.append(answer)
        if fail:
            raise RuntimeError("the tool broke")
        effects = ["done"] if answer["approved"] else []
        return {"answer": answer, "effects": effects}

    graph = StateGraph(State).add_node("decide", decide)
    graph = graph.add_edge(START, "decide").add_edge("decide", END)
    return graph.compile(checkpointer=InMemorySaver())


def pending(live: LiveServer, creds: TenantCreds, run_id: str) -> dict[str, Any]:
    with httpx.Client(base_url=live.url, headers=bearer(creds.owner_token), timeout=WAIT) as http:
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            run = http.get(f"/v1/runs/{run_id}")
            found = run.json().get("pending_input_request") if run.is_success else None
            if found:
                got = http.get(f"/v1/input-requests/{found['id']}").json()
                return dict(got["input_request"])
            time.sleep(0.05)
    raise AssertionError(f"no request opened on {run_id}")


def respond(
    live: LiveServer, creds: TenantCreds, request_id: str, decision: str, value: Any = None
) -> httpx.Response:
    with httpx.Client(base_url=live.url, headers=bearer(creds.owner_token), timeout=WAIT) as http:
        seen = http.get(f"/v1/input-requests/{request_id}").json()
        body: dict[str, Any] = {
            "decision": decision,
            "expected_run_version": seen["run"]["version"],
            "expected_request_version": seen["input_request"]["version"],
        }
        if value is not None:
            body["value"] = value
        return http.post(
            f"/v1/input-requests/{request_id}/responses",
            json=body,
            headers={"Idempotency-Key": uuid.uuid4().hex},
        )


def answer_when_asked(
    live: LiveServer, creds: TenantCreds, run_id: str, decision: str, value: Any = None
) -> tuple[threading.Thread, list[dict[str, Any]]]:
    seen: list[dict[str, Any]] = []

    def person() -> None:
        request = pending(live, creds, run_id)
        seen.append(request)
        r = respond(live, creds, request["id"], decision, value)
        assert r.status_code == 200, r.text

    thread = threading.Thread(target=person, daemon=True)
    thread.start()
    return thread, seen


def run_state(rb: Client, run_id: str) -> str:
    return rb.get_run(run_id).state


def test_approve_resumes_the_graph_with_the_answer_and_completes_the_run(
    live: LiveServer, creds: TenantCreds
) -> None:
    thread_id = "deploy-thread"
    with Client(live.url, creds.runtime_key, creds.owner_email) as rb:
        rg = RunbellGraph(build(), rb, title="Deploy v2", expires_in=600)
        person, seen = answer_when_asked(live, creds, thread_id, "approve")
        ask = {"summary": "Deploy v2?", "command": "make deploy", "cwd": "/srv/app"}
        out = rg.invoke({"ask": ask}, thread_id=thread_id, timeout=WAIT)
        person.join(WAIT)
        assert out["answer"]["approved"] is True
        assert out["answer"]["decision"] == "approve"
        assert out["effects"] == ["done"]
        run = rb.get_run(thread_id)
        assert run.state == "completed"
        assert run.metadata["langgraph_thread_id"] == thread_id
    (request,) = seen
    assert request["summary"] == "Deploy v2?"
    assert request["action"] == {"kind": "shell", "command": "make deploy", "cwd": "/srv/app"}
    assert request["details"]["langgraph"]["node"] == "decide"


def test_a_plain_string_interrupt_shows_a_generic_action_and_reject_reaches_the_graph(
    live: LiveServer, creds: TenantCreds
) -> None:
    with Client(live.url, creds.runtime_key, creds.owner_email) as rb:
        rg = RunbellGraph(build(), rb, title="Tidy")
        person, seen = answer_when_asked(live, creds, "tidy", "reject")
        out = rg.invoke({"ask": "Delete 42 stale objects?"}, thread_id="tidy", timeout=WAIT)
        person.join(WAIT)
        assert out["answer"]["approved"] is False
        assert out["answer"]["decision"] == "reject"
        assert out["answer"]["outcome"] == "answered"
        assert out["effects"] == []
        assert run_state(rb, "tidy") == "completed"
    action = seen[0]["action"]
    assert action["kind"] == "generic" and action["tool"] == "langgraph:decide"
    assert action["arguments"] == {"value": "Delete 42 stale objects?"}


def test_an_edited_value_reaches_the_graph(live: LiveServer, creds: TenantCreds) -> None:
    with Client(live.url, creds.runtime_key, creds.owner_email) as rb:
        rg = RunbellGraph(build(), rb)
        edited = {"tasks": ["migrate", "deploy"]}
        person, _ = answer_when_asked(live, creds, "chores", "approve", edited)
        ask = {
            "summary": "Run these tasks?",
            "editable": {"schema": SCHEMA, "value": {"tasks": ["migrate", "seed", "deploy"]}},
        }
        out = rg.invoke({"ask": ask}, thread_id="chores", timeout=WAIT)
        person.join(WAIT)
    assert out["answer"]["approved"] is True
    assert out["answer"]["edited"] is True
    assert out["answer"]["value"] == edited


def test_a_retried_resume_gets_the_one_recorded_answer(
    live: LiveServer, creds: TenantCreds
) -> None:
    log: list[Any] = []
    with Client(live.url, creds.runtime_key, creds.owner_email) as rb:
        graph = build(log)
        rg = RunbellGraph(graph, rb)
        ask = {"summary": "Which colour?", "kind": "text"}
        paused = rg.invoke({"ask": ask}, thread_id="colour", wait=False)
        assert [i.value for i in paused["__interrupt__"]] == [ask]
        assert run_state(rb, "colour") == "input_required"
        # Not answered yet: resuming without waiting leaves the graph where it is.
        assert "__interrupt__" in rg.resume("colour", wait=False)
        assert log == []
        at_interrupt = graph.get_state({"configurable": {"thread_id": "colour"}}).config

        request = pending(live, creds, "colour")
        assert request["id"] == request_id_for("colour", paused["__interrupt__"][0].id)
        assert respond(live, creds, request["id"], "answer", "blue").status_code == 200
        # A second, different answer is refused by Runbell: the first one stands.
        assert respond(live, creds, request["id"], "answer", "red").status_code == 409
        with pytest.raises(TypeError, match="resume"):
            rg.invoke(Command(resume={"value": "red"}), thread_id="colour")
        with pytest.raises(LookupError, match="no checkpoint"):
            rg.resume("never-started")

        first = rg.resume("colour", timeout=WAIT)
        again = rg.resume("colour", timeout=WAIT)  # retried: the graph does not run again
        assert first["answer"]["value"] == "blue"
        assert again == first
        assert [a["value"] for a in log] == ["blue"]
        # LangGraph issue #6663: resuming the same interrupt again from its checkpoint
        # (a fork) gets the same recorded answer, never another value.
        replay = rg.resume("colour", config=at_interrupt, timeout=WAIT)
        assert replay["answer"]["value"] == "blue"
        assert [a["value"] for a in log] == ["blue", "blue"]
        assert run_state(rb, "colour") == "completed"


def test_a_choice_and_a_failing_graph(live: LiveServer, creds: TenantCreds) -> None:
    log: list[Any] = []
    with Client(live.url, creds.runtime_key, creds.owner_email) as rb:
        rg = RunbellGraph(build(log, fail=True), rb)
        person, seen = answer_when_asked(live, creds, "region", "answer", "eu")
        ask = {"summary": "Which region?", "options": ["eu", "us"]}
        with pytest.raises(RuntimeError, match="the tool broke"):
            rg.invoke({"ask": ask}, thread_id="region", timeout=WAIT)
        person.join(WAIT)
        run = rb.get_run("region")
    assert seen[0]["kind"] == "choice"
    assert [o["id"] for o in seen[0]["options"]] == ["eu", "us"]
    assert [a["value"] for a in log] == ["eu"]
    assert run.state == "failed"


def test_a_timeout_leaves_the_run_waiting_and_a_later_resume_finishes(
    live: LiveServer, creds: TenantCreds
) -> None:
    with Client(live.url, creds.runtime_key, creds.owner_email) as rb:
        rg = RunbellGraph(build(), rb)
        paused = rg.invoke({"ask": "Ship it?"}, thread_id="ship", timeout=0.2)
        assert "__interrupt__" in paused
        assert run_state(rb, "ship") == "input_required"
        request = pending(live, creds, "ship")
        assert respond(live, creds, request["id"], "approve").status_code == 200
        out = rg.resume("ship", timeout=WAIT)
        assert out["effects"] == ["done"]
        assert run_state(rb, "ship") == "completed"
        # The run is over and its request answered once: a late reject changes nothing.
        assert respond(live, creds, request["id"], "reject").status_code == 409


def merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    return {**a, **b}


class Both(TypedDict, total=False):
    got: Annotated[dict[str, Any], merge]  # two nodes write it in the same step


def test_parallel_interrupts_are_asked_one_after_the_other_and_resumed_together(
    live: LiveServer, creds: TenantCreds
) -> None:
    def node(name: str) -> Any:
        def ask(state: Both) -> Both:
            answer = interrupt({"summary": f"Let {name} go?", "tool": name})
            return {"got": {name: answer["decision"]}}

        return ask

    graph = StateGraph(Both).add_node("left", node("left")).add_node("right", node("right"))
    graph = graph.add_edge(START, "left").add_edge(START, "right")
    graph = graph.add_edge("left", END).add_edge("right", END)
    compiled = graph.compile(checkpointer=InMemorySaver())
    asked: list[str] = []

    def person() -> None:
        for decision in ("approve", "reject"):
            request = pending(live, creds, "pair")
            asked.append(request["summary"])
            assert respond(live, creds, request["id"], decision).status_code == 200

    with Client(live.url, creds.runtime_key, creds.owner_email) as rb:
        answering = threading.Thread(target=person, daemon=True)
        answering.start()
        out = RunbellGraph(compiled, rb).invoke({"got": {}}, thread_id="pair", timeout=WAIT)
        answering.join(WAIT)
        assert run_state(rb, "pair") == "completed"
    assert sorted(asked) == ["Let left go?", "Let right go?"]
    first, second = (s.split()[1] for s in asked)
    assert out["got"] == {first: "approve", second: "reject"}
