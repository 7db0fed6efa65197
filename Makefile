# shellward: `make serve` starts the daemon, `make test` runs the whole suite.
# Both install what is missing first: a virtualenv with the project, and bubblewrap.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
# serve: the directory commands may run in (by default a directory of its own, made if
# missing: the clone itself is no workspace; as root, under /srv, since a root daemon's
# sandbox user must reach it and /root is private), and more shellwardd flags
# (SERVE_ARGS='--log-format text --metrics 127.0.0.1:9464').
DEFAULT_WORKSPACE := $(if $(filter 0,$(shell id -u)),/srv,$(HOME))/shellward-workspace
WORKSPACE  ?= $(DEFAULT_WORKSPACE)
SERVE_ARGS ?=

.PHONY: serve test proto bench lint system-deps install clean

## serve: install what is missing, then run the daemon for WORKSPACE (Ctrl-C stops it)
serve: install
	@if [ "$(WORKSPACE)" = "$(DEFAULT_WORKSPACE)" ]; then mkdir -p "$(WORKSPACE)"; \
		echo "serving $(WORKSPACE), the default workspace: make serve WORKSPACE=DIR serves" \
		     "another (absolute, or relative to this clone)" >&2; fi
	$(VENV)/bin/shellwardd --workspace "$(WORKSPACE)" $(SERVE_ARGS)

## test: install what is missing, then run the whole test suite
# In TEST_WORKERS processes (pytest-xdist; 0: in this one): most of a test's time is spent
# waiting on real daemons, sandboxes and servers, so a worker more than the cores still pays.
# --dist loadfile keeps a module's tests in one worker: a daemon its tests share starts once.
TEST_WORKERS ?= 3
test: install
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

## proto: regenerate the committed gRPC/protobuf code from protos/
proto: install
	$(PY) protos/generate.py

## bench: run the benchmarks (figures go into docs/performance.md by hand)
bench: install
	$(PY) bench/overhead.py
	$(PY) bench/throughput.py
	$(PY) bench/classify.py
	$(PY) bench/detect.py --sizes 1000,10000
	$(PY) bench/fleet.py
	$(PY) bench/short_rpcs.py
	$(PY) bench/network.py
	$(PY) bench/staged.py

## lint: ruff and mypy (daemon/ and client/ are mypy's source roots)
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

install: system-deps $(STAMP)

# bubblewrap (the sandbox), util-linux (prlimit, setpriv, unshare), fuse-overlayfs (staged
# writes where the kernel's overlayfs cannot be mounted: --overlay), gcc (the red-team
# tests build a preload library), python3-venv and postgresql (the fleet tests start a
# throw-away server: tests/postgres.py), the system's python3 (the network relay inside the
# sandbox), curl and openssl (the network tests' client and certificate) come from Debian
# when missing.
system-deps:
	@missing=""; \
	command -v bwrap >/dev/null 2>&1 || missing="$$missing bubblewrap"; \
	command -v prlimit >/dev/null 2>&1 || missing="$$missing util-linux"; \
	command -v setpriv >/dev/null 2>&1 || missing="$$missing util-linux"; \
	command -v fuse-overlayfs >/dev/null 2>&1 || missing="$$missing fuse-overlayfs"; \
	command -v gcc >/dev/null 2>&1 || missing="$$missing gcc"; \
	$(PYTHON) -c 'import ensurepip, venv' >/dev/null 2>&1 || missing="$$missing python3-venv"; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	PATH=/usr/local/bin:/usr/bin:/bin command -v python3 >/dev/null 2>&1 || missing="$$missing python3"; \
	command -v curl >/dev/null 2>&1 || missing="$$missing curl"; \
	command -v openssl >/dev/null 2>&1 || missing="$$missing openssl"; \
	if [ -n "$$missing" ]; then \
		echo "installing system packages:$$missing"; \
		if [ "$$(id -u)" != 0 ]; then SUDO=sudo; fi; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
