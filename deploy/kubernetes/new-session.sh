#!/usr/bin/env bash
# Creates one session from the template: its token (a Secret), its claim, pod and Service.
#   deploy/kubernetes/new-session.sh ID [kubectl options...]    (ID: lowercase letters, digits, -)
set -euo pipefail
id="${1:?usage: new-session.sh ID [kubectl options]}"; shift
[[ "$id" =~ ^[a-z0-9]([a-z0-9-]{0,40}[a-z0-9])?$ ]] || { echo "ID must be lowercase letters, digits and -" >&2; exit 2; }
here="$(dirname "$0")"
token="$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')"
kubectl "$@" create secret generic "codedesk-$id-token" --from-literal=token="$token"
sed -e "s/codedesk-example/codedesk-$id/g" -e "s/codedesk\/session: example/codedesk\/session: $id/g" \
  "$here/session.yaml" | kubectl "$@" apply -f -
echo "session $id: MCP at http://codedesk-$id:8765/mcp, token in secret codedesk-$id-token"
