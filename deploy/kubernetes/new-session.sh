#!/usr/bin/env bash
# Creates one session from the template: its token (a Secret), its claim, pod and Service.
#   deploy/kubernetes/new-session.sh ID [kubectl options...]    (ID: lowercase letters, digits, -)
# The objects are rendered by the hub's own renderer (runtime/hub/kubernetes_objects.py) from
# session.yaml, so a session made here and one the hub makes are the same. It runs with the
# project's Python ($CODEDESK_PYTHON, else .venv/bin/python, else python3 with PyYAML).
set -euo pipefail
id="${1:?usage: new-session.sh ID [kubectl options]}"; shift
[[ "$id" =~ ^[a-z0-9]([a-z0-9-]{0,40}[a-z0-9])?$ ]] || { echo "ID must be lowercase letters, digits and -" >&2; exit 2; }
root="$(cd "$(dirname "$0")/../.." && pwd)"
py="${CODEDESK_PYTHON:-$root/.venv/bin/python}"
[ -x "$py" ] || py=python3
render() { PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" "$py" -m runtime.hub.kubernetes_objects "$id" "$@"; }
# The Secret with `create`: run again for an existing session, this stops before its token changes.
render --part secret | kubectl "$@" create -f -
render --part session | kubectl "$@" apply -f -
echo "session $id: MCP at http://codedesk-$id:8765/mcp, token in secret codedesk-$id-token"
