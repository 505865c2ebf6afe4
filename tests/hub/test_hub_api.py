"""The hub's API without a backend to reach (quick; part of `make test`): validation that names
the field, the admin and session tokens, the OpenAPI document, a backend that is down, the
store, the viewer links' signatures and the view-only filter of the RFB stream."""

from __future__ import annotations

import struct
import time

import pytest

from runtime.hub.errors import BackendUnavailable
from runtime.hub.service import HubSettings, SessionHub
from runtime.hub.store import SessionRecord, Store
from runtime.hub.viewer import RfbInputFilter

DOWN = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}


@pytest.fixture(scope="module")
def down_hub(tmp_path_factory):
    from tests.hub.conftest import HubProcess

    hub = HubProcess(tmp_path_factory.mktemp("hub"), "admin-token", env=DOWN)
    yield hub
    hub.stop()


def test_the_control_api_needs_the_admin_token(down_hub):
    """Whoever lacks the admin token can neither list nor create sessions."""
    for token in ("", "wrong"):
        r = down_hub.api("GET", "/v1/sessions", token=token)
        assert r.status_code == 401, r.text
        assert "admin token" in r.json()["error"]["message"]
        assert down_hub.api("POST", "/v1/sessions", token=token, json={}).status_code == 401
    assert down_hub.api("GET", "/v1/sessions").status_code == 200


def test_unknown_fields_are_refused_by_name_with_the_allowed_ones(down_hub):
    """A typo in a field is named, with the fields that exist, before anything happens."""
    r = down_hub.api("POST", "/v1/sessions", json={"idle_timeout": 30})
    assert r.status_code == 422
    error = r.json()["error"]
    assert error["field"] == "idle_timeout" and "unknown field 'idle_timeout'" in error["message"]
    assert "idle_timeout_s" in error["fix"]
    r = down_hub.api("POST", "/v1/sessions", json={"resources": {"memory": 1024}})
    assert r.json()["error"]["field"] == "resources.memory" and "memory_mb" in r.json()["error"]["fix"]
    r = down_hub.api("POST", "/v1/sessions", json={"ttl_s": -5})
    assert r.status_code == 422 and r.json()["error"]["field"] == "ttl_s"
    r = down_hub.api("POST", "/v1/sessions", content=b"{not json")
    assert r.status_code == 422 and "not JSON" in r.json()["error"]["message"]
    r = down_hub.api("GET", "/v1/sessions?colour=red")
    assert r.status_code == 422 and r.json()["error"]["field"] == "colour"


def test_a_limit_is_refused_naming_it(down_hub):
    """Resources over the hub's per-session limits are refused with the option that raises them."""
    r = down_hub.api("POST", "/v1/sessions", json={"resources": {"cpus": 32}})
    assert r.status_code == 429
    error = r.json()["error"]
    assert error["limit"] == "max_cpus" and "--max-cpus" in error["fix"]


def test_a_backend_that_is_down_is_a_clear_error_and_nothing_is_written(down_hub):
    """With no Docker engine, a create says so and how to fix it, and leaves no session behind."""
    r = down_hub.api("POST", "/v1/sessions", json={"metadata": {"team": "web"}})
    assert r.status_code == 503, r.text
    error = r.json()["error"]
    assert error["code"] == "backend_unavailable"
    assert "dockerd" in error["fix"] and "nothing was changed" in error["message"]
    assert down_hub.api("GET", "/v1/sessions").json() == {"sessions": []}
    assert down_hub.api("GET", "/healthz").json()["backend_up"] is False


def test_nonexistent_sessions_are_named_for_every_action(down_hub):
    """An unknown id gets 404 and the way to find real ids, whatever the action."""
    for method, path in (("GET", ""), ("POST", "/pause"), ("POST", "/sleep"), ("POST", "/wake"), ("DELETE", "")):
        r = down_hub.api(method, f"/v1/sessions/0123456789ab{path}")
        assert r.status_code == 404, (path, r.text)
        assert "codedesk session list" in r.json()["error"]["fix"]
    r = down_hub.api("POST", "/v1/sessions/0123456789ab/mcp", token="anything", json={})
    assert r.status_code == 404


def test_the_openapi_document_describes_the_api_from_its_models(down_hub):
    """/v1/openapi.json is served without a token and carries the request models' own schemas."""
    r = down_hub.api("GET", "/v1/openapi.json", token="")
    assert r.status_code == 200
    doc = r.json()
    assert doc["openapi"].startswith("3.")
    for path in ("/v1/sessions", "/v1/sessions/{id}", "/v1/sessions/{id}/pause", "/v1/sessions/{id}/sleep",
                 "/v1/sessions/{id}/wake", "/v1/sessions/{id}/viewer-links", "/v1/sessions/{id}/mcp"):
        assert path in doc["paths"], path
    create = doc["components"]["schemas"]["CreateSession"]
    assert create["additionalProperties"] is False
    assert set(create["properties"]) == {"image", "resources", "egress", "idle_timeout_s", "ttl_s", "metadata"}


def test_the_store_keeps_sessions_in_wal_mode_across_reopening(tmp_path):
    """The state survives the process: WAL journal, the record read back whole."""
    store = Store(tmp_path)
    rec = SessionRecord(id="0123456789ab", state="running", image="codedesk:latest", resources={"cpus": 1.0},
                        idle_timeout_s=30, ttl_s=None, metadata={"team": "web"}, token_hash="h",
                        runtime_token="t", backend_ref={"container": "c"}, created_at=1.0, claimed_at=1.0,
                        last_activity=2.0, state_since=2.0)
    store.insert(rec)
    store.event(rec.id, "running", "test")
    store.close()
    again = Store(tmp_path)
    assert again._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert again.get(rec.id) == rec
    assert again.events(rec.id)[0]["event"] == "running"
    assert oct((tmp_path / "hub.sqlite3").stat().st_mode & 0o777) == "0o600"
    again.close()


class _NoBackend:
    name = "none"

    def __getattr__(self, name):
        def down(*args):
            raise BackendUnavailable("down", "start it")
        return down


def test_viewer_links_are_signed_expire_and_can_be_revoked(tmp_path):
    """A link opens its session until it expires or is revoked; a forged or altered one never."""
    store = Store(tmp_path)
    hub = SessionHub(store, _NoBackend(), HubSettings(public_url="http://hub"))
    now = time.time()
    rec = SessionRecord(id="0123456789ab", state="running", image="i", resources={}, idle_timeout_s=None,
                        ttl_s=None, metadata={}, token_hash="h", runtime_token="t", created_at=now,
                        claimed_at=now, last_activity=now, state_since=now)
    store.insert(rec)
    hub._records[rec.id] = rec
    link = hub.viewer_link(rec.id, "view", 60)
    token = link["url"].split("token=")[1].split("&")[0]
    assert "view_only=1" in link["url"]
    assert hub.check_link(token) == (rec, "view")
    link_id, expires, sig = token.split(".")
    for forged in (f"{link_id}.{int(expires) + 3600}.{sig}", f"{link_id}.{expires}.{'0' * 32}", "nonsense"):
        with pytest.raises(Exception, match="not valid|not a viewer link"):
            hub.check_link(forged)
    hub.revoke_link(rec.id, link["id"])
    with pytest.raises(Exception, match="revoked"):
        hub.check_link(token)
    short = hub.viewer_link(rec.id, "control", 1)["url"].split("token=")[1]
    time.sleep(1.1)
    with pytest.raises(Exception, match="expired"):
        hub.check_link(short)
    store.close()


def test_a_view_link_drops_every_input_message_of_the_rfb_stream():
    """Watching must not type: keys, pointer, clipboard and resize never reach the session."""
    gate = RfbInputFilter()
    assert gate.feed(b"RFB 003.008\n") == b""  # held until the server has spoken
    gate.saw_server(b"RFB 003.008\n")
    handshake = gate.feed(b"")
    assert handshake == b"RFB 003.008\n"
    assert gate.feed(b"\x01\x01") == b"\x01\x01"  # security type, ClientInit
    update = b"\x03\x00" + struct.pack(">HHHH", 0, 0, 1280, 800)
    encodings = b"\x02\x00" + struct.pack(">H", 2) + struct.pack(">ii", 0, -223)
    key = b"\x04\x01\x00\x00" + struct.pack(">I", 0x61)
    pointer = b"\x05\x01" + struct.pack(">HH", 10, 10)
    cut = b"\x06\x00\x00\x00" + struct.pack(">i", 3) + b"abc"
    resize = b"\xfb\x00" + struct.pack(">HH", 800, 600) + b"\x01\x00" + b"\x00" * 16
    stream = encodings + key + update + pointer + cut + resize + update
    # Delivered in awkward pieces, as websockets may.
    out = b"".join(gate.feed(stream[i:i + 5]) for i in range(0, len(stream), 5))
    assert out == encodings + update + update
