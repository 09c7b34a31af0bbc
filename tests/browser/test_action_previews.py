"""The action preview (issue 19 item 1) in headless Chromium: for each kind of action, on a
phone (390 x 844) and a desktop (1280 x 800), the action's text is on the first screen and
above the Approve button, risky patterns are on one warning line, long values open with
"Show all" without JavaScript, and the raw details stay below. Screenshots of each go to
test-artifacts/screenshots/ for docs/web.md."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page, expect

from runbell.flows.context import Core
from runbell.testing import TenantCreds
from tests.browser.conftest import PHONE, BrowserServer, NewContext, Runtime, screenshot, sign_in

pytestmark = pytest.mark.browser

DESKTOP_800 = {"width": 1280, "height": 800}
PROJECT = "/home/dev/shop"
LONG_SCRIPT = "\n".join(f"echo step {i} && make target-{i}" for i in range(1, 41))

# (name, action, the element holding its text, text it must show, risk codes)
PREVIEWS: list[tuple[str, dict[str, Any], str, str, list[str]]] = [
    (
        "shell",
        {"kind": "shell", "command": "rm -rf ./build && npm ci", "cwd": PROJECT},
        "#action-command",
        "rm -rf ./build && npm ci",
        ["recursive_delete"],
    ),
    (
        "file_write",
        {
            "kind": "file_write",
            "path": "/etc/hosts",
            "content": "127.0.0.1 api.local\n",
            "cwd": PROJECT,
        },
        "#action-path",
        "/etc/hosts",
        ["outside_project"],
    ),
    (
        "file_edit",
        {
            "kind": "file_edit",
            "path": "src/app.py",
            "diff": (
                "--- a/src/app.py\n+++ b/src/app.py\n@@ -1,3 +1,3 @@\n"
                " import os\n-DEBUG = True\n+DEBUG = False\n print(os.name)\n"
            ),
        },
        "#action-diff",
        "+DEBUG = False",
        [],
    ),
    (
        "web_fetch",
        {"kind": "web_fetch", "url": "https://docs.example.com/guide/install?x=1"},
        "#action-url",
        "docs.example.com",
        [],
    ),
    (
        "mcp_tool",
        {
            "kind": "mcp_tool",
            "server": "github",
            "tool": "create_issue",
            "arguments": {"repo": "acme/shop", "title": "Checkout fails on Safari"},
        },
        "#action-tool",
        "create_issue",
        [],
    ),
    (
        "generic",
        {"kind": "generic", "tool": "NotebookEdit", "arguments": {"cell": 3, "source": "x = 1"}},
        "#action-tool",
        "NotebookEdit",
        [],
    ),
    (
        "shell_long",
        {"kind": "shell", "command": LONG_SCRIPT, "cwd": PROJECT},
        "#action-command",
        "echo step 1 && make target-1",
        [],
    ),
]


def above_the_button(page: Page, selector: str) -> None:
    """The action's text starts inside the first screen, and above Approve."""
    text = page.locator(selector).bounding_box()
    button = page.locator("#approve").bounding_box()
    viewport = page.viewport_size
    assert text is not None and button is not None and viewport is not None
    assert 0 <= text["y"] < viewport["height"], (text, viewport)
    assert text["y"] + text["height"] <= button["y"], (text, button)
    assert button["y"] + button["height"] <= viewport["height"], (button, viewport)


@pytest.mark.parametrize(
    ("name", "action", "where", "shown", "codes"), PREVIEWS, ids=[p[0] for p in PREVIEWS]
)
def test_each_preview_leads_above_the_buttons(
    core: Core,
    creds: TenantCreds,
    web: BrowserServer,
    runtime: Runtime,
    new_context: NewContext,
    name: str,
    action: dict[str, Any],
    where: str,
    shown: str,
    codes: list[str],
) -> None:
    run_id = f"preview-{name.replace('_', '-')}"
    runtime.create_run(run_id, title="Claude Code: shop")
    opened = runtime.open_request(
        run_id,
        f"ask-{run_id}",
        summary="Claude Code wants to use a tool",
        details={"tool_input": action, "permission_mode": "default", "cwd": PROJECT},
        action=action,
    )
    (note,) = [n["id"] for n in opened["notifications"] if n["attention_type"] == "input_required"]
    for size, viewport in (("phone", PHONE), ("desktop", DESKTOP_800)):
        mobile = {"is_mobile": True, "has_touch": True} if size == "phone" else {}
        page = new_context(viewport=viewport, **mobile).new_page()
        sign_in(page, core, creds.tenant_id, creds.owner_id)
        # The run page and the deep link both lead with the action.
        for path in (f"/runs/{run_id}", f"/n/{note}"):
            page.goto(path)
            expect(page.locator(where)).to_contain_text(shown)
            above_the_button(page, where)
            risks = page.locator("#action-risks [data-risk]")
            expect(risks).to_have_count(len(codes))
            for code in codes:
                expect(page.locator(f"#action-risks [data-risk={code}]")).to_be_visible()
            # The raw details are there, folded below the buttons.
            raw = page.locator("#raw-details")
            expect(raw).to_be_attached()
            assert raw.bounding_box()["y"] > page.locator("#approve").bounding_box()["y"]  # type: ignore[index]
        page.goto(f"/runs/{run_id}")
        screenshot(page, f"action-preview-{name}-{size}")
        page.context.close()


def test_a_long_command_opens_with_show_all_without_javascript(
    core: Core,
    creds: TenantCreds,
    runtime: Runtime,
    new_context: NewContext,
) -> None:
    runtime.create_run("preview-nojs", title="Claude Code: shop")
    runtime.open_request(
        "preview-nojs",
        "ask-nojs",
        summary="Claude Code wants to use Bash",
        action={"kind": "shell", "command": LONG_SCRIPT, "cwd": PROJECT},
    )
    page = new_context(viewport=PHONE, java_script_enabled=False).new_page()
    sign_in(page, core, creds.tenant_id, creds.owner_id)
    page.goto("/runs/preview-nojs")
    head = page.locator("#action-command")
    expect(head).to_contain_text("make target-6")
    expect(head).not_to_contain_text("make target-40")
    every = page.locator("#action-command-all")
    expect(every.locator("pre")).to_be_hidden()
    every.locator("summary").click()
    expect(every.locator("pre")).to_contain_text("echo step 40 && make target-40")
    expect(page.locator("#action-cwd")).to_have_text(PROJECT)
    above_the_button(page, "#action-command")
