// The guest-side API of run_js, compiled once per context with `new Function`, before the
// user's code runs. Its frames show as <input> in stacks, the user's as eval_script, which is
// how errors are placed in the user's own code. It returns `describe`, which the host calls on
// the script's final value.
//
// Host functions (removed from globalThis here, kept in this closure):
//   __host(op, a, b, c)  sync: "submit" (a JSON list of {op: "call"|"list"|"timer"|"clear",
//                        id, ...}), "mark" (the run used calls, timers or the console), "console" (a JSON list of
//                        [level, text]; returns "full" once the output limit is reached),
//                        "cut" (bytes, lines dropped here after "full"), "artifact" (JSON;
//                        returns "" or why not), "uncaught" (name, message, stack: an error
//                        thrown where nobody can catch it)
//   __host_next(json)    async; takes "" or {ops, console} (as "submit" and "console"), then
//                        resolves to a JSON array of completions
"use strict";
const g = globalThis;
const host = g.__host;
const hostNext = g.__host_next;
delete g.__host;
delete g.__host_next;
const hostSubmit = (json) => host("submit", json);
const hostArtifact = (json) => host("artifact", json);
const hostUncaught = (name, message, stack) => host("uncaught", name, message, stack);

// The script may replace globals; what the API relies on is taken now.
const stringify = JSON.stringify;
const parse = JSON.parse;

// ---- errors the host names, so an uncaught one is classified by its kind ----
class BridgeError extends Error {}
BridgeError.prototype.name = "BridgeError";
class CallBudgetError extends Error {}
CallBudgetError.prototype.name = "CallBudgetError";
class ArtifactLimitError extends Error {}
ArtifactLimitError.prototype.name = "ArtifactLimitError";
const errorTypes = { BridgeError, CallBudgetError, TypeError, Error };

// ---- the event loop: requests go out in one batch per microtask turn ----
let nextId = 1;
let outstanding = 0; // calls, listings and armed timers not yet completed
let waiting = false; // a hostNext() is in flight
let queue = [];
let flushScheduled = false;
const pending = new Map(); // id -> {resolve, reject} | {timer: true, fn, args, interval, ms}

// The flush waits a few microtask turns, so continuations of the results just delivered
// (`await` resumes a turn or two later) add their requests to the same crossing.
function scheduleFlush() {
  if (!flushScheduled) {
    flushScheduled = true;
    Promise.resolve().then().then().then(flush);
  }
}

// Tell the host once per run that the script used the event loop or the console, so it
// settles the run through the guest rather than reading a plain value directly.
let marked = false;
function mark() {
  if (!marked) {
    marked = true;
    host("mark");
  }
}

function submit(op) {
  queue.push(op);
  mark();
  scheduleFlush();
}

function cancelled() {
  // the run was cancelled (timeout): nothing more will arrive
  waiting = false;
  outstanding = 0;
}

function flush() {
  flushScheduled = false;
  const ops = queue;
  queue = [];
  if (!waiting && outstanding > 0) {
    // one crossing: the new requests and the waiting console lines go out, then we wait
    const lines = consoleQueue;
    consoleQueue = [];
    consoleQueued = 0;
    waiting = true;
    hostNext(stringify({ ops, console: lines })).then(deliver, cancelled);
    return;
  }
  flushConsole();
  if (ops.length) hostSubmit(stringify(ops));
  pump();
}

const drained = []; // resolvers waiting for the event loop to empty

function pump() {
  if (outstanding === 0 && !waiting) {
    while (drained.length) drained.pop()();
  }
  if (waiting || outstanding === 0) return;
  waiting = true;
  hostNext("").then(deliver, cancelled);
}

function deliver(json) {
  waiting = false;
  for (const ev of parse(json)) {
    const entry = pending.get(ev.id);
    if (entry === undefined) continue; // a cleared timer that fired anyway
    if (entry.timer) {
      fire(ev.id, entry);
      continue;
    }
    pending.delete(ev.id);
    outstanding--;
    if ("error" in ev) {
      const Type = errorTypes[ev.name] || Error;
      const err = new Type(ev.error);
      err.stack = entry.site;
      entry.reject(err);
    } else {
      entry.resolve(ev.ok);
    }
  }
  scheduleFlush();
}

function request(op) {
  // the caller's stack, so a failure is placed at the user's line, not in this file
  const site = new Error().stack;
  return new Promise((resolve, reject) => {
    const id = nextId++;
    op.id = id;
    pending.set(id, { resolve, reject, site });
    outstanding++;
    submit(op);
  });
}

// ---- mcp ----
function callTool(server, tool, args) {
  if (typeof server !== "string" || typeof tool !== "string") {
    return Promise.reject(new TypeError("mcp.callTool(server, tool, args): server and tool must be strings"));
  }
  if (args === undefined) args = {};
  if (args === null || typeof args !== "object" || Array.isArray(args)) {
    return Promise.reject(new TypeError("mcp.callTool(server, tool, args): args must be an object"));
  }
  let plain;
  try {
    plain = parse(stringify(args));
  } catch (e) {
    return Promise.reject(new TypeError(`mcp.callTool: args must be JSON-serialisable (${e.message})`));
  }
  return request({ op: "call", server, tool, args: plain });
}

function listTools(server) {
  if (server !== undefined && server !== null && typeof server !== "string") {
    return Promise.reject(new TypeError("mcp.listTools(server?): server must be a string"));
  }
  return request({ op: "list", server: server == null ? null : server });
}

g.mcp = Object.freeze({ callTool, listTools });

// ---- timers ----
function arm(id, entry) {
  outstanding++;
  submit({ op: "timer", id, ms: entry.ms });
}

function fire(id, entry) {
  outstanding--;
  if (entry.interval) arm(id, entry);
  else pending.delete(id);
  try {
    entry.fn(...entry.args);
  } catch (e) {
    reportUncaught(e);
  }
}

function reportUncaught(e) {
  if (e instanceof Error) hostUncaught(e.name, e.message, String(e.stack || ""));
  else hostUncaught("Error", "Uncaught " + inspect(e), "");
}

function addTimer(fn, ms, args, interval) {
  if (typeof fn !== "function") throw new TypeError("the timer callback must be a function");
  ms = Number(ms);
  if (!(ms >= 0)) ms = 0;
  const id = nextId++;
  const entry = { timer: true, fn, args, interval, ms };
  pending.set(id, entry);
  arm(id, entry);
  return id;
}

function clearTimer(id) {
  const entry = pending.get(id);
  if (entry === undefined || !entry.timer) return;
  pending.delete(id);
  outstanding--;
  submit({ op: "clear", id });
}

g.setTimeout = (fn, ms, ...args) => addTimer(fn, ms, args, false);
g.setInterval = (fn, ms, ...args) => addTimer(fn, ms, args, true);
g.clearTimeout = clearTimer;
g.clearInterval = clearTimer;

// ---- console ----
function jsonish(v) {
  const seen = new WeakSet();
  return stringify(v, (k, x) => {
    if (typeof x === "bigint") return x.toString() + "n";
    if (typeof x === "function") return `[Function: ${x.name || "anonymous"}]`;
    if (typeof x === "symbol") return x.toString();
    if (x === undefined) return k === "" ? undefined : null;
    if (x instanceof Map) return Object.fromEntries(x);
    if (x instanceof Set) return [...x];
    if (x instanceof Error) return `${x.name}: ${x.message}`;
    if (x !== null && typeof x === "object") {
      if (seen.has(x)) return "[Circular]";
      seen.add(x);
    }
    return x;
  });
}

function inspect(v) {
  switch (typeof v) {
    case "string":
      return v;
    case "undefined":
      return "undefined";
    case "bigint":
      return v.toString() + "n";
    case "function":
      return `[Function: ${v.name || "anonymous"}]`;
    case "symbol":
      return v.toString();
    case "object":
      if (v === null) return "null";
      if (v instanceof Error) return v.stack ? `${v.name}: ${v.message}\n${v.stack}`.trimEnd() : `${v.name}: ${v.message}`;
      try {
        return jsonish(v);
      } catch (e) {
        return Object.prototype.toString.call(v);
      }
    default:
      return String(v);
  }
}

function format(args) {
  return args.map(inspect).join(" ");
}

// Lines are batched and sent with the next host crossing (or every 64 KB): one crossing per
// line would cost more than the printing.
let consoleQueue = [];
let consoleQueued = 0;
let consoleFull = false;
let cutBytes = 0;
let cutLines = 0;

function utf8Length(s) {
  let n = s.length;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0x80) n += c >= 0x800 && (c < 0xd800 || c > 0xdfff) ? 2 : 1;
  }
  return n;
}

function flushConsole() {
  if (consoleQueue.length === 0) return;
  const lines = consoleQueue;
  consoleQueue = [];
  consoleQueued = 0;
  if (host("console", stringify(lines)) === "full") consoleFull = true;
}

function finish() {
  flushConsole();
  if (cutBytes) host("cut", cutBytes, cutLines);
  cutBytes = cutLines = 0;
}

const consoleObj = {};
for (const level of ["log", "info", "warn", "error", "debug"]) {
  consoleObj[level] = (...args) => {
    const text = format(args);
    if (consoleFull) {
      cutBytes += utf8Length(text) + 1;
      cutLines++;
      return;
    }
    mark();
    consoleQueue.push([level, text]);
    consoleQueued += text.length;
    if (consoleQueued > 65536) flushConsole();
    else scheduleFlush();
  };
}
consoleObj.trace = consoleObj.debug;
g.console = Object.freeze(consoleObj);

// ---- artifacts ----
g.artifact = function artifact(x) {
  let json;
  try {
    json = stringify(x);
  } catch (e) {
    throw new TypeError("artifact(): the value is not JSON-serialisable");
  }
  if (json === undefined) throw new TypeError("artifact() takes a string or a content block");
  const problem = hostArtifact(json);
  if (problem) throw new ArtifactLimitError(problem);
};

// ---- TextEncoder / TextDecoder (UTF-8) ----
class TextEncoder {
  get encoding() {
    return "utf-8";
  }
  encode(s = "") {
    s = String(s);
    const out = [];
    for (let i = 0; i < s.length; i++) {
      let c = s.charCodeAt(i);
      if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) {
        const d = s.charCodeAt(i + 1);
        if (d >= 0xdc00 && d <= 0xdfff) {
          c = 0x10000 + ((c - 0xd800) << 10) + (d - 0xdc00);
          i++;
        } else c = 0xfffd;
      } else if (c >= 0xd800 && c <= 0xdfff) c = 0xfffd;
      if (c < 0x80) out.push(c);
      else if (c < 0x800) out.push(0xc0 | (c >> 6), 0x80 | (c & 63));
      else if (c < 0x10000) out.push(0xe0 | (c >> 12), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
      else out.push(0xf0 | (c >> 18), 0x80 | ((c >> 12) & 63), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
    }
    return new Uint8Array(out);
  }
}

class TextDecoder {
  constructor(label = "utf-8") {
    if (!/^utf-?8$/i.test(String(label))) throw new RangeError(`TextDecoder: only utf-8 is supported, not ${label}`);
  }
  get encoding() {
    return "utf-8";
  }
  decode(buf) {
    if (buf === undefined) return "";
    const b = buf instanceof ArrayBuffer ? new Uint8Array(buf) : new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength);
    let s = "";
    for (let i = 0; i < b.length; ) {
      const c = b[i];
      let cp = 0xfffd;
      let n = 1;
      if (c < 0x80) cp = c;
      else if (c >= 0xc2 && c < 0xe0 && (b[i + 1] & 0xc0) === 0x80) {
        cp = ((c & 31) << 6) | (b[i + 1] & 63);
        n = 2;
      } else if (c >= 0xe0 && c < 0xf0 && (b[i + 1] & 0xc0) === 0x80 && (b[i + 2] & 0xc0) === 0x80) {
        cp = ((c & 15) << 12) | ((b[i + 1] & 63) << 6) | (b[i + 2] & 63);
        n = 3;
      } else if (c >= 0xf0 && c < 0xf5 && (b[i + 1] & 0xc0) === 0x80 && (b[i + 2] & 0xc0) === 0x80 && (b[i + 3] & 0xc0) === 0x80) {
        cp = ((c & 7) << 18) | ((b[i + 1] & 63) << 12) | ((b[i + 2] & 63) << 6) | (b[i + 3] & 63);
        n = 4;
      }
      s += String.fromCodePoint(cp);
      i += n;
    }
    return s;
  }
}
g.TextEncoder = TextEncoder;
g.TextDecoder = TextDecoder;

// After the script's top level: wait until no call or timer is left.
Object.defineProperty(g, Symbol.for("codedesk.drain"), {
  value: () =>
    new Promise((resolve) => {
      drained.push(resolve);
      if (queue.length) flush();
      else pump();
    }),
});

// ---- the final value, as JSON the host parses: {"value": ...} or {} for undefined ----
function describe(v) {
  if (v === undefined) return "{}";
  try {
    const text = jsonish(v);
    if (text !== undefined) return `{"value":${text}}`;
  } catch (e) {
    // fall through to a description
  }
  return stringify({ value: inspect(v) });
};

// After the top level: send what is left of the console and, when no call or timer is left,
// the description of the value; "" means work is pending and the host must drain first.
function settle(v) {
  finish();
  if (outstanding > 0 || waiting || queue.length) return "";
  return describe(v);
}

return { settle, finish };
