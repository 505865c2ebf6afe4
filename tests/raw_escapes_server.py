"""A third-party MCP server over stdio that writes its JSON by hand, as servers outside Python's
SDK may: its strings escape lone surrogates (`"\\ud800"`, valid JSON, what `json.dumps` writes
for one). Tool `lone` answers text and structured content holding them.

Run: python tests/raw_escapes_server.py
"""

import json
import sys

LONE = "x\ud800y"

for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message:
        continue
    match message["method"]:
        case "initialize":
            result = {"protocolVersion": message["params"]["protocolVersion"], "capabilities": {"tools": {}},
                      "serverInfo": {"name": "raw-escapes", "version": "1"}}
        case "tools/list":
            result = {"tools": [{"name": "lone", "description": "answers lone surrogates",
                                 "inputSchema": {"type": "object"}}]}
        case "tools/call":
            result = {"content": [{"type": "text", "text": LONE}], "structuredContent": {"k\udc00": LONE}}
        case _:
            result = {}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}) + "\n")
    sys.stdout.flush()
