"""HttpJsonReader against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote, unquote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runbell.domain.errors import ReaderError, ValidationFailed
from runbell.ingress.readers import (
    MAX_BODY_BYTES,
    HttpJsonReader,
    Observed,
    StateReader,
    StaticReader,
    reader_from_config,
)
from tests.timeouts import WAIT

TOKEN = "Bearer sk-live-7f3c9e-never-show-me"


@dataclass
class Peer:
    """What the local runtime answers per raw request path, and what it was asked."""

    base: str
    routes: dict[str, tuple[int, dict[str, str], bytes]] = field(default_factory=dict)
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)

    def json(self, path: str, document: object, status: int = 200) -> None:
        body = json.dumps(document).encode()
        self.routes[path] = (status, {"Content-Type": "application/json"}, body)

    def raw(self, path: str, status: int, body: bytes, headers: dict[str, str] | None = None):
        self.routes[path] = (status, headers or {}, body)

    @property
    def paths(self) -> list[str]:
        return [path for path, _ in self.requests]


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[ThreadingHTTPServer, Peer]]:
    peer_holder: dict[str, Peer] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            peer = peer_holder["peer"]
            peer.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
            status, headers, body = peer.routes.get(
                self.path, (404, {"Content-Type": "application/json"}, b'{"error":"nope"}')
            )
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    host, port = httpd.server_address[:2]
    peer_holder["peer"] = Peer(base=f"http://{host}:{port}")
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd, peer_holder["peer"]
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=WAIT)


@pytest.fixture
def peer(server) -> Peer:
    _, shared = server
    shared.routes.clear()
    shared.requests.clear()
    return shared


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(trust_env=False, follow_redirects=False, timeout=WAIT) as plain:
        yield plain


def make_reader(client: httpx.Client, peer: Peer, **kwargs) -> HttpJsonReader:
    kwargs.setdefault("headers", {"Authorization": TOKEN})
    return HttpJsonReader(client, peer.base + "/runs/{run_id}", **kwargs)


def test_reads_state_and_sequence(client, peer):
    peer.json("/runs/run-1", {"state": "working", "sequence": 7})
    reader = make_reader(client, peer)
    assert reader.read("run-1") == Observed(state="working", sequence=7)
    assert isinstance(reader, StateReader)


def test_sends_configured_headers(client, peer):
    peer.json("/runs/run-1", {"state": "completed"})
    make_reader(client, peer).read("run-1")
    (path, headers) = peer.requests[0]
    assert path == "/runs/run-1"
    assert headers["authorization"] == TOKEN


def test_missing_sequence_is_none(client, peer):
    peer.json("/runs/run-1", {"state": "queued"})
    assert make_reader(client, peer).read("run-1") == Observed("queued", None)


def test_state_map_and_dotted_fields(client, peer):
    peer.json(
        "/runs/resp_1",
        {"data": {"status": "in_progress", "meta": {"seq": "41"}}, "state": "bogus"},
    )
    reader = make_reader(
        client,
        peer,
        state_field="data.status",
        sequence_field="data.meta.seq",
        state_map={"in_progress": "working", "completed": "completed"},
    )
    assert reader.read("resp_1") == Observed(state="working", sequence=41)


def test_unmapped_status_that_already_is_a_runbell_state_passes_through(client, peer):
    peer.json("/runs/r", {"state": "failed"})
    reader = make_reader(client, peer, state_map={"in_progress": "working"})
    assert reader.read("r").state == "failed"


def test_dotted_path_can_index_lists(client, peer):
    peer.json("/runs/r", {"items": [{"status": "done"}]})
    reader = make_reader(
        client, peer, state_field="items.0.status", state_map={"done": "completed"}
    )
    assert reader.read("r") == Observed("completed", None)


@pytest.mark.parametrize(
    ("run_id", "path"),
    [
        ("team/alpha/run 1", "/runs/team%2Falpha%2Frun%201"),
        ("a?b#c&d", "/runs/a%3Fb%23c%26d"),
        ("..%2F", "/runs/..%252F"),
    ],
)
def test_run_ids_are_quoted(client, peer, run_id, path):
    peer.json(path, {"state": "completed", "sequence": 1})
    assert make_reader(client, peer).read(run_id) == Observed("completed", 1)
    assert peer.paths == [path]


@pytest.mark.parametrize("run_id", ["", ".", ".."])
def test_dot_segment_run_ids_are_refused_without_a_request(client, peer, run_id):
    with pytest.raises(ReaderError, match="cannot be placed in a URL"):
        make_reader(client, peer).read(run_id)
    assert peer.requests == []


def test_server_error_is_reader_error(client, peer):
    peer.json("/runs/r", {"state": "completed"}, status=500)
    with pytest.raises(ReaderError, match="HTTP 500"):
        make_reader(client, peer).read("r")


def test_404_is_reader_error(client, peer):
    with pytest.raises(ReaderError, match="HTTP 404"):
        make_reader(client, peer).read("unknown")


@pytest.mark.parametrize("follow", [False, True])
def test_redirect_is_reader_error_and_not_followed(peer, follow):
    peer.raw("/runs/r", 302, b"", {"Location": "/elsewhere/r"})
    peer.json("/elsewhere/r", {"state": "completed"})
    # Even a client configured to follow redirects must not follow them here.
    with (
        httpx.Client(trust_env=False, follow_redirects=follow, timeout=WAIT) as client,
        pytest.raises(ReaderError, match=r"HTTP 302.*redirects are not followed"),
    ):
        make_reader(client, peer).read("r")
    assert peer.paths == ["/runs/r"]


def test_non_json_is_reader_error(client, peer):
    peer.raw("/runs/r", 200, b"<html>maintenance</html>", {"Content-Type": "text/html"})
    with pytest.raises(ReaderError, match="non-JSON"):
        make_reader(client, peer).read("r")


def test_missing_state_field_is_reader_error(client, peer):
    peer.json("/runs/r", {"data": {"other": 1}})
    with pytest.raises(ReaderError, match=r"'data\.status' is missing"):
        make_reader(client, peer, state_field="data.status").read("r")


def test_non_string_state_is_reader_error(client, peer):
    peer.json("/runs/r", {"state": 3})
    with pytest.raises(ReaderError, match="not a string"):
        make_reader(client, peer).read("r")


def test_unknown_state_after_mapping_is_reader_error(client, peer):
    peer.json("/runs/r", {"state": "in_progress"})
    with pytest.raises(ReaderError, match=r"'in_progress'.*not a Runbell state"):
        make_reader(client, peer, state_map={"queued_up": "queued"}).read("r")


@pytest.mark.parametrize("sequence", [-1, 1.5, "x1", True, {"n": 1}])
def test_bad_sequence_is_reader_error(client, peer, sequence):
    peer.json("/runs/r", {"state": "working", "sequence": sequence})
    with pytest.raises(ReaderError, match="sequence"):
        make_reader(client, peer).read("r")


def test_oversized_answer_is_reader_error(client, peer):
    peer.raw("/runs/r", 200, b" " * (MAX_BODY_BYTES + 1) + b'{"state":"completed"}')
    with pytest.raises(ReaderError, match="exceeds"):
        make_reader(client, peer).read("r")


def test_network_error_is_reader_error(client):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    reader = HttpJsonReader(
        client, f"http://127.0.0.1:{closed_port}/runs/{{run_id}}", headers={"Authorization": TOKEN}
    )
    with pytest.raises(ReaderError, match="ConnectError") as info:
        reader.read("r")
    assert TOKEN not in str(info.value)


def test_error_details_never_contain_header_values(client, peer):
    secret_part = TOKEN.split()[1]
    peer.json("/runs/a", {"state": "completed"}, status=500)
    peer.raw("/runs/b", 302, b"", {"Location": "/x"})
    peer.raw("/runs/c", 200, b"not json")
    peer.json("/runs/d", {"nothing": True})
    peer.json("/runs/e", {"state": "weird"})
    reader = make_reader(client, peer)
    for run_id in "abcde":
        with pytest.raises(ReaderError) as info:
            reader.read(run_id)
        error = info.value
        for text in (error.detail, str(error), repr(error), repr(error.extra)):
            assert secret_part not in text
    assert secret_part not in repr(reader)
    assert all(headers["authorization"] == TOKEN for _, headers in peer.requests)


def test_error_details_leave_out_the_query_string(client, peer):
    reader = HttpJsonReader(client, peer.base + "/runs/{run_id}?api_key=k-secret-123")
    with pytest.raises(ReaderError) as info:
        reader.read("r")
    assert "k-secret-123" not in info.value.detail
    assert "/runs/r" in info.value.detail


@settings(
    max_examples=40,
    deadline=None,  # I/O: an HTTP peer
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(run_id=st.text(min_size=1).filter(lambda s: s not in {".", ".."}))
def test_any_run_id_reaches_its_own_path(client, peer, run_id):
    path = "/runs/" + quote(run_id, safe="")
    peer.json(path, {"state": "working"})
    peer.requests.clear()
    assert make_reader(client, peer).read(run_id) == Observed("working", None)
    (requested,) = peer.paths
    assert unquote(requested.removeprefix("/runs/")) == run_id


def test_reader_from_config(client, peer):
    peer.json("/runs/r", {"data": {"status": "in_progress", "n": 3}})
    reader = reader_from_config(
        {
            "type": "http_json",
            "url_template": peer.base + "/runs/{run_id}",
            "state_field": "data.status",
            "sequence_field": "data.n",
            "state_map": {"in_progress": "working"},
            "headers": {"Authorization": TOKEN},
            "timeout": 2,
        },
        client,
    )
    assert reader.read("r") == Observed("working", 3)
    assert peer.requests[0][1]["authorization"] == TOKEN


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"url_template": "http://h/runs/{run_id}"}, "type"),
        ({"type": "grpc", "url_template": "http://h/runs/{run_id}"}, "type"),
        ({"type": "http_json"}, "url_template"),
        ({"type": "http_json", "url_template": 5}, "url_template"),
        ({"type": "http_json", "url_template": "http://h/runs/"}, "url_template"),
        ({"type": "http_json", "url_template": "ftp://h/{run_id}"}, "url_template"),
        ({"type": "http_json", "url_template": "/runs/{run_id}"}, "url_template"),
        ({"type": "http_json", "url_template": "http://u:p@h/{run_id}"}, "url_template"),
        ({"type": "http_json", "url_template": "https://{run_id}.h.example/"}, "url_template"),
        ({"type": "http_json", "url_template": "https://h.example:{run_id}/"}, "url_template"),
        ({"type": "http_json", "url_template": "https://{run_id}@h.example/"}, "url_template"),
        ({"type": "http_json", "url_template": "https://h.example/#{run_id}"}, "url_template"),
        (
            {"type": "http_json", "url_template": "http://h/{run_id}", "state_feild": "x"},
            "state_feild",
        ),
        (
            {"type": "http_json", "url_template": "http://h/{run_id}", "state_field": ""},
            "state_field",
        ),
        (
            {"type": "http_json", "url_template": "http://h/{run_id}", "state_field": "a..b"},
            "state_field",
        ),
        (
            {"type": "http_json", "url_template": "http://h/{run_id}", "sequence_field": 1},
            "sequence_field",
        ),
        ({"type": "http_json", "url_template": "http://h/{run_id}", "state_map": []}, "state_map"),
        (
            {"type": "http_json", "url_template": "http://h/{run_id}", "state_map": {"ok": "done"}},
            "state_map.ok",
        ),
        ({"type": "http_json", "url_template": "http://h/{run_id}", "headers": "x"}, "headers"),
        (
            {"type": "http_json", "url_template": "http://h/{run_id}", "headers": {"X-K": 1}},
            "headers.X-K",
        ),
        (
            {"type": "http_json", "url_template": "http://h/{run_id}", "headers": {"X-K": "a\nb"}},
            "headers.X-K",
        ),
        ({"type": "http_json", "url_template": "http://h/{run_id}", "timeout": 0}, "timeout"),
        ({"type": "http_json", "url_template": "http://h/{run_id}", "timeout": "5"}, "timeout"),
    ],
)
def test_reader_from_config_rejects_bad_config(client, config, field):
    with pytest.raises(ValidationFailed) as info:
        reader_from_config(config, client)
    assert info.value.extra["field"] == field


def test_bad_header_value_is_not_echoed(client):
    config = {
        "type": "http_json",
        "url_template": "http://h/{run_id}",
        "headers": {"Authorization": "Bearer tok\r\nX-Evil: 1"},
    }
    with pytest.raises(ValidationFailed) as info:
        reader_from_config(config, client)
    assert "tok" not in info.value.detail


def test_static_reader():
    reader = StaticReader({"a": Observed("queued", None)})
    assert isinstance(reader, StateReader)
    assert reader.read("a") == Observed("queued", None)
    reader.set("a", "completed", 4)
    assert reader.read("a") == Observed("completed", 4)
    with pytest.raises(ReaderError, match="no state known"):
        reader.read("b")
    reader.forget("a")
    with pytest.raises(ReaderError):
        reader.read("a")
    with pytest.raises(ValidationFailed):
        reader.set("a", "done", 1)
