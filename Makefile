# codedesk: `make up` runs the product, `make test` runs the tests. Both install what is missing.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
HTTP ?= 127.0.0.1:8765
STAMP := $(VENV)/.codedesk-installed
# The extras installed with codedesk: the tests' (the image installs none: `make venv EXTRAS=`).
EXTRAS ?= [test]
IMAGE ?= codedesk:latest

.PHONY: install system venv test fuzz up down status bench clean image image-test hub-test

install: system $(STAMP)

# System packages and the desktop user (idempotent, quick when nothing is missing).
system:
	bash desktop-image/install-system.sh

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.$(EXTRAS)'
	# Byte-compile codedesk: capability servers run as the desktop user, who cannot write here.
	$(PY) -m compileall -q capabilities runtime sandbox
	# Compile the wasm engines once, here, never inside a request.
	$(PY) -m sandbox.warm
	touch $(STAMP)

# The virtualenv alone (no system packages): what the image's build stage runs.
venv: $(STAMP)

test: install
	# What only the tests use (tsc, which type-checks scripts against the generated declarations).
	CODEDESK_TEST_TOOLS=1 bash desktop-image/install-system.sh
	$(PY) -m pytest

# 10,000 generated hostile scripts (run_js and run_py) against the real runtime, with a random
# seed it prints; CODEDESK_FUZZ_SEED=<seed> replays a failure, CODEDESK_FUZZ_SCRIPTS=N runs N.
FUZZ_SCRIPTS ?= 10000
fuzz: install
	CODEDESK_FUZZ_SCRIPTS=$${CODEDESK_FUZZ_SCRIPTS:-$(FUZZ_SCRIPTS)} CODEDESK_FUZZ_SEED=$${CODEDESK_FUZZ_SEED:-} \
		$(PY) -m pytest tests/e2e/test_generated_scripts.py -q

up: install
	$(VENV)/bin/codedesk desktop up
	exec $(VENV)/bin/codedesk serve --http $(HTTP) --start-servers

down:
	$(VENV)/bin/codedesk desktop down

status:
	$(VENV)/bin/codedesk desktop status

bench: install
	for b in benchmarks/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache

# The container image ($(IMAGE)); builds a Debian base from packages when none can be pulled.
image:
	bash desktop-image/build-image.sh $(IMAGE)

# The image, then its smoke test against a running container (tests/container/).
image-test: install image
	CODEDESK_IMAGE=$(IMAGE) $(PY) -m pytest tests/container/test_image.py -v

# The image, then the session hub against the local Docker engine (tests/hub/).
hub-test: install image
	CODEDESK_IMAGE=$(IMAGE) $(PY) -m pytest tests/hub -v
