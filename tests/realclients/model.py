"""A scripted model on 127.0.0.1: the only part of an agent CLI session that is not real.

Anthropic ``POST /v1/messages`` (streaming SSE, as Claude Code calls it) and the OpenAI
Responses API ``POST /v1/responses`` (streaming, as Codex calls it). The script is one
turn: the agent's first request gets a ``tool_use`` of ``Bash`` running :data:`COMMAND`
(or the model's own ``command``); once a request carries the ``tool_result``, a text
answer ends the turn. With ``subagent=True`` the turn's first request instead gets a
``tool_use`` of Claude Code's subagent tool (``Agent``, formerly ``Task``) asking for
:data:`SUBAGENT_PROMPT`; the subagent's own conversation then runs the Bash script above,
and the subagent's result ends the turn with text. Side requests
(a title, a quota probe: no ``Bash`` tool offered) get a short text. Every request body
is recorded, for failure messages.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

COMMAND = "echo hello > out.txt"
ANSWER = "Wrote hello to out.txt."
SIDE = "Scripted title"
SUBAGENT_PROMPT = "Subagent task: write hello to out.txt with Bash."
AGENT_TOOLS = ("Agent", "Task")  # Claude Code's subagent tool, by its current and old name


def _has_tool_result(body: dict[str, Any]) -> bool:
    for message in body.get("messages") or []:
        content = message.get("content")
        if isinstance(content, list) and any(
            isinstance(block, dict) and block.get("type") == "tool_result" for block in content
        ):
            return True
    return False


def _offers(body: dict[str, Any], name: str) -> bool:
    return any(isinstance(t, dict) and t.get("name") == name for t in body.get("tools") or [])


def _offers_bash(body: dict[str, Any]) -> bool:
    return _offers(body, "Bash")


def _agent_tool(body: dict[str, Any]) -> str | None:
    """The subagent tool to call: in the main conversation's first request of the turn
    (a subagent's conversation starts with :data:`SUBAGENT_PROMPT`), else None."""
    if _has_tool_result(body) or SUBAGENT_PROMPT in json.dumps(body.get("messages") or []):
        return None
    return next((name for name in AGENT_TOOLS if _offers(body, name)), None)


def tool_results(body: dict[str, Any]) -> list[str]:
    """The text of every ``tool_result`` block in a request (a string or text blocks)."""
    found: list[str] = []
    for message in body.get("messages") or []:
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            if not (isinstance(block, dict) and block.get("type") == "tool_result"):
                continue
            inner = block.get("content")
            if isinstance(inner, str):
                found.append(inner)
            elif isinstance(inner, list):
                found.append("".join(str(b.get("text", "")) for b in inner if isinstance(b, dict)))
    return found


def anthropic_events(
    body: dict[str, Any], n: int, command: str = COMMAND, subagent: bool = False
) -> Iterator[tuple[str, dict[str, Any]]]:
    """The SSE events answering one ``/v1/messages`` request."""
    agent = _agent_tool(body) if subagent else None
    tool = agent is not None or (_offers_bash(body) and not _has_tool_result(body))
    yield (
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": f"msg_scripted_{n}",
                "type": "message",
                "role": "assistant",
                "model": body.get("model", "scripted"),
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": 10, "output_tokens": 1},
            },
        },
    )
    if tool:
        name = agent or "Bash"
        block = {"type": "tool_use", "id": f"toolu_scripted_{n}", "name": name, "input": {}}
        args = {"command": command, "description": "Write to out.txt"}
        if agent is not None:
            args = {"description": "Write out.txt", "prompt": SUBAGENT_PROMPT,
                    "subagent_type": "general-purpose"}  # fmt: skip
        raw = json.dumps(args)
        deltas = [{"type": "input_json_delta", "partial_json": raw[i : i + 16]}
                  for i in range(0, len(raw), 16)]  # fmt: skip
    else:
        text = ANSWER if _has_tool_result(body) else SIDE
        block = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": text}]
    yield "content_block_start", {"type": "content_block_start", "index": 0, "content_block": block}
    for delta in deltas:
        yield "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}
    yield "content_block_stop", {"type": "content_block_stop", "index": 0}
    yield (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use" if tool else "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": 5},
        },
    )
    yield "message_stop", {"type": "message_stop"}


def responses_events(body: dict[str, Any], n: int) -> Iterator[tuple[str, dict[str, Any]]]:
    """The SSE events answering one ``/v1/responses`` request: a text answer."""
    rid, mid = f"resp_scripted_{n}", f"msg_scripted_{n}"
    item = {
        "type": "message",
        "role": "assistant",
        "id": mid,
        "status": "completed",
        "content": [{"type": "output_text", "text": ANSWER, "annotations": []}],
    }
    yield "response.created", {"type": "response.created", "response": {"id": rid}}
    yield (
        "response.output_item.added",
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {**item, "status": "in_progress", "content": []},
        },
    )
    yield (
        "response.output_text.delta",
        {
            "type": "response.output_text.delta",
            "item_id": mid,
            "output_index": 0,
            "content_index": 0,
            "delta": ANSWER,
        },
    )
    yield (
        "response.output_item.done",
        {
            "type": "response.output_item.done",
            "output_index": 0,
            "item": item,
        },
    )
    usage = {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 15,
    }
    yield (
        "response.completed",
        {
            "type": "response.completed",
            "response": {"id": rid, "status": "completed", "output": [item], "usage": usage},
        },
    )


class ScriptedModel:
    """``with ScriptedModel() as model:`` serves on ``model.url`` until the block ends."""

    def __init__(self, command: str = COMMAND, *, subagent: bool = False) -> None:
        self.command = command
        self.subagent = subagent
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.lock = threading.Lock()
        model = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                self._json(404, {"error": {"type": "not_found", "message": self.path}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {}
                path = self.path.split("?", 1)[0]
                with model.lock:
                    model.requests.append((path, body))
                    n = len(model.requests)
                if path == "/v1/messages/count_tokens":
                    self._json(200, {"input_tokens": 10})
                elif path == "/v1/messages":
                    self._sse(anthropic_events(body, n, model.command, model.subagent))
                elif path == "/v1/responses":
                    self._sse(responses_events(body, n))
                else:
                    self._json(404, {"error": {"type": "not_found", "message": path}})

            def _json(self, status: int, doc: dict[str, Any]) -> None:
                data = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _sse(self, events: Iterator[tuple[str, dict[str, Any]]]) -> None:
                data = b"".join(
                    f"event: {name}\ndata: {json.dumps(doc)}\n\n".encode() for name, doc in events
                )
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> ScriptedModel:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def paths(self) -> list[str]:
        with self.lock:
            return [path for path, _ in self.requests]

    def tool_results(self) -> list[str]:
        """The tool results the agent sent back, in order (see :func:`tool_results`)."""
        with self.lock:
            bodies = [body for path, body in self.requests if path == "/v1/messages"]
        return [text for body in bodies for text in tool_results(body)]
