#!/usr/bin/env bash
# The container's entrypoint (run as root under tini, which reaps every orphan):
#
# 1. the runtime, `codedesk serve --http 0.0.0.0:$CODEDESK_HTTP_PORT`, as its own unprivileged
#    user (`codedesk`), started first so it answers run_js while the desktop starts;
#    bearer token $CODEDESK_TOKEN, or a random one printed below;
# 2. the desktop session on /data (`codedesk desktop up`): its supervisor stays root, as the
#    launcher that starts, watches and reaps the session's parts under their users, and starts
#    capability servers as the desktop user for the runtime (spawn service, a unix socket only
#    the runtime's user can reach);
#    With CODEDESK_RUNTIME=off the runtime is not started here: it runs in a container of its
#    own (Kubernetes, deploy/kubernetes/) and reaches the spawn service on a shared volume.
# 3. on SIGTERM (docker stop): the runtime stops, then `desktop down` closes Chromium cleanly
#    (its profile on /data is flushed) and stops the rest.
set -euo pipefail
cd "$(dirname "$0")/.."

DATA="${CODEDESK_DATA:-/data}"
HTTP_PORT="${CODEDESK_HTTP_PORT:-8765}"
VIEWER_PORT="${CODEDESK_VIEWER_PORT:-6080}"
RUNTIME_USER="${CODEDESK_RUNTIME_USER:-codedesk}"
if [ -z "${CODEDESK_TOKEN:-}" ] && [ "${CODEDESK_RUNTIME:-on}" != off ]; then
  CODEDESK_TOKEN="$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')"
  echo "CODEDESK_TOKEN was not set; this container's token: ${CODEDESK_TOKEN}"
fi
# The spawn service and the oversight relay: the supervisor listens there, for the runtime's
# user only.
export CODEDESK_TOKEN CODEDESK_DATA="$DATA" \
  CODEDESK_SPAWN_SOCKET=/run/codedesk/spawn.sock CODEDESK_SPAWN_FOR="$RUNTIME_USER" \
  CODEDESK_OVERSIGHT_SOCKET=/run/codedesk/oversight.sock

if [ "$(id -u)" -ne 0 ]; then
  echo "entrypoint: the container must start as root (its launcher drops every process to its" \
       "own user); remove --user / runAsUser from the container's settings" >&2
  exit 1
fi

mkdir -p "$DATA"
chmod 755 "$DATA"

# Chromium's sandbox needs new user namespaces, which Docker's default seccomp profile refuses:
# say so at once, with the flag, rather than leave "chromium exited during start" to explain it.
if ! unshare --user true 2>/dev/null; then
  echo "entrypoint: the seccomp profile is missing (this container cannot create user namespaces," \
       "which Chromium's sandbox needs): run it with" \
       "--security-opt seccomp=desktop-image/seccomp-chromium.json (also in the image at" \
       "/opt/codedesk/desktop-image/seccomp-chromium.json); on Kubernetes see docs/scaling.md" >&2
fi

serve_pid=""
stopping=0
stop() {
  stopping=1
  [ -n "$serve_pid" ] && kill -TERM "$serve_pid" 2>/dev/null || true
  .venv/bin/codedesk desktop down --data "$DATA" || true
}
trap stop TERM INT

# The runtime: no privileges at all (no_new_privs, no capabilities), its own home and caches.
if [ "${CODEDESK_RUNTIME:-on}" = off ]; then
  sleep infinity &
else
  runtime_home="$(getent passwd "$RUNTIME_USER" | cut -d: -f6)"
  # setpriv execs codedesk itself: on a host whose Python lives under /root (pyenv), a later
  # exec by another program (env) as the unprivileged user is refused, setpriv's is not.
  env HOME="$runtime_home" USER="$RUNTIME_USER" LOGNAME="$RUNTIME_USER" \
    setpriv --reuid="$RUNTIME_USER" --regid="$RUNTIME_USER" --init-groups \
      --no-new-privs --inh-caps=-all --bounding-set=-all -- \
    .venv/bin/codedesk serve --http "0.0.0.0:${HTTP_PORT}" --start-servers &
fi
serve_pid=$!

# The secret protects the viewer, so it may listen on every interface of the container.
env -u CODEDESK_TOKEN .venv/bin/codedesk desktop up --data "$DATA" --viewer-host 0.0.0.0 \
  --viewer-port "$VIEWER_PORT" ${CODEDESK_VIEW_ONLY:+--view-only} || {
  [ "$stopping" = 1 ] || { echo "entrypoint: the desktop session did not start" >&2; stop; }
  exit 1
}
[ "${CODEDESK_RUNTIME:-on}" = off ] ||
  echo "MCP endpoint: http://<this host>:${HTTP_PORT}/mcp (Authorization: Bearer <CODEDESK_TOKEN>)"

status=0
wait "$serve_pid" || status=$?
# `wait` returns early when a trapped signal arrives: wait for the runtime to be gone.
while kill -0 "$serve_pid" 2>/dev/null; do wait "$serve_pid" || true; done
[ "$stopping" = 1 ] || stop
exit "$status"
