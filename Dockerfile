# codedesk: one container per desktop session. Its disk is /data (Chromium profile and
# downloads under /data/chrome, the desktop user's home, logs); everything the image does
# lives in scripts CI also runs (desktop-image/install-system.sh, make install,
# desktop-image/entrypoint.sh).
FROM debian:12-slim

ENV DEBIAN_FRONTEND=noninteractive \
    LANG=C.UTF-8 \
    CODEDESK_DATA=/data \
    CODEDESK_HTTP_PORT=8765 \
    CODEDESK_VIEWER_PORT=6080

RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends python3 python3-venv ca-certificates make \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/codedesk

# System packages and the desktop user first: the slowest layer, and it changes least.
COPY desktop-image/install-system.sh desktop-image/install-system.sh
RUN bash desktop-image/install-system.sh && rm -rf /var/lib/apt/lists/*

# codedesk itself: the venv, the package, and the wasm engines compiled once (make install).
COPY . .
RUN make install

VOLUME ["/data"]
# The runtime's MCP endpoint over HTTP (bearer token) and the noVNC viewer (per-session secret).
EXPOSE 8765 6080

ENTRYPOINT ["/opt/codedesk/desktop-image/entrypoint.sh"]
