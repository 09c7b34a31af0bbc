"""One Python interpreter for a chain of doc blocks (tests/acceptance/test_docs_run.py).

Run as a script by the checkout's venv python, never imported. It reads one JSON request
per line from stdin (``path``, ``line``, ``code``, ``out``), runs the code in one shared
``__main__`` namespace (so a ``docs-test: continue`` block sees the names of the block
before), with stdout and stderr (file descriptors 1 and 2, so child processes too) going
to ``out``, and answers one JSON line ``{"ok": bool, "error": str}`` on its original
stdout. Blocks read /dev/null, never the requests. The code is compiled under the
Markdown file's path with its real line numbers, so a traceback points into the doc.
"""

from __future__ import annotations

import json
import os
import sys
import traceback


def main() -> None:
    requests = os.fdopen(os.dup(0), "r")
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    namespace: dict[str, object] = {"__name__": "__main__", "__builtins__": __builtins__}
    for line in requests:
        request = json.loads(line)
        out = os.open(request["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
        ok, error = True, ""
        try:
            code = compile("\n" * request["line"] + request["code"], request["path"], "exec")
            exec(code, namespace)  # noqa: S102 - running the docs is the point
        except SystemExit as stop:
            if stop.code not in (None, 0):
                ok, error = False, f"SystemExit({stop.code!r})"
        except BaseException:  # every failure is the block's, reported whole
            ok, error = False, traceback.format_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        replies.write(json.dumps({"ok": ok, "error": error}) + "\n")


if __name__ == "__main__":
    main()
