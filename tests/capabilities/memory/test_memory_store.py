"""The memory tools: remember, recall (ranked), get, forget, list, across a restart of the
server, and the hostile inputs a script may send."""

from __future__ import annotations

from capabilities.memory.server import open_state

from .conftest import calling, error, ok

CORPUS = {
    "garden": "The garden needs watering every morning; tomatoes and basil grow by the fence.",
    "deploy": "Deploy with make release; the deploy key is in the vault under ops/deploy-key.",
    "lunch": "Lunch on Fridays is at the Thai place on the corner.",
    "ci": "The CI pipeline runs the tests at night and deploys on success.",
    "printer": "The printer on floor 2 jams when given heavy paper.",
}


def remember_all(call, corpus=CORPUS, tags=None):
    for key, text in corpus.items():
        ok(call("remember", key=key, text=text, tags=(tags or {}).get(key, [])))


def test_best_match_ranks_first(call):
    """Recall is useful only if the entry that matches the question best comes first."""
    remember_all(call)
    found = ok(call("recall", query="where is the deploy key"))["results"]
    assert found[0]["key"] == "deploy"
    assert [r["score"] for r in found] == sorted((r["score"] for r in found), reverse=True)
    assert ok(call("recall", query="tomatoes basil"))["results"][0]["key"] == "garden"


def test_what_one_server_remembers_another_recalls(tmp_path, skills_dir):
    """Memory is on the session's disk: a restarted server (a new process's store) finds it."""
    first = open_state(tmp_path / "memory", [skills_dir])
    ok(calling(first)("remember", key="fact", text="The office wifi password is on the fridge", tags=["office"]))
    first.close()
    second = open_state(tmp_path / "memory", [skills_dir])
    try:
        found = ok(calling(second)("recall", query="wifi password"))["results"]
        assert found[0]["key"] == "fact" and found[0]["tags"] == ["office"]
    finally:
        second.close()


def test_same_key_replaces_and_new_keys_are_made(call):
    made = ok(call("remember", text="first"))
    assert made["key"].startswith("m-") and not made["replaced"]
    again = ok(call("remember", key=made["key"], text="second version"))
    assert again["replaced"]
    assert ok(call("get", key=made["key"]))["text"] == "second version"
    assert ok(call("recall", query="first"))["results"] == []


def test_tags_filter_recall_and_list(call):
    remember_all(call, tags={"deploy": ["ops"], "ci": ["ops", "night"], "garden": ["home"]})
    assert [r["key"] for r in ok(call("recall", query="deploy", tags=["ops", "night"]))["results"]] == ["ci"]
    listed = ok(call("list", tags=["ops"]))
    assert listed["total"] == 2 and {e["key"] for e in listed["entries"]} == {"deploy", "ci"}


def test_list_pages(call):
    remember_all(call)
    first = ok(call("list", limit=2))
    assert first["total"] == 5 and len(first["entries"]) == 2 and first["next_offset"] == 2
    last = ok(call("list", limit=2, offset=4))
    assert len(last["entries"]) == 1 and "next_offset" not in last


def test_forget(call):
    remember_all(call)
    ok(call("forget", key="lunch"))
    assert ok(call("recall", query="Thai lunch"))["results"] == []
    assert "no memory has the key 'lunch'" in error(call("forget", key="lunch"), "not_found")


def test_fts_query_syntax_is_read_as_words(call):
    """A query is never FTS5 syntax: operators, quotes, stars and column filters are words, so
    nothing errors confusingly and nothing matches what the words do not say."""
    remember_all(call)
    for query in ('"a" OR *', "NEAR(deploy", "text:deploy", '"', "*", "deploy AND", "^deploy", "-", "key) OR (1=1"):
        result = call("recall", query=query)
        assert not result.is_error, (query, result.content[0].text)
    assert ok(call("recall", query="text:deploy"))["results"][0]["key"] == "deploy"
    assert ok(call("recall", query='"a" OR *'))["results"] == []


def test_sql_ish_keys_are_plain_keys(call):
    remember_all(call)
    key = "x'); DROP TABLE entries; --"
    ok(call("remember", key=key, text="a key that looks like SQL"))
    assert ok(call("get", key=key))["text"] == "a key that looks like SQL"
    assert ok(call("list"))["total"] == 6
    ok(call("forget", key=key))
    assert ok(call("list"))["total"] == 5


def test_huge_texts_are_refused_whole_and_long_ones_recalled_in_part(call):
    """A text past the cap is refused with the cap named (nothing kept); a long one comes back
    cut in recall, and whole with get."""
    message = error(call("remember", key="huge", text="word " * 100_000), "invalid_arguments")
    assert "200,000-character cap" in message
    assert ok(call("list"))["total"] == 0
    long_text = "needle " + "hay " * 20_000
    ok(call("remember", key="long", text=long_text))
    found = ok(call("recall", query="needle"))["results"][0]
    assert found["truncated"] and len(found["text"]) == 10_000
    assert ok(call("get", key="long"))["text"] == long_text


def test_an_unusable_store_says_what_to_do(tmp_path, skills_dir):
    blocker = tmp_path / "memory"
    blocker.write_text("not a folder")
    state = open_state(blocker, [skills_dir])
    message = error(calling(state)("recall", query="x"), "unavailable")
    assert "codedesk desktop up" in message
    assert not calling(state)("skills_list").is_error  # skills still work
