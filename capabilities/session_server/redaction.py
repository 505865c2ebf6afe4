"""Keeping secrets out of the timeline: by field name, and by the session's known values.

`Redactor.value` walks a JSON-like value: an object field whose name says it holds a secret
(`SECRET_FIELD`: token, password, secret, authorization, api_key, cookie, credential, ...) has
its value replaced by `REDACTED`, and that value, when it is a string of `MIN_SECRET_CHARS` or
more, becomes a known secret too; every string has every known secret replaced wherever it
occurs in it. The known secrets start as the session's own (the runtime's HTTP token, the
viewer's secret, the values of `CODEDESK_*TOKEN*` / `*SECRET*` / `*PASSWORD*` variables) and
grow with what the session's calls carried in secret fields, so a password typed into one step
and echoed by a later page or result is hidden there too.

A script is text, not JSON: `Redactor.script` replaces the known secrets and the string
literals written right after a secret field's name (`password: "..."`, `"api_key": '...'`,
`token="..."` as a Python keyword). A secret a script builds otherwise (from a variable, by
concatenation) is hidden in the call's arguments by field name, and in the script only from
the calls after the one that carried it. SECURITY.md says so.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any

REDACTED = "[redacted]"
MIN_SECRET_CHARS = 4
"""Shorter values are not hunted for in other text: "a" would blank every page."""

SECRET_FIELD = re.compile(
    r"token|passw|passphrase|secret|authori[sz]ation|api[-_]?key|apikey|access[-_]?key|private[-_]?key"
    r"|cookie|credential|session[-_]?id|bearer",
    re.IGNORECASE)
SECRET_ENV = re.compile(r"^CODEDESK_.*(TOKEN|SECRET|PASSWORD|KEY)", re.IGNORECASE)
_LITERAL_AFTER_FIELD = re.compile(
    r"""(?P<field>["']?[A-Za-z0-9_$-]*(?:""" + SECRET_FIELD.pattern + r""")[A-Za-z0-9_$-]*["']?\s*[:=]\s*)"""
    r"""(?P<quote>["'`])(?P<value>(?:\\.|(?!(?P=quote)).)*)(?P=quote)""",
    re.IGNORECASE)


_FIELD_WORDS = ("token", "passw", "passp", "secret", "authori", "api", "access", "private", "cookie",
                "credential", "session", "bearer")
"""A part of every name SECRET_FIELD matches, lower case: a text holding none of them names no
secret field (one holding one may, and is walked)."""
_IGNORECASE_FOLDS = str.maketrans({"\u0130": "i", "\u0131": "i", "\u017f": "s", "\u212a": "k"})
"""The letters outside ASCII that SECRET_FIELD's IGNORECASE matches as ASCII ones and `lower()`
leaves apart: "pa\u017f\u017fword" is a secret field to the walk, so the quick check must see "passw"."""
_JSON_ESCAPED = re.compile(r'["\\\x00-\x1f\u2028\u2029]')
"""Characters json.dumps(ensure_ascii=False) writes otherwise than they are."""


def session_secrets(environ: Mapping[str, str] | None = None, extra: Iterable[str | None] = ()) -> list[str]:
    """The secrets the session knows of: `extra` (the HTTP token, the viewer's secret) and the
    values of `CODEDESK_*TOKEN*`, `*SECRET*`, `*PASSWORD*`, `*KEY*` variables."""
    environ = os.environ if environ is None else environ
    found = [value for key, value in environ.items() if SECRET_ENV.match(key)]
    found.extend(value for value in extra if value)
    return [value for value in found if len(value) >= MIN_SECRET_CHARS]


class Redactor:
    """Replaces secrets in what the timeline records. Thread-safe: `learn` may run while
    another thread redacts."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        self._secrets: tuple[str, ...] = ()
        self._pattern: re.Pattern[str] | None = None
        self._json_safe = True  # no known secret has a character JSON escapes
        for secret in secrets:
            self.learn(secret)

    def learn(self, secret: str) -> None:
        """Hide `secret` wherever it occurs from now on."""
        if not isinstance(secret, str) or len(secret) < MIN_SECRET_CHARS or secret == REDACTED:
            return
        with self._lock:
            if secret in self._secrets:
                return
            # Longest first: a secret that contains another is replaced whole.
            self._secrets = tuple(sorted({*self._secrets, secret}, key=len, reverse=True))
            self._pattern = re.compile("|".join(re.escape(s) for s in self._secrets))
            self._json_safe = self._json_safe and _JSON_ESCAPED.search(secret) is None

    def text(self, text: str) -> str:
        """`text` with every known secret replaced."""
        pattern = self._pattern
        if pattern is None or not text:
            return text
        return pattern.sub(REDACTED, text)

    def value(self, value: Any) -> Any:
        """A copy of a JSON-like value with secret fields and known secrets replaced (learning
        the secret fields' values first, so they are hidden in the rest of the value too); the
        value itself when it holds neither."""
        holds, _ = self._may_hold_secrets(value)
        return self._redacted(value) if holds else value

    def value_and_json(self, value: Any) -> tuple[Any, str]:
        """`value(value)` and its JSON text, as `json.dumps(..., ensure_ascii=False)` writes it:
        when nothing was replaced, the text the check for secrets wrote (the timeline's writer
        stores it, and no longer writes it twice)."""
        holds, text = self._may_hold_secrets(value)
        if holds:
            value, text = self._redacted(value), None
        return value, text if text is not None else json.dumps(value, ensure_ascii=False)

    def _redacted(self, value: Any) -> Any:
        self._learn_fields(value)
        return self._walk(value)

    def _may_hold_secrets(self, value: Any) -> tuple[bool, str | None]:
        """False when the value's JSON text names no secret field and holds no known secret: a few
        substring searches in C instead of a walk in Python, which held the GIL against the runs on
        every result the timeline recorded. A known secret that JSON writes escaped (a quote, a backslash, a
        control character) could hide from the text, so with one the walk is always made. With
        the JSON text, when it was written."""
        if not isinstance(value, dict | list | tuple):
            found = isinstance(value, str) and self._pattern is not None and self._pattern.search(value) is not None
            return found, None
        if not self._json_safe:
            return True, None
        try:
            text = json.dumps(value, ensure_ascii=False)
        except (TypeError, ValueError, RecursionError):
            return True, None
        low = text.lower()  # substring searches, in C: SECRET_FIELD's own search took 1.7 ms on 13 KB
        if not text.isascii():
            low = low.translate(_IGNORECASE_FOLDS)
        return any(word in low for word in _FIELD_WORDS) or any(secret in text for secret in self._secrets), text

    def _learn_fields(self, value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if isinstance(key, str) and SECRET_FIELD.search(key):
                    for text in _strings(item):
                        self.learn(text)
                else:
                    self._learn_fields(item)
        elif isinstance(value, list | tuple):
            for item in value:
                self._learn_fields(item)

    def _walk(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {key: (REDACTED if isinstance(key, str) and SECRET_FIELD.search(key) and item not in (None, "")
                          else self._walk(item)) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [self._walk(item) for item in value]
        return value

    def script(self, code: str) -> str:
        """A script's text with the known secrets and the literals of secret fields replaced."""
        for match in _LITERAL_AFTER_FIELD.finditer(code):
            self.learn(match.group("value"))
        code = _LITERAL_AFTER_FIELD.sub(lambda m: f"{m.group('field')}{m.group('quote')}{REDACTED}{m.group('quote')}",
                                        code)
        return self.text(code)


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)
