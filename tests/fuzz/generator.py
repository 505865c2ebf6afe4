"""Hostile scripts composed at random: 1-4 stressing constructs, at random sizes, under random
limits, for run_js and for run_py.

`script(seed, index, language)` is deterministic: the same seed and index give the same script,
so a failure seen in `make fuzz` (which prints its seed) is replayed with
`CODEDESK_FUZZ_SEED=<seed>` and the index the failure names.

Each construct is a few statements; some are wrapped in try/catch (try/except) so that later
ones run, others end the run (a throw, a loop that meets the timeout, memory that runs out). The
last construct may leave a value. The calls go to the test server (`test`: echo, delay, error,
image, unsendable), which the runtime under test is configured with.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Construct = Callable[[random.Random, int], str]

# ---- run_js -------------------------------------------------------------------------------------

_JS_ODD = [
    "String.fromCharCode(0xD800)", "String.fromCharCode(0xDC00)", '"\\uDBFF"', '"a\\uD83D"',
    '"\\uDE00b"', '"\\uD83D\\uDE00"', '"\\u0000"', '"\\uFFFF"', '"\\uFEFF"', '"\\u202E"',
    '"😀".slice(0, 1)', '"e\\u0301"', "String.fromCodePoint(0x10FFFF)",
]


def _odd(rng: random.Random) -> str:
    return " + ".join(rng.choice(_JS_ODD) for _ in range(rng.randint(1, 3)))


def js_recursion(rng: random.Random, n: int) -> str:
    return rng.choice([
        "function r(n) { return r(n + 1) + 1 } r(0);",
        f"function r(n) {{ return n <= 0 ? 0 : r(n - 1) + 1 }} globalThis.depth = r({n * 50});",
        "const o = {}; Object.defineProperty(o, 'x', {get() { return o.x }}); o.x;",
        "async function a(n) { return n ? a(n - 1) : 0 } await a(1e6);",
    ])


def js_allocation(rng: random.Random, n: int) -> str:
    return rng.choice([
        "const a = []; for (;;) a.push({k: a.length, v: [1, 2, 3]});",
        f"const m = new Map(); for (let i = 0; i < {n * 10000}; i++) m.set('k' + i, [i]);",
        f"globalThis.big = new Array({n * 100000}).fill(0).map((_, i) => ({{i}}));",
        "const s = new Set(); for (let i = 0; ; i++) s.add(i);",
        f"globalThis.arr = []; arr.length = {2 ** 32 - 1}; arr.join(',').length;",
    ])


def js_string_bomb(rng: random.Random, n: int) -> str:
    return rng.choice([
        "let s = 'x'; for (;;) s += s;",
        f"let s = 'ab'.repeat({n * 100000}); globalThis.len = s.length;",
        "const parts = []; for (;;) parts.push('y'.repeat(1 << 20));",
        f"globalThis.t = 'z'.repeat({n << 16}).split('').join('-').length;",
        "let s = 'q'; for (let i = 0; i < 40; i++) s = s + s; s.length;",
    ])


def js_loop(rng: random.Random, n: int) -> str:
    return rng.choice([
        "for (;;) {}",
        "while (true) { Math.random() }",
        f"let x = 0; for (let i = 0; i < {n * 200000}; i++) x += i % 7; globalThis.x = x;",
        "for (;;) { try { throw 1 } catch (e) {} }",
        "do {} while (1);",
    ])


def js_promise_storm(rng: random.Random, n: int) -> str:
    return rng.choice([
        f"await Promise.all(Array.from({{length: {n * 5000}}}, (_, i) => Promise.resolve(i)));",
        f"let p = Promise.resolve(0); for (let i = 0; i < {n * 20000}; i++) p = p.then((v) => v + 1); await p;",
        "(function spin() { Promise.resolve().then(spin) })();",
        "await new Promise(() => {});",
        f"for (let i = 0; i < {n * 2000}; i++) queueMicrotask?.(() => {{}}); await null;",
        "const loop = async () => { for (;;) await null }; await loop();",
    ])


def js_trap(rng: random.Random, n: int) -> str:
    return rng.choice([
        "globalThis.result = {toJSON() { for (;;) {} }};",
        "globalThis.result = new Proxy({}, {ownKeys() { throw new Error('no keys') }});",
        "globalThis.result = new Proxy({}, {get(t, k) { return k === 'toJSON' ? () => ({deep: result}) : 1 }});",
        "globalThis.result = {get x() { throw new Error('getter ' + String.fromCharCode(0xD800)) }};",
        "globalThis.result = {toJSON() { return 'j' + String.fromCharCode(0xDC00) }};",
        "globalThis.result = new Proxy([], {get(t, k) { return k === 'length' ? 1e9 : t[k] }});",
        f"globalThis.result = (() => {{ let o = {{}}; for (let i = 0; i < {n * 200}; i++) o = {{o}}; return o }})();",
        "globalThis.result = {then(resolve) { resolve({then(r) { r(1) }}) }};",
    ])


def js_regex(rng: random.Random, n: int) -> str:
    return rng.choice([
        f"/^(a+)+$/.test('a'.repeat({20 + n * 2}) + '!');",
        f"/(x+x+)+y/.test('x'.repeat({18 + n}));",
        f"'{'ab' * 10}'.repeat({n * 1000}).replace(/(a|b|ab)*c/g, '-');",
        "new RegExp('(' + '.*'.repeat(30) + ')+z').test('a'.repeat(40));",
    ])


def js_console_flood(rng: random.Random, n: int) -> str:
    return rng.choice([
        "for (;;) console.log('flood');",
        f"for (let i = 0; i < {n * 2000}; i++) console.log(i, {{i}}, [i]);",
        f"console.log('w'.repeat({n << 18}));",
        f"for (let i = 0; i < {n * 100}; i++) console.error(new Error('e' + i));",
        f"for (let i = 0; i < {n * 500}; i++) console.log({_odd(rng)});",
        "console.log(new Proxy({}, {ownKeys() { for (;;) {} }}));",
    ])


def js_timer_flood(rng: random.Random, n: int) -> str:
    return rng.choice([
        f"for (let i = 0; i < {n * 2000}; i++) setTimeout(() => {{}}, i % 50);",
        "setInterval(() => {}, 0);",
        "(function again() { setTimeout(again, 0) })();",
        f"await new Promise((r) => setTimeout(r, {n * 50}));",
        "setTimeout(() => { throw new Error('late ' + String.fromCharCode(0xD800)) }, 1);",
        f"const ids = []; for (let i = 0; i < {n * 500}; i++) ids.push(setTimeout(() => {{}}, 1e6)); ids.forEach(clearTimeout);",
    ])


def js_typed_array(rng: random.Random, n: int) -> str:
    return rng.choice([
        "const bufs = []; for (;;) bufs.push(new Float64Array(1 << 20));",
        f"globalThis.u = new Uint8Array({n << 20}).fill(7).reduce((a, b) => a + b, 0);",
        "globalThis.dv = new DataView(new ArrayBuffer(8)); dv.setFloat64(0, NaN); dv.getUint32(0);",
        f"globalThis.bytes = new TextEncoder().encode('é'.repeat({n * 1000}) + {_odd(rng)}).length;",
        "globalThis.dec = new TextDecoder().decode(new Uint8Array([0xff, 0xfe, 0xed, 0xa0, 0x80]));",
        "new ArrayBuffer(2 ** 31);",
    ])


def js_odd_unicode(rng: random.Random, n: int) -> str:
    return rng.choice([
        f"globalThis.result = {_odd(rng)};",
        f"console.log({_odd(rng)});",
        f"artifact({_odd(rng)});",
        f"throw new Error({_odd(rng)});",
        f"globalThis.result = {{[{_odd(rng)}]: [{_odd(rng)}, {{k: {_odd(rng)}}}]}};",
        f"globalThis.echo = (await mcp.callTool('test', 'echo', {{text: {_odd(rng)}}})).content[0].text;",
        f"throw {_odd(rng)};",
        f"console.warn(Symbol({_odd(rng)}).toString(), new Map([[{_odd(rng)}, 1]]));",
        f"await Promise.reject(new TypeError({_odd(rng)}));",
        "globalThis.result = await mcp.callTool('test', 'unsendable', {});",
    ])


def js_hijack(rng: random.Random, n: int) -> str:
    return rng.choice([
        "JSON.stringify = () => { throw new Error('hijacked') };",
        "JSON.parse = () => ({});",
        "Promise.prototype.then = function () { return this };",
        "Array.prototype.push = function () { for (;;) {} };",
        "Object.prototype.toJSON = function () { return 'hijacked' };",
        "Object.defineProperty(Object.prototype, 'op', {get() { throw new Error('op') }, configurable: true});",
        "String.prototype.toWellFormed = () => String.fromCharCode(0xD800);",
        "globalThis.setTimeout = null; globalThis.console = {log() { for (;;) {} }};",
        "Reflect.apply = () => 0; Function.prototype.call = () => 0;",
        "Error.prototype.toString = () => { throw new Error('no') };",
        "Symbol.prototype.toString = () => { for (;;) {} };",
    ])


def js_call_flood(rng: random.Random, n: int) -> str:
    return rng.choice([
        f"await Promise.all(Array.from({{length: {n * 30}}}, (_, i) => mcp.callTool('test', 'echo', {{text: 'c' + i}})));",
        f"for (let i = 0; i < {n * 20}; i++) await mcp.callTool('test', 'echo', {{text: String(i)}});",
        "for (;;) { try { await mcp.callTool('nope', 'nope', {}) } catch (e) {} }",
        f"await Promise.allSettled(Array.from({{length: {n * 20}}}, () => mcp.callTool('test', 'delay', {{seconds: 0.05}})));",
        "mcp.callTool('test', 'delay', {seconds: 30});",
        f"for (let i = 0; i < {n * 10}; i++) mcp.listTools();",
        "await mcp.callTool('test', 'error', {message: 'e' + String.fromCharCode(0xDFFF)});",
    ])


JS_CONSTRUCTS: dict[str, Construct] = {
    "recursion": js_recursion, "allocation": js_allocation, "string_bomb": js_string_bomb,
    "loop": js_loop, "promise_storm": js_promise_storm, "trap": js_trap, "regex": js_regex,
    "console_flood": js_console_flood, "timer_flood": js_timer_flood, "typed_array": js_typed_array,
    "odd_unicode": js_odd_unicode, "hijack": js_hijack, "call_flood": js_call_flood,
}

# ---- run_py -------------------------------------------------------------------------------------

_PY_ODD = ["'\\ud800'", "'\\udc00'", "chr(0xDBFF)", "'a\\ud83d'", "'\\U0001F600'", "'\\x00'",
           "'\\ufeff'", "'\\u202e'", "'e\\u0301'", "chr(0x10FFFF)"]


def _py_odd(rng: random.Random) -> str:
    return " + ".join(rng.choice(_PY_ODD) for _ in range(rng.randint(1, 3)))


def py_recursion(rng: random.Random, n: int) -> str:
    return rng.choice([
        "def r(n):\n    return r(n + 1) + 1\nr(0)",
        "import sys\nsys.setrecursionlimit(10 ** 6)\ndef r(n):\n    return r(n + 1)\nr(0)",
        f"def r(n):\n    return 0 if n <= 0 else r(n - 1) + 1\ndepth = r({n * 40})",
        "class A:\n    def __getattr__(self, k):\n        return getattr(self, k)\nA().x",
    ])


def py_allocation(rng: random.Random, n: int) -> str:
    return rng.choice([
        "a = []\nwhile True:\n    a.append([0] * 10000)",
        f"big = [{{'i': i}} for i in range({n * 20000})]",
        "b = bytearray(1)\nwhile True:\n    b += b",
        f"d = {{i: str(i) for i in range({n * 30000})}}",
    ])


def py_string_bomb(rng: random.Random, n: int) -> str:
    return rng.choice([
        "s = 'x'\nwhile True:\n    s += s",
        f"s = 'ab' * {n * 200000}\nlength = len(s)",
        "'q' * (1 << 40)",
        f"t = '-'.join('z' * {n << 14})",
    ])


def py_loop(rng: random.Random, n: int) -> str:
    return rng.choice([
        "while True:\n    pass",
        f"x = sum(i % 7 for i in range({n * 100000}))",
        "import itertools\nfor _ in itertools.count():\n    pass",
        "while True:\n    try:\n        raise ValueError\n    except ValueError:\n        pass",
    ])


def py_trap(rng: random.Random, n: int) -> str:
    return rng.choice([
        "class R:\n    def __repr__(self):\n        while True:\n            pass\nresult = R()",
        "class R:\n    def __repr__(self):\n        return 'r' + chr(0xD800)\nresult = R()",
        "class R:\n    def __repr__(self):\n        raise RuntimeError('no repr')\nresult = R()",
        "class D(dict):\n    def items(self):\n        while True:\n            pass\nresult = D(a=1)",
        "class X:\n    def __del__(self):\n        print('deleted' + chr(0xDC00))\nresult = X()",
        f"result = []\nfor _ in range({n * 30}):\n    result = [result]",
    ])


def py_regex(rng: random.Random, n: int) -> str:
    return rng.choice([
        f"import re\nre.match(r'^(a+)+$', 'a' * {18 + n} + '!')",
        f"import re\nre.findall(r'(x+x+)+y', 'x' * {16 + n})",
    ])


def py_console_flood(rng: random.Random, n: int) -> str:
    return rng.choice([
        "while True:\n    print('flood')",
        f"for i in range({n * 2000}):\n    print(i, {{'i': i}})",
        f"print('w' * {n << 18})",
        f"import sys\nfor i in range({n * 300}):\n    print('e', i, file=sys.stderr)",
        f"for i in range({n * 200}):\n    print({_py_odd(rng)})",
        "while True:\n    print('x' * 1000, end='')",
    ])


def py_odd_unicode(rng: random.Random, n: int) -> str:
    return rng.choice([
        f"result = {_py_odd(rng)}",
        f"print({_py_odd(rng)})",
        f"artifact({_py_odd(rng)})",
        f"raise ValueError({_py_odd(rng)})",
        f"result = {{{_py_odd(rng)}: [{_py_odd(rng)}]}}",
        f"echo = mcp.call_tool('test', 'echo', {{'text': {_py_odd(rng)}}})",
        "result = mcp.call_tool('test', 'unsendable', {})",
        f"import sys\nsys.stderr.write({_py_odd(rng)} + '\\n')",
    ])


def py_hijack(rng: random.Random, n: int) -> str:
    return rng.choice([
        "import builtins\nbuiltins.len = lambda x: 0",
        "import json\njson.dumps = None\njson.loads = None",
        "import sys\nsys.stdout = None",
        "import builtins\nbuiltins.print = lambda *a, **k: None\nprint('gone')",
        "import sys\nsys.modules['json'] = None",
        "import os\nos.write = lambda *a: 0",
        "import traceback\ntraceback.format_exception_only = None\nraise KeyError('k')",
    ])


def py_call_flood(rng: random.Random, n: int) -> str:
    return rng.choice([
        f"results = mcp.call_tools([('test', 'echo', {{'text': str(i)}}) for i in range({n * 30})])",
        f"for i in range({n * 15}):\n    mcp.call_tool('test', 'echo', {{'text': str(i)}})",
        "while True:\n    try:\n        mcp.call_tool('nope', 'nope', {})\n    except Exception:\n        pass",
        "mcp.call_tool('test', 'delay', {'seconds': 30})",
        "mcp.call_tool('test', 'error', {'message': 'e' + chr(0xDFFF)})",
    ])


def py_exit(rng: random.Random, n: int) -> str:
    return rng.choice([
        "import os\nos._exit(3)", "import sys\nsys.exit('bye' + chr(0xD800))", "raise SystemExit(0)",
        "raise KeyboardInterrupt", "import gc\ngc.collect()",
    ])


PY_CONSTRUCTS: dict[str, Construct] = {
    "recursion": py_recursion, "allocation": py_allocation, "string_bomb": py_string_bomb,
    "loop": py_loop, "trap": py_trap, "regex": py_regex, "console_flood": py_console_flood,
    "odd_unicode": py_odd_unicode, "hijack": py_hijack, "call_flood": py_call_flood, "exit": py_exit,
}

# ---- composing ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Script:
    """One generated run: which tool, its code and limits, and what went into it."""

    index: int
    language: str  # "js" or "py"
    code: str
    arguments: dict[str, Any]
    constructs: tuple[str, ...]

    @property
    def timeout(self) -> float:
        return float(self.arguments["timeout_seconds"])

    def describe(self, seed: int) -> str:
        return (f"script {self.index} of seed {seed} ({self.language}: {', '.join(self.constructs)}; "
                f"{self.arguments | {'code': '...'}}):\n{self.code}")


def _indent(code: str) -> str:
    return "\n".join("    " + line for line in code.splitlines())


def script(seed: int, index: int, language: str) -> Script:
    """The `index`-th script of `seed` for `language` ("js" or "py")."""
    rng = random.Random(f"{seed}:{index}:{language}")
    table = JS_CONSTRUCTS if language == "js" else PY_CONSTRUCTS
    names = rng.choices(list(table), k=rng.randint(1, 4))
    parts = []
    for position, name in enumerate(names):
        body = table[name](rng, rng.choice([1, 1, 2, 4, 8, 16]))
        last = position == len(names) - 1
        if not last and rng.random() < 0.6:
            if language == "js":
                body = f"try {{\n{_indent(body)}\n}} catch (e) {{ console.log('caught', String(e).slice(0, 80)) }}"
            else:
                body = f"try:\n{_indent(body)}\nexcept Exception as e:\n    print('caught', str(e)[:80])"
        elif language == "js":
            body = f"{{\n{_indent(body)}\n}}"  # its own block: two constructs may declare one name
        parts.append(body)
    if language == "js":
        parts.append(rng.choice(["", "globalThis.result", "typeof result === 'undefined' ? 1 : result"]))
        code = "\n".join(parts)
        arguments: dict[str, Any] = {"timeout_seconds": round(rng.uniform(0.2, 3.0), 2)}
        if rng.random() < 0.5:
            arguments["heap_memory_max_mb"] = rng.choice([2, 4, 8, 16, 32, 64])
    else:
        parts.append(rng.choice(["", "result if 'result' in dir() else 1"]))
        code = "\n".join(parts)
        arguments = {"timeout_seconds": round(rng.uniform(0.5, 3.0), 2)}
        if rng.random() < 0.5:
            arguments["memory_max_mb"] = rng.choice([64, 128, 256])
    return Script(index, language, code, arguments, tuple(names))
