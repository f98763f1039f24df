# hangar's developer entry points. Every target installs what it needs first, so a fresh clone
# on a fresh machine needs nothing done by hand: `make test` is enough.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
ARGS ?=
# Debian packages the local sandboxes and the in-sandbox scripts need.
DEB_PACKAGES := bubblewrap git tar zstd util-linux slirp4netns nftables e2fsprogs
# What only the tests need besides: the browser the dashboard's tests drive (Playwright for
# Python through executable_path; Playwright's own browser download is not used), and ip, which
# makes the network namespaces the sandbox network tests stand for the host's interfaces with.
TEST_DEB_PACKAGES := chromium iproute2
# The harness CLIs the tests run for real, pinned (newer Claude Code releases want Node 22).
HARNESS_PACKAGES := @anthropic-ai/claude-code@2.1.197 @openai/codex@0.171.0 \
	@mariozechner/pi-coding-agent@0.73.1
export HANGAR_HARNESS_DIR ?= $(HOME)/.local/share/hangar/harnesses
# A real MCP client nobody here wrote, for the MCP tests: the MCP Inspector in CLI mode, pinned
# (it asks for Node 22 in its manifest, and runs on Node 20 all the same; newer ones do not).
INSPECTOR_PACKAGE := @modelcontextprotocol/inspector@0.21.2
export HANGAR_TEST_TOOLS_DIR ?= $(HOME)/.local/share/hangar/test-tools
# The Cloud Tasks emulator pins protobuf<5, which clashes with ours: it gets a venv of its own.
TASKS_VENV := .venv-tasks
TASKS_EMULATOR_VERSION := 0.6.2
TASKS_STAMP := $(TASKS_VENV)/.installed-$(TASKS_EMULATOR_VERSION)
# The dashboard's browser libraries, built from the npm packages pinned in its lock file.
DASHBOARD := shared/hangar/dashboard
ASSETS_STAMP := $(DASHBOARD)/static/vendor/.built
# cryptography (built for the stable ABI) and cffi's extension for CPython 3.9..3.14, which
# hangar's in-sandbox scripts seal with where a sandbox gets them (docs/architecture.md,
# "Sealing inside the sandbox"); one folder per machine under build/sandbox-crypto.
SANDBOX_CRYPTO := build/sandbox-crypto
SANDBOX_CRYPTOGRAPHY := 50.0.2
SANDBOX_CFFI := 2.0.0
SANDBOX_CRYPTO_STAMP := $(SANDBOX_CRYPTO)/.fetched-$(SANDBOX_CRYPTOGRAPHY)-$(SANDBOX_CFFI)

.PHONY: install system-packages test-packages harnesses test-tools tasks-emulator assets sandbox-crypto test bench run package lint clean

install: system-packages $(STAMP) assets sandbox-crypto

system-packages:
	@scripts/install-system-packages $(DEB_PACKAGES)

test-packages:
	@scripts/install-system-packages $(TEST_DEB_PACKAGES)

assets: $(ASSETS_STAMP)

$(ASSETS_STAMP): $(DASHBOARD)/package.json $(DASHBOARD)/package-lock.json
	@scripts/build-dashboard-assets

sandbox-crypto: $(SANDBOX_CRYPTO_STAMP)

$(SANDBOX_CRYPTO_STAMP): | $(STAMP)
	@$(BIN)/python scripts/fetch-sandbox-crypto $(SANDBOX_CRYPTO) $(SANDBOX_CRYPTOGRAPHY) $(SANDBOX_CFFI)

harnesses:
	@scripts/install-harnesses "$(HANGAR_HARNESS_DIR)" $(HARNESS_PACKAGES)

test-tools:
	@scripts/install-harnesses "$(HANGAR_TEST_TOOLS_DIR)" $(INSPECTOR_PACKAGE)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install --quiet --upgrade pip
	@$(BIN)/python -m pip install --quiet -e '.[test]'
	@touch $(STAMP)

tasks-emulator: $(TASKS_STAMP)

$(TASKS_STAMP):
	@test -x $(TASKS_VENV)/bin/python || $(PYTHON) -m venv $(TASKS_VENV)
	@$(TASKS_VENV)/bin/python -m pip install --quiet --upgrade pip
	@$(TASKS_VENV)/bin/python -m pip install --quiet 'gcloud-tasks-emulator==$(TASKS_EMULATOR_VERSION)'
	@touch $(TASKS_STAMP)

test: install test-packages harnesses test-tools tasks-emulator
	$(BIN)/python -m pytest --durations=30 $(ARGS)

run: install harnesses tasks-emulator
	$(BIN)/hangar serve $(ARGS)

bench: install tasks-emulator
	$(BIN)/python -m tests.bench.run $(ARGS)

# One source archive per Cloud Run function in dist/functions (see docs/deploy.md).
package: install sandbox-crypto
	$(BIN)/python scripts/package-functions $(ARGS)

lint: install
	$(BIN)/ruff check --select F shared tests emulators
	$(BIN)/python -m mypy
	@for f in functions/*/main.py; do $(BIN)/python -m mypy --strict $$f || exit 1; done
	@if command -v terraform >/dev/null 2>&1; then terraform fmt -recursive -check terraform; \
	else echo "terraform is not installed: skipping terraform fmt -check"; fi

clean:
	rm -rf $(VENV) $(TASKS_VENV) .pytest_cache .mypy_cache build/dashboard-assets $(DASHBOARD)/static/vendor
