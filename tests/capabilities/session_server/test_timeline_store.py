"""The timeline's store on its own: redaction, the append-only record, the merged reading, the
folder it refuses, and replay's comparison rules."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import time

import pytest

from capabilities.session_server.redaction import REDACTED, Redactor, session_secrets
from capabilities.session_server.replay_rules import compare
from capabilities.session_server.store import (
    DB_NAME, Event, TimelineReader, TimelineUnavailable, TimelineWriter, open_folder,
)

PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")


@pytest.fixture
def writer(tmp_path):
    w = TimelineWriter(tmp_path / "timeline", Redactor(["the-http-token-123"]))
    yield w
    w.close()


def test_secret_fields_and_known_secrets_are_redacted_everywhere():
    """A password field's value, once seen, is hidden in every later text, and so is the token."""
    redactor = Redactor(session_secrets({"CODEDESK_TOKEN": "tok-abcdef", "CODEDESK_OTHER": "plain"}))
    args = redactor.value({"user": "ada", "password": "hunter22", "headers": {"Authorization": "Bearer x"},
                           "note": "tok-abcdef here"})
    assert args == {"user": "ada", "password": REDACTED, "headers": {"Authorization": REDACTED},
                    "note": f"{REDACTED} here"}
    assert redactor.text("echo hunter22 and plain") == f"echo {REDACTED} and plain"


def test_a_value_is_walked_only_when_its_text_may_hold_a_secret():
    """Most results hold no secret and come back as they are (one pass over their JSON text in C,
    not a walk in Python); a known secret that JSON writes escaped is still found by the walk."""
    redactor = Redactor(["tok-abcdef"])
    plain = {"steps": [{"url": "http://x/", "text": "hello"}], "n": 3}
    assert redactor.value(plain) is plain
    assert redactor.value({"deep": [{"k": "x tok-abcdef y"}]}) == {"deep": [{"k": f"x {REDACTED} y"}]}
    assert redactor.value({"a": {"api_key": "k-1"}}) == {"a": {"api_key": REDACTED}}
    quoted = Redactor(['pa"ss\\word'])
    assert quoted.value({"echo": 'said pa"ss\\word'}) == {"echo": f"said {REDACTED}"}


def test_every_name_the_secret_field_pattern_matches_holds_one_of_the_quick_check_words():
    """The quick check (`_FIELD_WORDS`) stands in for SECRET_FIELD on a whole text: a name the
    pattern matches without any of the words would skip the walk and leak."""
    from capabilities.session_server.redaction import _FIELD_WORDS, SECRET_FIELD

    names = ["token", "X-Auth-Token", "password", "passwd", "passphrase", "secret", "client_secret",
             "Authorization", "authorisation", "api_key", "api-key", "apikey", "X-API-KEY", "access_key",
             "accessKey", "private_key", "privatekey", "Cookie", "Set-Cookie", "credentials", "session_id",
             "sessionid", "bearer"]
    for name in names:
        assert SECRET_FIELD.search(name), name
        assert any(word in name.lower() for word in _FIELD_WORDS), name
    alternatives = SECRET_FIELD.pattern.split("|")
    assert len(alternatives) == 13, "SECRET_FIELD changed: add its new names here and to _FIELD_WORDS"


def test_a_secret_field_spelt_with_letters_that_only_match_ignoring_case_is_walked():
    """SECRET_FIELD ignores case the way `re` does, where the long s matches "s", the Kelvin sign
    "k" and the dotless i "i"; `lower()` keeps them apart. A field so spelt is still redacted, and
    the quick check's folds are exactly the letters `re` matches so."""
    from capabilities.session_server.redaction import _IGNORECASE_FOLDS

    every = "".join(map(chr, range(0x80, 0x110000)))
    matched = {ord(c): letter for letter in "abcdefghijklmnopqrstuvwxyz"
               for c in re.findall(letter, every, re.IGNORECASE)}
    assert {k: v for k, v in _IGNORECASE_FOLDS.items() if v} == matched
    redactor = Redactor()
    for name in ("pa\u017f\u017fword", "\u017fecret", "ap\u0131_key", "ap\u0130_key", "to\u212aen"):
        assert redactor.value({"form": {name: "hunter22"}}) == {"form": {name: REDACTED}}, name


def test_secret_literals_in_a_script_are_redacted():
    """A script writing a password beside its field name keeps it out of the record."""
    redactor = Redactor()
    js = redactor.script('await mcp.callTool("x", "y", {password: "s3cret-pw", user: "ada"})')
    py = redactor.script('tools.x.y(api_key="k-12345", user="ada")')
    assert "s3cret-pw" not in js and "ada" in js
    assert "k-12345" not in py and "ada" in py
    assert redactor.text("page says s3cret-pw") == f"page says {REDACTED}"


def test_the_record_is_append_only_and_read_merged(writer, tmp_path):
    """A call and its answer read as one entry; the database refuses changes to what is written."""
    now = time.time()
    writer.write([
        Event(now, "r1", 0, "run_start", detail={"language": "js", "script": "1"}),
        Event(now, "r1", 1, "call", "browser", "browser_execute", arguments={"token": "abcd1234"}),
        Event(now, "r1", 1, "result", "browser", "browser_execute", duration_ms=3.0, result={
            "content": [{"type": "text", "text": "ok abcd1234"}, {"type": "image", "data": PNG, "mimeType": "image/png"}],
            "isError": False, "structuredContent": {"url": "http://x/"}}),
    ])
    writer.write([Event(now, "r1", 2, "call", "exec", "run", arguments={"bin": "true"})])
    with TimelineReader(tmp_path / "timeline") as reader:
        entries = reader.entries(run="r1")
        assert [(e["kind"], e["seq"], e.get("status")) for e in entries] == [
            ("run_start", 0, None), ("call", 1, "ok"), ("call", 2, "pending")]
        call = entries[1]
        assert call["arguments"] == {"token": REDACTED}
        assert "abcd1234" not in call["result"]["content"][0]["text"]
        assert call["screenshots"] == ["shots/r1-1-1.png.b64"]
        assert reader.image(call["screenshots"][0]).startswith(b"\x89PNG")
    db = sqlite3.connect(tmp_path / "timeline" / DB_NAME)
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        db.execute("UPDATE events SET tool = 'x'")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        db.execute("DELETE FROM events")
    db.close()
    assert os.stat(tmp_path / "timeline").st_mode & 0o777 == 0o700


def test_what_is_stored_is_the_json_of_each_value_redacted_and_a_runs_summary_is_its_own_column(writer, tmp_path):
    """The writer keeps the JSON text its check for secrets wrote (`Redactor.value_and_json`)
    when nothing was redacted: the stored text is the value's, or the redacted copy's, and a
    run_end's summary goes to its column, not into its detail."""
    now = time.time()
    plain_args = {"text": "héllo", "n": [1, 2.5, None, True]}
    plain_result = {"content": [{"type": "text", "text": "x"}], "structuredContent": {"text": "x"}, "isError": False}
    writer.write([
        Event(now, "r2", 1, "call", "test", "echo", arguments=plain_args, detail={"line": 3}),
        Event(now, "r2", 1, "result", "test", "echo", result=plain_result, duration_ms=1.0),
        Event(now, "r2", 2, "call", "test", "echo", arguments={"password": "s3cr3t-pw", "text": "s3cr3t-pw too"}),
        Event(now, "r2", 0, "run_end", detail={"outcome": "ok", "calls": 2, "summary": "42"}),
    ])
    db = sqlite3.connect(tmp_path / "timeline" / DB_NAME)
    rows = db.execute("SELECT seq, kind, arguments, result, summary, detail FROM events WHERE run = 'r2' "
                      "ORDER BY id").fetchall()
    db.close()
    call, answer, secret_call, end = rows
    args1, detail1, result2, args3 = call[2], call[5], answer[3], secret_call[2]
    summary4, detail4 = end[4], end[5]
    assert args1 == json.dumps(plain_args, ensure_ascii=False)
    assert json.loads(detail1) == {"line": 3}
    assert result2 == json.dumps(plain_result, ensure_ascii=False)
    assert json.loads(args3) == {"password": REDACTED, "text": f"{REDACTED} too"}
    assert summary4 == "42"
    assert json.loads(detail4) == {"outcome": "ok", "calls": 2}


def test_a_screenshot_is_read_back_as_nothing_but_base64(writer, tmp_path):
    """Screenshots are kept as the base64 text the server sent and checked when read: a hostile
    server's "image" that would break out of the export's `data:` URL is never read back as it
    came, wrapped base64 reads back clean, and a file saved as bytes (an older timeline) reads too."""
    wrapped = "\n".join(PNG[i:i + 20] for i in range(0, len(PNG), 20))
    images = [PNG, "AAAA' onerror='alert(1)", "AAAA'><script>x</script>", wrapped, "donn\u00e9es"]
    writer.write([Event(time.time(), "r2", 1, "call", "browser", "browser_execute", arguments={}),
                  Event(time.time(), "r2", 1, "result", "browser", "browser_execute", result={
                      "content": [{"type": "image", "data": data, "mimeType": "image/png"} for data in images]})])
    (tmp_path / "timeline" / "shots" / "old-1-1.png").write_bytes(b"\x89PNG old")
    with TimelineReader(tmp_path / "timeline") as reader:
        shots = reader.entries(run="r2")[0]["screenshots"]
        assert len(shots) == 4  # the non-ASCII one is not kept
        read = [reader.image_base64(path) for path in shots]
        assert read[0] == PNG and read[3] == PNG
        for text in read:
            assert text is None or set(text) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")
        assert reader.image("shots/old-1-1.png") == b"\x89PNG old"
        assert reader.image("shots/../timeline.db") is None


def test_a_linked_or_shared_timeline_folder_is_refused(tmp_path):
    """The runtime never writes through a link or into a folder others may write."""
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "linked").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(TimelineUnavailable):
        open_folder(tmp_path / "linked", create=True)
    (tmp_path / "shared").mkdir(mode=0o777)
    os.chmod(tmp_path / "shared", 0o777)
    with pytest.raises(TimelineUnavailable, match="not this user's own"):
        open_folder(tmp_path / "shared", create=True)


def test_replay_rules_name_the_step_and_the_change():
    """A replayed answer is compared by status, then by what the step found (URL, text)."""
    recorded = {"status": "ok", "result": {"structuredContent": {"results": [
        {"operation": "navigate", "result": {"url": "http://x/a", "title": "A"}},
        {"operation": "getText", "result": {"text": "Hello  Ada"}}]}}}
    same = {"isError": False, "structuredContent": {"results": [
        {"operation": "navigate", "result": {"url": "http://x/a", "title": "A"}},
        {"operation": "getText", "result": {"text": "Hello Ada"}}]}}
    assert compare("browser", "browser_execute", recorded, same) is None
    changed = {"isError": False, "structuredContent": {"results": [
        {"operation": "navigate", "result": {"url": "http://x/a", "title": "A"}},
        {"operation": "getText", "result": {"text": "Goodbye"}}]}}
    reason = compare("browser", "browser_execute", recorded, changed)
    assert reason is not None and reason.startswith("step 2:") and "Goodbye" in reason
    failed = {"isError": True, "structuredContent": {"error": {"kind": "not_found", "message": "no #name", "step": 2}}}
    assert "failed now" in compare("browser", "browser_execute", recorded, failed)
