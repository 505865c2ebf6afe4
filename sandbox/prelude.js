// The guest-side API of run_js, compiled once per VM with `new Function`, before the user's
// code runs. Its frames show as <input> in stacks, the user's as eval_script, which is how
// errors are placed in the user's own code.
//
// The host drives the run in steps: it evaluates the script, runs the microtask queue, then
// calls `step`, which hands over the requests (tool calls, timers) and console lines gathered
// meanwhile and, once nothing is left to wait for, the script's value as JSON. The host starts
// the requests, waits for completions, and gives them back with `deliver`. Every call into
// this file runs under the run's deadline, so a getter, toJSON, Proxy trap or thenable met while
// describing a value is stopped like any other loop.
//
// The one host function (removed from globalThis here, kept in this closure):
//   __host(op, a, b)  "console" (a JSON list of [level, text]; returns "full" once the output
//                     limit is reached), "artifact" (JSON; returns "" or why not), "uncaught"
//                     (a JSON {name, message, stack}: thrown where nobody can catch it),
//                     "limits" (returns max_output_bytes), "count" (a string's UTF-8 length),
//                     "seed" (four random 32-bit numbers, comma-separated, for Math.random)
"use strict";
const g = globalThis;
const host = g.__host;
delete g.__host;

// The script may replace globals; what the API relies on is taken now.
const stringify = JSON.stringify;
const parse = JSON.parse;
const isArray = Array.isArray;
const objectToString = Object.prototype.toString;
const WeakMapCtor = WeakMap;
const MapCtor = Map;
const SetCtor = Set;
const ErrorCtor = Error;
const fromEntries = Object.fromEntries;
const arrayFrom = Array.from;
const apply = Reflect.apply;
const toWellFormed = String.prototype.toWellFormed;
const stringSlice = String.prototype.slice;
const setPrototypeOf = Object.setPrototypeOf;
const regexExec = RegExp.prototype.exec;
const USER_LINE = /eval_script:(\d+)/;

// What goes to the host is built of objects and arrays with no prototype: a script's
// Object.prototype.toJSON (or an accessor it puts there) must not change what the host reads.
function bare(x) {
  return setPrototypeOf(x, null);
}
function bareJson(k, v) {
  return v !== null && typeof v === "object" ? setPrototypeOf(v, null) : v;
}

// ---- errors the host names, so an uncaught one is classified by its kind ----
class BridgeError extends Error {}
BridgeError.prototype.name = "BridgeError";
class CallBudgetError extends Error {}
CallBudgetError.prototype.name = "CallBudgetError";
class ArtifactLimitError extends Error {}
ArtifactLimitError.prototype.name = "ArtifactLimitError";
const errorTypes = { BridgeError, CallBudgetError, TypeError, Error };

function errorJson(e) {
  if (e instanceof ErrorCtor) {
    let stack = "";
    try {
      stack = String(e.stack || "");
    } catch (_) {}
    return stringify(bare({ name: String(e.name), message: String(e.message), stack }));
  }
  return stringify(bare({ name: "Error", message: "Uncaught " + inspect(e, 2000), stack: "" }));
}

// ---- requests: gathered until the host's next step, completions come back in `deliver` ----
let nextId = 1;
let queue = []; // requests not yet handed to the host
const pending = new MapCtor(); // id -> {resolve, reject, site} | {timer: true, fn, args, interval, ms}
let outstanding = 0; // calls, listings and armed timers not yet completed

function request(op) {
  // the caller's stack, so a failure is placed at the user's line, not in this file
  const site = new ErrorCtor().stack;
  bare(op);
  // the user's innermost frame: the line a person is shown the call came from (a hint: a script
  // may shape its own stacks, e.g. with Error.prepareStackTrace, so only a plain string is read)
  const at = typeof site === "string" ? apply(regexExec, USER_LINE, [site]) : null;
  if (at !== null) op.line = +at[1];
  return new Promise((resolve, reject) => {
    const id = nextId++;
    op.id = id;
    pending.set(id, { resolve, reject, site });
    outstanding++;
    queue.push(op);
  });
}

function deliver(json) {
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
      const Type = errorTypes[ev.name] || ErrorCtor;
      const err = new Type(ev.error);
      err.stack = entry.site;
      entry.reject(err);
    } else {
      entry.resolve(ev.ok);
    }
  }
}

// ---- mcp ----
function callTool(server, tool, args) {
  if (typeof server !== "string" || typeof tool !== "string") {
    return Promise.reject(new TypeError("mcp.callTool(server, tool, args): server and tool must be strings"));
  }
  if (args === undefined) args = {};
  if (args === null || typeof args !== "object" || isArray(args)) {
    return Promise.reject(new TypeError("mcp.callTool(server, tool, args): args must be an object"));
  }
  // Their JSON text, taken now (what the script changes later is not sent) and spliced as it is
  // into the step's (`opsJson`): a string of megabytes is escaped once, not again each time.
  let text;
  try {
    text = stringify(args);
  } catch (e) {
    return Promise.reject(new TypeError(`mcp.callTool: args must be JSON-serialisable (${e && e.message})`));
  }
  if (typeof text !== "string") {
    return Promise.reject(new TypeError("mcp.callTool: args must be JSON-serialisable (their toJSON gave nothing)"));
  }
  return request({ op: "call", server, tool, argsJson: text });
}

function listTools(server) {
  if (server !== undefined && server !== null && typeof server !== "string") {
    return Promise.reject(new TypeError("mcp.listTools(server?): server must be a string"));
  }
  return request({ op: "list", server: server == null ? null : server });
}

async function describe(server, tool) {
  if (typeof server !== "string" || (tool !== undefined && tool !== null && typeof tool !== "string")) {
    throw new TypeError("mcp.describe(server, tool?): server and tool must be strings");
  }
  const listed = (await listTools(server))[server] || [];
  const chosen = listed.filter((t) => tool == null || t.name === tool);
  if (!chosen.length) {
    throw new BridgeError(`server ${stringify(server)} has no tool ${stringify(tool)}; its tools: ` +
                          (listed.map((t) => t.name).join(", ") || "(none)"));
  }
  return chosen.map((t) => t.declaration || t.name).join("\n\n");
}

g.mcp = Object.freeze({ callTool, listTools, describe });

// ---- tools.<server>.<tool>(args): the structured result, or a ToolError ----
class ToolError extends Error {
  constructor(server, tool, result) {
    let error = result && result.structuredContent && result.structuredContent.error;
    if (!error || typeof error !== "object") {
      const text = ((result && result.content) || []).map((b) => (b && b.text) || "").join(" ").trim();
      error = { kind: "failed", message: text || "the tool failed" };
    }
    super(`${server}.${tool}: ${error.kind}: ${error.message}` + (error.hint ? ` (hint: ${error.hint})` : ""));
    this.kind = error.kind;
    this.step = error.step;
    this.field = error.field;
    this.hint = error.hint;
    this.server = server;
    this.tool = tool;
    this.result = result;
  }
}
ToolError.prototype.name = "ToolError";
g.ToolError = ToolError;

function structured(server, tool, result) {
  if (result.isError) throw new ToolError(server, tool, result);
  if (result.structuredContent !== undefined) {
    const images = (result.content || []).filter((b) => b && b.type === "image");
    const value = result.structuredContent;
    // images referenced by image_index ride along, so a script can artifact(r.images[i])
    if (images.length && value && typeof value === "object" && !isArray(value) && !("images" in value)) {
      return Object.assign({}, value, { images });
    }
    return value;
  }
  const text = (result.content || []).filter((b) => b && b.type === "text").map((b) => b.text).join("");
  try { return parse(text); } catch (e) { return text; }
}

async function runProgram(args) {
  const started = await typedCall("exec", "exec", args);
  let logs = "", offset = 0, status = "running";
  for (;;) {
    const r = await typedCall("exec", "stream_logs", { id: started.id, offset });
    logs += r.logs; offset = r.next_offset; status = r.status;
    if (status !== "running") return { id: started.id, status, logs };
    await new Promise((resolve) => g.setTimeout(resolve, 100));
  }
}

async function typedCall(server, tool, args) {
  return structured(server, tool, await callTool(server, tool, args));
}

const serverProxies = {};
function serverProxy(server) {
  if (!serverProxies[server]) {
    const helpers = server === "exec" ? { run: runProgram } : {};
    serverProxies[server] = new Proxy({}, {
      get(_, tool) {
        if (typeof tool !== "string") return undefined;
        if (helpers[tool]) return helpers[tool];
        return (args) => typedCall(server, tool, args);
      },
    });
  }
  return serverProxies[server];
}
g.tools = new Proxy({}, {
  get(_, server) { return typeof server === "string" ? serverProxy(server) : undefined; },
});

// ---- timers ----
function arm(id, entry) {
  outstanding++;
  queue.push(bare({ op: "timer", id, ms: entry.ms }));
}

function fire(id, entry) {
  outstanding--;
  if (entry.interval) arm(id, entry);
  else pending.delete(id);
  try {
    entry.fn(...entry.args);
  } catch (e) {
    host("uncaught", errorJson(e));
  }
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
  queue.push(bare({ op: "clear", id }));
}

g.setTimeout = (fn, ms, ...args) => addTimer(fn, ms, args, false);
g.setInterval = (fn, ms, ...args) => addTimer(fn, ms, args, true);
g.clearTimeout = clearTimer;
g.clearInterval = clearTimer;

// ---- values as JSON, within a size and a depth ----
const MAX_DEPTH = 100;
const DEEP = `[cut: nested deeper than ${MAX_DEPTH} levels]`;
const TOO_LARGE = {}; // thrown by the replacer once the text would pass its cap

// JSON text of `v` (undefined for undefined), at most about `cap` characters: functions,
// symbols, bigints, Maps, Sets and Errors are described, a cycle reads "[Circular]", and a
// value nested deeper than MAX_DEPTH is cut with a marker. Throws TOO_LARGE past the cap.
function jsonish(v, cap) {
  const seen = new WeakMapCtor(); // object -> its depth
  let size = 0;
  return stringify(v, function (k, x) {
    size += typeof k === "string" ? k.length + 4 : 4;
    const depth = (seen.get(this) || 0) + 1;
    switch (typeof x) {
      case "bigint":
        x = x.toString() + "n";
        break;
      case "function":
        x = `[Function: ${x.name || "anonymous"}]`;
        break;
      case "symbol":
        x = x.toString();
        break;
      case "undefined":
        if (k !== "") x = null;
        break;
      case "object":
        if (x === null) break;
        if (x instanceof MapCtor) x = fromEntries(x);
        else if (x instanceof SetCtor) x = arrayFrom(x);
        else if (x instanceof ErrorCtor) x = `${x.name}: ${x.message}`;
        if (x !== null && typeof x === "object") {
          if (seen.has(x)) {
            x = "[Circular]";
          } else if (depth > MAX_DEPTH) {
            x = DEEP;
          } else {
            seen.set(x, depth);
          }
        }
        break;
    }
    size += typeof x === "string" ? x.length + 2 : 8;
    if (size > cap) throw TOO_LARGE;
    return x;
  });
}

function inspect(v, cap) {
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
      if (v instanceof ErrorCtor) {
        const text = v.stack ? `${v.name}: ${v.message}\n${v.stack}`.trimEnd() : `${v.name}: ${v.message}`;
        return String(text);
      }
      try {
        return jsonish(v, cap);
      } catch (e) {
        if (e === TOO_LARGE) return `[a value too large to print: over ${cap} bytes]`;
        return objectToString.call(v);
      }
    default:
      return String(v);
  }
}

// ---- console ----
// Lines go to the host with the next step, or at once past 64 KB; once the host says the
// output limit is reached, further lines are only counted, for the marker.
let consoleQueue = [];
let consoleQueued = 0;
let consoleFull = false;
let cutBytes = 0;
let cutLines = 0;
let outputCap = 0; // max_output_bytes, asked of the host at the first line

// UTF-8 length: counted here for a short line, by the host for a long one (a loop over
// megabytes in JavaScript, or a regular expression, would take seconds).
function utf8Length(s) {
  // (a lone surrogate cannot cross to the host; as U+FFFD it counts the same 3 bytes)
  if (s.length > 1024) return Number(host("count", apply(toWellFormed, s, [])));
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
  if (host("console", stringify(bare(lines))) === "full") consoleFull = true;
}

const consoleObj = {};
for (const level of ["log", "info", "warn", "error", "debug"]) {
  consoleObj[level] = (...args) => {
    if (!outputCap) outputCap = Number(host("limits")) || 1;
    let text = "";
    for (let i = 0; i < args.length; i++) {
      if (i) text += " ";
      text += inspect(args[i], outputCap + 1);
    }
    if (consoleFull) {
      cutBytes += utf8Length(text) + 1;
      cutLines++;
      return;
    }
    consoleQueue.push(bare([level, text]));
    consoleQueued += text.length;
    if (consoleQueued > 65536) flushConsole();
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
  const problem = host("artifact", json);
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

// ---- Math.random: seeded per VM, from the host, on first use ----
// A VM may start from an image of one booted VM (sandbox/_jsimage.py), which would give every
// run the same sequence. sfc32, two outputs to a double of 53 random bits.
{
  let a = 0, b = 0, c = 0, d = 0, seeded = false;
  const next = () => {
    const t = (((a + b) | 0) + d) | 0;
    d = (d + 1) | 0;
    a = b ^ (b >>> 9);
    b = (c + (c << 3)) | 0;
    c = (((c << 21) | (c >>> 11)) + t) | 0;
    return t >>> 0;
  };
  const random = function random() {
    if (!seeded) {
      const seed = String(host("seed")).split(",");
      a = seed[0] | 0; b = seed[1] | 0; c = seed[2] | 0; d = seed[3] | 0;
      seeded = true;
      for (let i = 0; i < 12; i++) next();
    }
    return ((next() >>> 5) * 67108864 + (next() >>> 6)) / 9007199254740992;
  };
  Object.defineProperty(Math, "random", { value: random, writable: true, enumerable: false, configurable: true });
}

// ---- the host's side of a step ----
// `kind`: 0 while the top level is pending, 1 with its value, 2 with the {value} envelope of a
// script that awaited, 3 with the reason it was rejected. Returns JSON:
//   {ops, console, outstanding}                      work is left: start `ops`, wait, deliver
//   {done: true, value?} | {done: true, error: ...}  nothing is left: the run's outcome
function step(kind, v, cap) {
  const ops = queue;
  queue = [];
  const lines = consoleQueue;
  consoleQueue = [];
  consoleQueued = 0;
  const out = bare({ console: bare(lines), cut: bare([cutBytes, cutLines]), outstanding });
  cutBytes = cutLines = 0;
  if (kind === 0 || (kind !== 3 && outstanding > 0)) return withoutEnd(stringify(out)) + `,"ops":${opsJson(ops)}}`;
  out.done = true;
  if (kind === 3) {
    out.error = parse(errorJson(v), bareJson);
    return stringify(out);
  }
  if (kind === 2) v = v.value;
  if (v === undefined) return stringify(out);
  let text;
  try {
    text = jsonish(v, cap);
  } catch (e) {
    if (e === TOO_LARGE) {
      out.tooLarge = true;
      return stringify(out);
    }
    text = undefined; // not serialisable: described below
  }
  if (text === undefined) text = stringify(inspect(v, cap));
  return withoutEnd(stringify(out)) + `,"value":${text}}`;
}

// An object's JSON without its closing brace, to add members to (by the method as it was).
function withoutEnd(json) {
  return apply(stringSlice, json, [0, -1]);
}

// The ops as JSON: a call's args are the text callTool took.
function opsJson(ops) {
  let text = "[";
  for (let i = 0; i < ops.length; i++) {
    const op = ops[i];
    const argsJson = op.argsJson;
    if (argsJson === undefined) {
      text += (i ? "," : "") + stringify(op);
      continue;
    }
    op.argsJson = undefined; // left out by stringify
    text += (i ? "," : "") + withoutEnd(stringify(op)) + `,"args":${argsJson}}`;
  }
  return text + "]";
}

return { step, deliver };
