"""The memory family: `remember`, `recall` (full-text, bm25-ranked), `get`, `forget`, `list`."""

from __future__ import annotations

from pydantic import Field, field_validator

from capabilities.contract import OutputModel

from .errors import TooLarge
from .store import Entry
from .tooling import WRITES, Args, MemoryState, memory_tool

MAX_TEXT_CHARS = 200_000
RECALL_TEXT_CHARS = 10_000
PREVIEW_CHARS = 200
KEY_DOC = "The entry's key: any text up to 200 characters."
TAGS_DOC = "Tags to file it under (each up to 64 characters)."



class RememberArgs(Args):
    text: str = Field(min_length=1, description=f"What to remember (up to {MAX_TEXT_CHARS:,} characters).")
    key: str | None = Field(None, min_length=1, max_length=200, description=(
        KEY_DOC + " An entry with the same key is replaced; without one a new key is made."))
    tags: list[str] = Field(default_factory=list, max_length=32, description=TAGS_DOC)

    @field_validator("tags")
    @classmethod
    def _tags(cls, tags: list[str]) -> list[str]:
        return _clean_tags(tags)


def _clean_tags(tags: list[str]) -> list[str]:
    cleaned = [tag.strip() for tag in tags]
    if any(not tag or len(tag) > 64 for tag in cleaned):
        raise ValueError("each tag must have 1 to 64 characters")
    return cleaned


class RememberOutput(OutputModel):
    key: str = Field(description="The entry's key (recall it, forget it by this).")
    replaced: bool = Field(description="Whether an entry with this key was replaced.")
    tags: list[str]
    chars: int = Field(description="The length of the text kept.")


def remember(state: MemoryState, args: RememberArgs) -> tuple[RememberOutput, str]:
    if len(args.text) > MAX_TEXT_CHARS:
        raise TooLarge(f"the text is {len(args.text):,} characters, past the {MAX_TEXT_CHARS:,}-character cap "
                       "of one memory; nothing was kept", field="text",
                       hint="keep a summary, or split it into several entries; files belong on disk (exec, documents)")
    entry, replaced = state.require_store().remember(args.text, args.key, args.tags)
    return (RememberOutput(key=entry.key, replaced=replaced, tags=entry.tags, chars=len(entry.text)),
            f"{'replaced' if replaced else 'remembered'} {entry.key!r} ({len(entry.text):,} characters)")


class RecallArgs(Args):
    query: str = Field(min_length=1, max_length=2000, description=(
        "Words to look for (in the texts, tags and keys); the entries with the most matching, rarest words come "
        "first. Plain words: quotes, OR, * and other search syntax are read as words."))
    tags: list[str] = Field(default_factory=list, max_length=32, description="Only entries having all these tags.")
    limit: int = Field(5, ge=1, le=50, description="At most this many entries.")

    @field_validator("tags")
    @classmethod
    def _tags(cls, tags: list[str]) -> list[str]:
        return _clean_tags(tags)


class Recalled(OutputModel):
    key: str
    text: str = Field(description=f"The text (its first {RECALL_TEXT_CHARS:,} characters: get reads it whole).")
    tags: list[str]
    score: float = Field(description="How well it matches (bm25: higher is better).")
    updated: float = Field(description="When it was last remembered (Unix time).")
    truncated: bool | None = Field(None, description="True when text is cut: get reads it whole.")


class RecallOutput(OutputModel):
    query: str
    results: list[Recalled] = Field(description="The matching entries, best first.")


def recall(state: MemoryState, args: RecallArgs) -> tuple[RecallOutput, str]:
    found = state.require_store().recall(args.query, args.tags, args.limit)
    results = [Recalled(key=e.key, text=e.text[:RECALL_TEXT_CHARS], tags=e.tags, score=round(e.score or 0.0, 6),
                        updated=e.updated, truncated=True if len(e.text) > RECALL_TEXT_CHARS else None)
               for e in found]
    best = f"; best: {results[0].key!r}" if results else ""
    return RecallOutput(query=args.query, results=results), f"{len(results)} memories match {args.query!r}{best}"


class KeyArgs(Args):
    key: str = Field(min_length=1, max_length=200, description=KEY_DOC)


class EntryOutput(OutputModel):
    key: str
    text: str
    tags: list[str]
    created: float = Field(description="When it was first remembered (Unix time).")
    updated: float = Field(description="When it was last remembered (Unix time).")


def get(state: MemoryState, args: KeyArgs) -> tuple[EntryOutput, str]:
    entry = state.require_store().get(args.key)
    return _whole(entry), f"{entry.key!r}: {len(entry.text):,} characters"


def _whole(entry: Entry) -> EntryOutput:
    return EntryOutput(key=entry.key, text=entry.text, tags=entry.tags, created=entry.created, updated=entry.updated)


class ForgetOutput(OutputModel):
    key: str
    forgotten: bool


def forget(state: MemoryState, args: KeyArgs) -> tuple[ForgetOutput, str]:
    state.require_store().forget(args.key)
    return ForgetOutput(key=args.key, forgotten=True), f"forgot {args.key!r}"


class ListArgs(Args):
    tags: list[str] = Field(default_factory=list, max_length=32, description="Only entries having all these tags.")
    limit: int = Field(50, ge=1, le=500, description="At most this many entries.")
    offset: int = Field(0, ge=0, description="Skip this many (the next_offset of the previous answer).")

    @field_validator("tags")
    @classmethod
    def _tags(cls, tags: list[str]) -> list[str]:
        return _clean_tags(tags)


class Listed(OutputModel):
    key: str
    preview: str = Field(description=f"The text's first {PREVIEW_CHARS} characters.")
    chars: int
    tags: list[str]
    updated: float


class ListOutput(OutputModel):
    total: int = Field(description="How many entries have the tags.")
    entries: list[Listed] = Field(description="Most recently updated first.")
    next_offset: int | None = Field(None, description="Call again with offset=next_offset for more; absent at the end.")


def list_entries(state: MemoryState, args: ListArgs) -> tuple[ListOutput, str]:
    found, total = state.require_store().list(args.tags, args.limit, args.offset)
    end = args.offset + len(found)
    listed = [Listed(key=e.key, preview=e.text[:PREVIEW_CHARS], chars=len(e.text), tags=e.tags, updated=e.updated)
              for e in found]
    return (ListOutput(total=total, entries=listed, next_offset=end if end < total else None),
            f"{len(listed)} of {total} memories")


TOOLS = [
    memory_tool(name="remember", description=(
        "Keep a text for later runs (on the session's disk), under a key and tags; the same key replaces it."), args=RememberArgs, output=RememberOutput, run=remember,
        annotations=WRITES),
    memory_tool(name="recall", description=(
        "Remembered texts matching the query's words, best first (full-text), optionally with given tags."), args=RecallArgs, output=RecallOutput, run=recall),
    memory_tool(name="get", description="Read one remembered entry whole, by its key.",
                args=KeyArgs, output=EntryOutput, run=get),
    memory_tool(name="forget", description="Delete a remembered entry by its key.",
                args=KeyArgs, output=ForgetOutput, run=forget,
                annotations={"read_only_hint": False, "destructive_hint": True, "open_world_hint": False}),
    memory_tool(name="list", description="Remembered entries, newest first, optionally with given tags.",
                args=ListArgs, output=ListOutput, run=list_entries),
]
