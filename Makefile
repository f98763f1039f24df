# hangar's developer entry points. Every target installs what it needs first, so a fresh clone
# on a fresh machine needs nothing done by hand: `make test` is enough.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
ARGS ?=
# Debian packages the local sandboxes and the in-sandbox scripts need.
DEB_PACKAGES := bubblewrap git tar zstd tmux util-linux
# The harness CLIs the tests run for real, pinned (newer Claude Code releases want Node 22).
HARNESS_PACKAGES := @anthropic-ai/claude-code@2.1.197 @openai/codex@0.171.0 \
	@mariozechner/pi-coding-agent@0.73.1
export HANGAR_HARNESS_DIR ?= $(HOME)/.local/share/hangar/harnesses

.PHONY: install system-packages harnesses test bench run lint clean

install: system-packages $(STAMP)

system-packages:
	@scripts/install-system-packages $(DEB_PACKAGES)

harnesses:
	@scripts/install-harnesses "$(HANGAR_HARNESS_DIR)" $(HARNESS_PACKAGES)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install --quiet --upgrade pip
	@$(BIN)/python -m pip install --quiet -e '.[test]'
	@touch $(STAMP)

test: install harnesses
	$(BIN)/python -m pytest $(ARGS)

run: install harnesses
	$(BIN)/hangar serve $(ARGS)

bench: install
	$(BIN)/python -m tests.bench.run $(ARGS)

lint: install
	$(BIN)/ruff check --select F shared tests emulators
	$(BIN)/python -m mypy
	@if command -v terraform >/dev/null 2>&1; then terraform fmt -recursive -check terraform; \
	else echo "terraform is not installed: skipping terraform fmt -check"; fi

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache
