# natsbroker: `make run` serves on 4222 (monitoring 8222, JetStream in ./data, change feed in
# ./data/changefeed: etc/dev.conf); `make test` runs the suite.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test fuzz venv bench clean js

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip setuptools wheel

# Reinstall whenever the package metadata changes; editable so edits are live.
$(STAMP): $(BIN)/python setup.cfg setup.py pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[test,spark,admin]' --config-settings editable_mode=compat
	touch $(STAMP)

venv: $(STAMP)

run: $(STAMP)
	$(BIN)/natsbroker -p 4222 -m 8222 -c etc/dev.conf

# The browser test's bundle (tests/test_browser.py): the official NATS JavaScript
# client pinned by tests/browser/package-lock.json, bundled by esbuild; npm ci and
# the bundle rerun only when their inputs change. Not committed (.gitignore).
JS := tests/browser
JS_STAMP := $(JS)/node_modules/.installed
JS_BUNDLE := $(JS)/build/bundle.js

$(JS_STAMP): $(JS)/package.json $(JS)/package-lock.json
	cd $(JS) && npm ci --no-audit --no-fund --loglevel=error
	touch $(JS_STAMP)

$(JS_BUNDLE): $(JS_STAMP) $(JS)/entry.js
	cd $(JS) && npm run --silent build

js: $(JS_BUNDLE)

test: $(STAMP) $(JS_BUNDLE)
	$(BIN)/python -m pytest -q tests

# The hypothesis tests with fresh random examples (`make test` uses fixed ones).
fuzz: $(STAMP)
	HYPOTHESIS_PROFILE=fuzz $(BIN)/python -m pytest -q $$(grep -l "from hypothesis" tests/test_*.py)

bench: $(STAMP)
	$(BIN)/python -m tools.bench

clean:
	rm -rf $(VENV) build *.egg-info $(JS)/node_modules $(JS)/build
