"""Generate the SDK's synchronous client from the asynchronous one.

``src/runbell/client/_async.py`` is the only client written by hand; ``_sync.py`` is this
script's output (the approach of httpcore's ``unasync.py``): token rules turn awaits into
calls and async types into their blocking twins, then ruff sorts the imports and formats.
``make sdk`` writes it; ``python scripts/unasync.py --check`` (run by
``tests/unit/test_sdk_generated.py``) fails when the committed file is not what the rules
make of ``_async.py`` today.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "src" / "runbell" / "client" / "_async.py"
TARGET = ROOT / "src" / "runbell" / "client" / "_sync.py"
RUFF = Path(sys.executable).with_name("ruff")

HEADER = (
    '"""The synchronous client, generated from ``_async.py`` by ``scripts/unasync.py``: do not\n'
    'edit; change ``_async.py`` and run ``make sdk``."""'
)

#: In order. Words, not substrings: ``AsyncClient`` is renamed, ``httpx.AsyncClient`` too.
RULES: list[tuple[str, str]] = [
    (r"\bAsyncClient\b", "Client"),
    (r"\bAsyncRunContext\b", "RunContext"),
    (r"\bAsyncIterator\b", "Iterator"),
    (r"\bAsyncBaseTransport\b", "BaseTransport"),
    (r"\bAsyncHTTPTransport\b", "HTTPTransport"),
    (r"__aenter__", "__enter__"),
    (r"__aexit__", "__exit__"),
    (r"\baclose\b", "close"),
    (r"\basyncio\.sleep\b", "time.sleep"),
    (r"^import asyncio\n", ""),
    (r"\bAwaitable\[R\]", "R"),
    (r"\bAwaitable, ", ""),
    (r"\ban ``async with``", "a ``with``"),
    (r"\basync (def|with|for)\b", r"\1"),
    (r"\bawait ", ""),
    # ``(await self._send(call))["epoch"]`` needed its parentheses; the call does not.
    (r"\((self\.\w+\((?:[^()]|\([^()]*\))*\))\)(?=\[)", r"\1"),
    # An async generator cannot ``yield from``; a generator can.
    (r"^(\s+)for (\w+) in (\w+):\n\s+yield \2\n", r"\1yield from \3\n"),
]


def generate() -> str:
    text = SOURCE.read_text()
    text = HEADER + text[text.index('"""', 3) + 3 :]  # the module docstring is its own
    for pattern, replacement in RULES:
        text = re.sub(pattern, replacement, text, flags=re.MULTILINE)
    name = ["--stdin-filename", str(TARGET)]
    for step in (
        ["check", "--select", "I", "--fix", "--quiet", *name, "-"],
        ["format", *name, "-"],
    ):
        text = subprocess.run(  # noqa: S603 (our own ruff, a fixed argv)
            [str(RUFF), *step], input=text, capture_output=True, text=True, check=True
        ).stdout
    return text


def main(argv: list[str]) -> int:
    made = generate()
    if "--check" in argv:
        if TARGET.read_text() != made:
            print(f"{TARGET} is not generated from {SOURCE.name}: run `make sdk`", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(made)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
