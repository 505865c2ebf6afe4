// The codedesk viewer: noVNC's RFB client on the whole window, plus the resize channel that
// makes the X screen follow this window (320x200 to 2560x1600, clamped by the session).
//
// URL parameters: token (the session's secret, required), view_only=1 (watch only).
// Both connections go through websockify, which only knows the secret's tokens:
//   /websockify?token=<secret>         -> x11vnc
//   /websockify?token=<secret>.resize  -> the session's resize service ("WxH\n" lines)
//   /websockify?token=<secret>.lease   -> the input lease ("release" / "state" lines, answered
//                                         "person" or "agent"): moving the pointer or typing here
//                                         gives this person the screen; the button hands it back
//   /websockify?token=<secret>.oversight -> the agent's runs and calls as they happen, and the
//                                         approvals it waits for (JSON lines; see
//                                         runtime/desktop/oversight.py): the side panel, the
//                                         agent's pointer and banner, and the approval dialog
// URL parameter overlay=0 starts with the agent's pointer and banner off.
import RFB from './core/rfb.js';

const params = new URLSearchParams(location.search);
const token = params.get('token') || '';
const viewOnly = params.get('view_only') === '1' || params.get('view_only') === 'true';
const statusEl = document.getElementById('status');
const wsBase = (location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + '/websockify?token=';

// Exposed for people debugging and for tests: connection state, how many times it connected,
// and the last screen size.
window.codedesk = { state: 'connecting', connects: 0, screen: null, resizeReplies: 0, error: null, lease: null,
                    oversight: { connected: false, events: [], pending: [], answered: [] } };

function setStatus(text) {
  statusEl.textContent = text;
  statusEl.style.display = text ? '' : 'none';
}

let rfb = null;

function connect() {
  rfb = new RFB(document.getElementById('screen'), wsBase + encodeURIComponent(token),
                { wsProtocols: ['binary'] });
  rfb.viewOnly = viewOnly;
  rfb.scaleViewport = false;  // the screen itself follows the window; nothing to scale
  rfb.resizeSession = false;  // x11vnc refuses client resizes; the resize channel does it
  rfb.focusOnClick = true;

  rfb.addEventListener('connect', () => {
    window.codedesk.state = 'connected';
    window.codedesk.connects += 1;
    setStatus('');
    requestResize();
  });
  rfb.addEventListener('disconnect', (e) => {
    if (window.codedesk.connects > 0) {
      // The session restarts a crashed VNC server or proxy (the proxy may even close the
      // socket cleanly when its target dies): follow it back.
      window.codedesk.state = 'reconnecting';
      setStatus('connection lost, reconnecting…');
      setTimeout(connect, 1000);
      return;
    }
    window.codedesk.state = e.detail.clean ? 'disconnected' : 'refused';
    setStatus(e.detail.clean ? 'disconnected' : 'connection refused (is the token right?)');
  });
  rfb.addEventListener('securityfailure', (e) => {
    window.codedesk.state = 'refused';
    window.codedesk.error = e.detail.reason || 'security failure';
  });
}

connect();

// --- the resize channel ---------------------------------------------------------------
let resizeWs = null;
let pending = null;
let timer = null;

function openResize() {
  resizeWs = new WebSocket(wsBase + encodeURIComponent(token + '.resize'), ['binary']);
  resizeWs.binaryType = 'arraybuffer';
  resizeWs.onopen = () => { if (pending) send(pending); };
  resizeWs.onmessage = (ev) => {
    const text = new TextDecoder().decode(ev.data).trim();
    for (const line of text.split('\n')) {
      const m = /^(\d+)x(\d+)$/.exec(line.trim());
      if (m) {
        window.codedesk.screen = { width: +m[1], height: +m[2] };
        window.codedesk.resizeReplies += 1;
      } else {
        window.codedesk.error = line;
      }
    }
  };
  resizeWs.onclose = () => { resizeWs = null; };
}

function send(size) {
  if (!resizeWs) openResize();
  if (resizeWs.readyState !== WebSocket.OPEN) { pending = size; return; }
  pending = null;
  resizeWs.send(new TextEncoder().encode(`${size.width}x${size.height}\n`));
}

function requestResize() {
  if (window.codedesk.state !== 'connected') return;
  send({ width: Math.round(window.innerWidth), height: Math.round(window.innerHeight) });
}

window.addEventListener('resize', () => {
  clearTimeout(timer);
  timer = setTimeout(requestResize, 100);  // one request per burst of window resizes
});

// --- the input lease: who may use the screen -------------------------------------------------
const handback = document.getElementById('handback');
let leaseWs = null;

function lease(command) {
  if (viewOnly) return;
  if (!leaseWs) {
    leaseWs = new WebSocket(wsBase + encodeURIComponent(token + '.lease'), ['binary']);
    leaseWs.binaryType = 'arraybuffer';
    leaseWs.onmessage = (ev) => {
      for (const line of new TextDecoder().decode(ev.data).trim().split('\n')) {
        if (line === 'person' || line === 'agent') {
          window.codedesk.lease = line;
          handback.style.display = line === 'person' ? 'block' : 'none';
        }
      }
    };
    leaseWs.onclose = () => { leaseWs = null; };
  }
  const send = () => leaseWs.send(new TextEncoder().encode(command + '\n'));
  if (leaseWs.readyState === WebSocket.OPEN) send(); else leaseWs.addEventListener('open', send, { once: true });
}

handback.addEventListener('click', () => lease('release'));
// The button shows while this person holds the screen (their input takes it at once).
setInterval(() => { if (window.codedesk.state === 'connected') lease('state'); }, 1000);

// --- oversight: what the agent does, and the approvals it waits for -------------------------
const $ = (id) => document.getElementById(id);
const watch = window.codedesk.oversight;
const steps = new Map();  // "run/seq" -> the panel's line for that call
let overseer = null;
let showAim = params.get('overlay') !== '0';
$('showaim').checked = showAim;
$('showaim').addEventListener('change', () => { showAim = $('showaim').checked; if (!showAim) clearAim(); });
$('paneltoggle').addEventListener('click', () => {
  $('panel').style.display = $('panel').style.display === 'block' ? 'none' : 'block';
});

function openOversight() {
  overseer = new WebSocket(wsBase + encodeURIComponent(token + '.oversight'), ['binary']);
  overseer.binaryType = 'arraybuffer';
  let buffered = '';
  const decoder = new TextDecoder();
  overseer.onopen = () => { watch.connected = true; };
  overseer.onmessage = (ev) => {
    buffered += decoder.decode(ev.data, { stream: true });
    let cut;
    while ((cut = buffered.indexOf('\n')) >= 0) {
      const line = buffered.slice(0, cut);
      buffered = buffered.slice(cut + 1);
      try { received(JSON.parse(line)); } catch (e) { window.codedesk.error = String(e); }
    }
  };
  overseer.onclose = () => {  // the session restarts; follow it back
    watch.connected = false;
    overseer = null;
    setTimeout(openOversight, 2000);
  };
}

function received(m) {
  if (m.t === 'hello') {
    watch.pending = m.pending;
    for (const e of m.recent) shown(e, false);
    showApproval();
  } else if (m.t === 'event') {
    shown(m.e, true);
  } else if (m.t === 'ask') {
    watch.pending.push({ id: m.id, request: m.request });
    showApproval();
  } else if (m.t === 'closed') {
    watch.pending = watch.pending.filter((p) => p.id !== m.id);
    showApproval();
  }
}

function shown(e, live) {
  watch.events.push(e);
  if (watch.events.length > 200) watch.events.shift();
  if (e.kind === 'run_start') {
    $('run').textContent = `${e.run} (${e.language === 'py' ? 'run_py' : 'run_js'}) running: ${e.script}`;
    $('steps').replaceChildren();
    steps.clear();
  } else if (e.kind === 'run_end') {
    $('run').textContent = `${e.run}: ended ${e.outcome}, ${e.calls} call(s)`;
    if (live) setTimeout(() => { $('banner').style.display = 'none'; }, 1500);
  } else if (e.kind === 'call') {
    const li = document.createElement('li');
    li.textContent = `${e.seq}. ${e.server}.${e.tool} ${e.step}${e.line ? ` (line ${e.line})` : ''} …`;
    steps.set(`${e.run}/${e.seq}`, li);
    $('steps').prepend(li);
    while ($('steps').children.length > 12) $('steps').lastChild.remove();
    if (live && showAim) {
      $('banner').textContent = `agent: run ${e.run}, step ${e.seq}: ${e.server}.${e.tool} ${e.step}`;
      $('banner').style.display = 'block';
      aim(e.targets || []);
    }
  } else if (e.kind === 'result') {
    const li = steps.get(`${e.run}/${e.seq}`);
    if (li) {
      li.textContent = li.textContent.replace(/ …$/, e.ok ? ` ok (${e.ms} ms)` : ` failed: ${e.error}`);
      if (!e.ok) li.className = 'error';
    }
    if (live) setTimeout(clearAim, 1500);
  }
}

// The agent's pointer: a box on each point the batch is about to act on, apart from the cursor.
function aim(points) {
  clearAim();
  const canvas = document.querySelector('#screen canvas');
  const origin = canvas ? canvas.getBoundingClientRect() : { left: 0, top: 0 };
  for (const p of points) {
    const box = document.createElement('div');
    box.className = 'aim';
    box.style.left = `${origin.left + p.x}px`;
    box.style.top = `${origin.top + p.y}px`;
    const label = document.createElement('span');
    label.textContent = p.type;
    box.append(label);
    document.body.append(box);
  }
}

function clearAim() {
  for (const box of document.querySelectorAll('.aim')) box.remove();
}

function showApproval() {
  const first = watch.pending[0];
  if (!first || viewOnly) { $('approval').style.display = 'none'; return; }
  const r = first.request;
  $('approvaltool').textContent = `${r.server}.${r.tool}`;
  $('approvalrule').textContent = r.rule;
  $('approvalstep').textContent = r.step;
  $('approvalwhere').textContent = r.line ? `from line ${r.line} of the script` : '';
  const bound = (r.elements || []).map((e) => `${e.selector} (${e.count === null ? 'not readable here' : e.count
    ? `${e.tag} "${e.text || ''}"` : 'not on the page'})`);
  $('approvalfiles').textContent = r.files && r.files.length ? `bound to the files: ${r.files.join(', ')}`
    : bound.length ? `bound to the elements: ${bound.join(', ')}` : '';
  $('approvalargs').textContent = r.arguments;
  showTarget(r);
  $('approval').dataset.id = first.id;
  $('approval').style.display = 'block';
  if (showAim) aim(r.points || []);
}

// The screenshot taken when the call was asked about, its targets boxed: a desktop batch's points
// (screen pixels, the shot's origin at preview.left/top), a browser batch's elements (page pixels).
function showTarget(r) {
  const shot = $('approvalshot');
  for (const mark of shot.querySelectorAll('.mark')) mark.remove();
  if (!r.preview || !r.preview.image) { shot.style.display = 'none'; return; }
  const img = $('approvalimg');
  const boxes = r.preview.space === 'screen'
    ? (r.points || []).map((p) => [p.x - r.preview.left - 16, p.y - r.preview.top - 16, 32, 32])
    : (r.elements || []).filter((e) => e.box).map((e) => e.box);
  img.onload = () => {
    const scale = img.clientWidth / img.naturalWidth;
    for (const [x, y, w, h] of boxes) {
      const mark = document.createElement('div');
      mark.className = 'mark';
      Object.assign(mark.style, { left: `${x * scale}px`, top: `${y * scale}px`,
                                  width: `${Math.max(w * scale, 4)}px`, height: `${Math.max(h * scale, 4)}px` });
      shot.append(mark);
    }
  };
  img.src = `data:image/png;base64,${r.preview.image}`;
  shot.style.display = 'block';
}

function answer(answerWord) {
  const id = $('approval').dataset.id;
  if (!id || !overseer || overseer.readyState !== WebSocket.OPEN) return;
  overseer.send(new TextEncoder().encode(JSON.stringify({ t: 'answer', id, answer: answerWord }) + '\n'));
  watch.answered.push({ id, answer: answerWord });
  watch.pending = watch.pending.filter((p) => p.id !== id);
  showApproval();
}

$('approve').addEventListener('click', () => answer('accept'));
$('deny').addEventListener('click', () => answer('decline'));
openOversight();
