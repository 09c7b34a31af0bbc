"""Fix the command from the phone (issue 19 item 3), with the real Claude Code CLI.

The scripted model asks Claude Code (interactive, in tmux, hooked up as the docs say)
to run :data:`WRONG`. The PermissionRequest hook puts it to Runbell as an approval whose
``editable`` value is the command; the owner, signed in on the phone, posts the run
page's edit form ("Approve edited") with :data:`FIXED`. The hook answers Claude Code with
``updatedInput``, and Claude Code runs the fixed command: out.txt says "fixed", the
model's next request carries the fixed command's output, and the run records the answer
as edited, with the value.
"""

from __future__ import annotations

import contextlib
import html
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.acceptance.test_worker_processes import run_cli
from tests.realclients.harness import HOOK_CAPABILITIES, Runbell, Session
from tests.realclients.test_agent_clis import pending_request, start_claude
from tests.timeouts import WAIT

pytestmark = pytest.mark.realclients

WRONG = "echo wrong > out.txt && cat out.txt"
FIXED = "echo fixed > out.txt && cat out.txt"
FIELD = r'name="{}" value="([^"]*)"'


@pytest.fixture
def model_options() -> dict[str, Any]:
    return {"command": WRONG}


@contextlib.contextmanager
def phone(runbell: Runbell) -> Iterator[httpx.Client]:
    """The owner's phone browser, signed in through a one-time link from
    `runbell user login-link` (a cookie session, as the web app has)."""
    res = run_cli(runbell.env, "user", "login-link", "--tenant", "acme")
    assert res.returncode == 0, res.stdout + res.stderr
    link = re.search(r"/auth/\S+", res.stdout)
    assert link is not None, res.stdout
    with httpx.Client(base_url=runbell.url, timeout=WAIT) as browser:
        signed_in = browser.get(link[0], follow_redirects=False)
        assert signed_in.status_code == 303, signed_in.text
        yield browser


def edit_form(page: str) -> dict[str, str]:
    """The run page's "Approve edited" form: its hidden fields and the value shown."""
    assert 'id="edit-form"' in page, "the run page offers the command to edit"
    part = page.split('id="edit-form"', 1)[1].split("</form>", 1)[0]
    fields = {}
    for name in ("csrf_token", "expected_run_version", "expected_request_version",
                 "idempotency_key"):  # fmt: skip
        found = re.search(FIELD.format(name), part)
        assert found, f"no {name} in the edit form"
        fields[name] = html.unescape(found[1])
    shown = re.search(r'<textarea id="edit-value"[^>]*>([^<]*)</textarea>', part)
    assert shown, "the edit form shows the value"
    fields["value"] = html.unescape(shown[1])
    return fields


def test_claude_code_runs_the_command_fixed_from_the_phone(
    session: Session, runbell: Runbell
) -> None:
    key = runbell.key(*HOOK_CAPABILITIES)
    with session.explained():
        run_id = f"cc-{start_claude(session, key)}"
        request: dict[str, Any] = session.wait(
            "the permission prompt as an input request",
            lambda: pending_request(runbell, run_id),
        )
        assert request["kind"] == "approval"
        out = session.project / "out.txt"
        assert not out.exists()  # nothing before the answer

        with phone(runbell) as browser:
            page = browser.get(f"/runs/{run_id}")
            assert page.status_code == 200, page.text
            form = edit_form(page.text)
            assert form["value"] == WRONG  # the command itself, as a string to fix
            answered = browser.post(
                f"/runs/{run_id}/input-requests/{request['id']}/edit",
                data={**form, "value": FIXED},
                follow_redirects=False,
            )
            assert answered.status_code == 303, answered.text

        session.wait("Claude Code to run the fixed command", out.exists)
        session.wait("out.txt written", lambda: out.read_text() == "fixed\n")
        assert "wrong" not in out.read_text()
        # The model's next request carries what the fixed command printed.
        results = session.wait("the tool result sent back", session.model.tool_results)
        assert any("fixed" in text for text in results), results
        assert not any("wrong" in text for text in results), results
        run = session.wait(
            "the turn's run to end completed",
            lambda: (r := runbell.run(run_id)) is not None and r["state"] == "completed" and r,
        )
        assert run["pending_input_request"] is None
        assert "hook failed" not in session.hook_log_text()

        # Recorded: the answer says edited and carries the fixed command, in the run's
        # history and in the event feed.
        with runbell.owner() as api:
            got = api.get(f"/v1/input-requests/{request['id']}").json()["input_request"]
            steps = api.get(f"/v1/runs/{run_id}/history").json()["steps"]
            events = api.get("/v1/events").json()["events"]
        assert got["decision"] == "approve" and got["edited"] is True
        assert got["value"] == {"command": FIXED}
        step = next(s for s in steps if s["kind"] == "answer")
        assert step["edited"] is True and step["input_request_id"] == request["id"]
        feed = [e["data"] for e in events if e["type"] == "input_request.answered"]
        mine = [d for d in feed if d["input_request_id"] == request["id"]]
        assert mine and mine[-1]["edited"] is True and mine[-1]["value"] == {"command": FIXED}
