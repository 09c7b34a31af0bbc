"""Codex's interactive TUI with ``notify`` and the hooks (issue 20 item 7, row 4), the
real codex-cli in tmux with only the model scripted, configured from
`runbell hook install codex` (:func:`tests.realclients.test_agent_clis.codex_config`;
that module's `codex exec` test covers the headless turn).

One prompt: the hooks report the turn's run working (``UserPromptSubmit``) then completed
(``Stop``, and ``notify``), and the TUI's own title-generation turn, which Codex passes to
``notify`` like any other, reports nothing: the turn's run is the only Codex run.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from tests.realclients import npm
from tests.realclients.harness import HOOK_CAPABILITIES, Runbell, Session
from tests.realclients.test_agent_clis import codex_config
from tests.realclients.tmux import Tmux, require_tmux

pytestmark = pytest.mark.realclients

PROMPT = "Say hello"
CODEX_PROMPT = "Ask Codex to do anything"  # the TUI's empty input line
TITLE_TURN = "Generate a concise, single-line task title"


def log_calls(session: Session) -> tuple[Path, Path]:
    """Wrap the installed ``notify`` program and hook commands: each runs as installed,
    then appends its payload (notify's last argument, a hook's stdin) to
    ``notified.jsonl`` / ``hooks.jsonl``, so the test knows which calls were handled."""
    notify_log, hooks_log = session.root / "notified.jsonl", session.root / "hooks.jsonl"
    config = session.home / ".codex" / "config.toml"
    text = config.read_text()
    found = re.search(r"^notify = (\[.*\])$", text, re.MULTILINE)
    assert found is not None, text
    script = f'{shlex.join(json.loads(found[1]))} "$1"; printf \'%s\\n\' "$1" >> {notify_log}'
    wrapped = f"notify = {json.dumps(['sh', '-c', script, 'notify'])}"
    config.write_text(text.replace(found[0], wrapped))

    path = session.home / ".codex" / "hooks.json"
    hooks = json.loads(path.read_text())
    for groups in hooks["hooks"].values():
        for handler in (h for group in groups for h in group["hooks"]):
            handler["command"] = (
                f"payload=$(cat); printf '%s' \"$payload\" | {handler['command']}; "
                f"printf '%s\\n' \"$payload\" >> {hooks_log}"
            )
    path.write_text(json.dumps(hooks))
    return notify_log, hooks_log


def logged(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def test_codex_tui_turn_reported_working_then_completed_title_turn_not(
    session: Session, runbell: Runbell
) -> None:
    codex = npm.install(*npm.CODEX)
    require_tmux()
    key = runbell.key(*HOOK_CAPABILITIES)
    with session.explained():
        codex_config(session, key)
        notify_log, hooks_log = log_calls(session)
        session.tmux = Tmux()
        session.tmux.start(
            [str(codex), "--dangerously-bypass-hook-trust"],
            session.env(key, FAKE_MODEL_KEY="scripted"),
            session.project,
        )
        session.tmux.wait_for("Codex's prompt", lambda pane: CODEX_PROMPT in pane)
        session.tmux.type(PROMPT)
        session.tmux.wait_for("the prompt typed", lambda pane: PROMPT in pane)
        session.tmux.send("Enter")

        def by_input(start: str) -> dict[str, Any] | None:
            """The notify payload whose first input message starts with ``start``."""
            for payload in logged(notify_log):
                messages = payload.get("input-messages") or [""]
                if str(messages[0]).startswith(start):
                    return payload
            return None

        turn = session.wait("notify for the person's turn", lambda: by_input(PROMPT))
        title = session.wait("notify for the TUI's title turn", lambda: by_input(TITLE_TURN))
        assert title.get("client") == "codex-tui", title

        run_id = f"codex-{turn['thread-id']}.{turn['turn-id']}"
        session.wait(
            "the turn's run to end completed",
            lambda: (r := runbell.run(run_id)) is not None and r["state"] == "completed",
        )
        with runbell.owner() as api:
            steps = api.get(f"/v1/runs/{run_id}/history").json()["steps"]
        states = [st["to_state"] for st in steps if st.get("to_state")]
        assert "working" in states and states[-1] == "completed", steps
        assert states.index("working") < states.index("completed")

        # The hooks reported the turn too (the title turn goes through notify only).
        session.wait(
            "the turn's Stop hook handled",
            lambda: (
                {
                    e["hook_event_name"]
                    for e in logged(hooks_log)
                    if e.get("turn_id") == turn["turn-id"]
                }
                >= {"UserPromptSubmit", "Stop"}
            ),
        )
        assert all(e.get("turn_id") != title["turn-id"] for e in logged(hooks_log))

        # The title turn made no run: the person's turn is the only Codex run.
        codex_runs = [r["run_id"] for r in runbell.runs() if r["run_id"].startswith("codex-")]
        assert codex_runs == [run_id], codex_runs
        assert runbell.run(f"codex-{title['thread-id']}.{title['turn-id']}") is None
        assert "hook failed" not in session.hook_log_text()
