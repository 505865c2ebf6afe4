"""Shared fixtures, one module per concern under tests/fixtures/.

- pages:   `pages_server`, a local HTTP server for test pages (the internet is not reachable).
- session: `desktop_session`, the real desktop session (Xvfb, XFCE, Chromium, noVNC).
- runtime: spawning the real `codedesk serve` and calling run_js / run_py through an MCP client.
"""

pytest_plugins = [
    "tests.fixtures.pages",
    "tests.fixtures.session",
    "tests.fixtures.runtime",
]
