#!/usr/bin/env bash
# The container's entrypoint: start the desktop session on /data, then the runtime over HTTP
# with a bearer token ($CODEDESK_TOKEN, or a random one printed below). Stops the session when
# the container is stopped.
set -euo pipefail
cd "$(dirname "$0")/.."

DATA="${CODEDESK_DATA:-/data}"
HTTP_PORT="${CODEDESK_HTTP_PORT:-8765}"
VIEWER_PORT="${CODEDESK_VIEWER_PORT:-6080}"
if [ -z "${CODEDESK_TOKEN:-}" ]; then
  CODEDESK_TOKEN="$(.venv/bin/python -c 'import secrets; print(secrets.token_urlsafe(32))')"
fi
export CODEDESK_TOKEN CODEDESK_DATA="$DATA"

mkdir -p "$DATA"
chmod 755 "$DATA"

# The secret protects the viewer, so it may listen on every interface of the container.
.venv/bin/codedesk desktop up --data "$DATA" --viewer-host 0.0.0.0 --viewer-port "$VIEWER_PORT" \
  ${CODEDESK_VIEW_ONLY:+--view-only}
echo "MCP endpoint: http://<this host>:${HTTP_PORT}/mcp (Authorization: Bearer ${CODEDESK_TOKEN})"

stop() {
  [ -n "${serve_pid:-}" ] && kill -TERM "$serve_pid" 2>/dev/null || true
  .venv/bin/codedesk desktop down --data "$DATA" || true
}
trap stop TERM INT

.venv/bin/codedesk serve --http "0.0.0.0:${HTTP_PORT}" --start-servers &
serve_pid=$!
wait "$serve_pid" || true
stop
