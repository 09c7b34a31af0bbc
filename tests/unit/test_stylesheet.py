"""app.css parses as a browser would read it: every block closed. A rule left open (as a
merge once did to `.show-all summary`) swallows every rule after it without an error
anywhere, so the pages silently lose their styles."""

from __future__ import annotations

import re
from pathlib import Path

CSS = Path(__file__).resolve().parents[2] / "src" / "runbell" / "web" / "static" / "app.css"


def test_every_block_of_app_css_is_closed() -> None:
    text = re.sub(r"/\*.*?\*/", "", CSS.read_text(), flags=re.S)  # comments may hold braces
    depth = 0
    for number, line in enumerate(text.splitlines(), start=1):
        depth += line.count("{") - line.count("}")
        assert depth >= 0, f"app.css line {number}: a '}}' closes nothing"
    assert depth == 0, "app.css ends inside a block: a '}' is missing"


def test_no_rule_opens_inside_another_rule() -> None:
    text = re.sub(r"/\*.*?\*/", "", CSS.read_text(), flags=re.S)
    stack: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        for ch in line:
            if ch == "{":
                head = line.split("{")[0].strip()
                if stack and not stack[-1].startswith("@"):
                    raise AssertionError(f"app.css line {number}: {head!r} opens inside a rule")
                stack.append(head)
            elif ch == "}":
                stack.pop()
