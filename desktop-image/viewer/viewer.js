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
import RFB from './core/rfb.js';

const params = new URLSearchParams(location.search);
const token = params.get('token') || '';
const viewOnly = params.get('view_only') === '1' || params.get('view_only') === 'true';
const statusEl = document.getElementById('status');
const wsBase = (location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + '/websockify?token=';

// Exposed for people debugging and for tests: connection state, how many times it connected,
// and the last screen size.
window.codedesk = { state: 'connecting', connects: 0, screen: null, resizeReplies: 0, error: null, lease: null };

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
