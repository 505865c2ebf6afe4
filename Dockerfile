# codedesk: one container per desktop session. Its disk is /data (Chromium profile and
# downloads under /data/chrome, the desktop user's home, logs); everything the image does
# lives in scripts CI also runs (desktop-image/install-system.sh, make venv,
# desktop-image/entrypoint.sh). Build it with `make image` (it makes a Debian base from
# packages when none can be pulled); run it as the README says (seccomp profile included).
ARG BASE=debian:12-slim

# ---------------------------------------------------------------- build stage
# The virtualenv, with the one dependency that compiles (evdev, for pynput), and the wasm
# engines compiled into the runtime user's caches. Compilers stay in this stage.
FROM ${BASE} AS build
ENV DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt
# The build host's extra certificate authorities (make image puts them here; none otherwise):
# trusted in this stage only, never copied to the final image.
COPY desktop-image/build-ca/ /usr/local/share/ca-certificates/codedesk-build/
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends ca-certificates make python3 python3-venv \
      python3-dev gcc libc6-dev linux-libc-dev >/dev/null \
 && update-ca-certificates >/dev/null \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/codedesk
# Dependencies first, from pyproject.toml alone (empty packages stand in for the code), so a
# change of the code does not download them again.
COPY pyproject.toml README.md ./
RUN mkdir runtime sandbox capabilities && touch runtime/__init__.py sandbox/__init__.py capabilities/__init__.py \
 && python3 -m venv .venv && .venv/bin/pip install -q --upgrade pip \
 && .venv/bin/pip install -q -e . \
 && rm -rf runtime sandbox capabilities
COPY . .
# make venv: the package (editable, as on a host), byte-compiled, and the wasm engines
# compiled into the caches of the runtime's user (its home is the same in the final image).
RUN rm -f desktop-image/build-ca/*.crt \
 && HOME=/home/codedesk make venv EXTRAS= \
 && rm -rf .venv/lib/python3*/site-packages/pip .venv/bin/pip*
# The dependencies' own test suites are not needed to run them.
RUN find .venv/lib -depth -type d -name tests -path '*/site-packages/*' -exec rm -rf {} +

# ---------------------------------------------------------------- final image
FROM ${BASE}
ENV DEBIAN_FRONTEND=noninteractive \
    LANG=C.UTF-8 \
    CODEDESK_DATA=/data \
    CODEDESK_HTTP_PORT=8765 \
    CODEDESK_VIEWER_PORT=6080
COPY desktop-image/dpkg-slim.cfg /etc/dpkg/dpkg.cfg.d/codedesk-slim
COPY desktop-image/install-system.sh /opt/codedesk/desktop-image/install-system.sh
# System packages and the session's users: the slowest layer, and it changes least.
RUN apt-get update -qq \
 && bash /opt/codedesk/desktop-image/install-system.sh --no-build-tools \
 && apt-get install -y -qq --no-install-recommends tini >/dev/null \
 && apt-get clean && rm -rf /var/lib/apt/lists/* /var/cache/debconf/*-old /var/log/apt /var/log/dpkg.log \
 && find /usr/share/locale -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} + \
 && find /usr/share/doc -mindepth 2 ! -name copyright ! -type d -delete
COPY --from=build /opt/codedesk /opt/codedesk
COPY --from=build --chown=codedesk:codedesk /home/codedesk/.cache /home/codedesk/.cache
WORKDIR /opt/codedesk

VOLUME ["/data"]
# The runtime's MCP endpoint over HTTP (bearer token; /healthz without) and the noVNC viewer
# (per-session secret).
EXPOSE 8765 6080
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s \
  CMD ["/opt/codedesk/.venv/bin/python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('CODEDESK_HTTP_PORT', '8765'), timeout=4)"]
# Started as root: tini reaps, the entrypoint starts the session supervisor (root, the
# launcher) and the runtime as its own user; see SECURITY.md, "The container".
ENTRYPOINT ["/usr/bin/tini", "--", "/opt/codedesk/desktop-image/entrypoint.sh"]
