# natsbroker: `make run` serves on 4222 (monitoring 8222, JetStream in ./data, change feed in
# ./data/changefeed: etc/dev.conf); `make test` runs the suite.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint fuzz venv build bench soak chaos clean js client313

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip setuptools wheel

# Reinstall whenever the package metadata changes; editable so edits are live. The
# editable install is one .pth entry for the repository root (setup.cfg's package_dir
# "= ."), so twistd's scan of twisted/plugins/ sees natsbroker_plugin.py from anywhere.
# The build requirements (pyproject.toml: Cython) go into the venv too, for `make build`.
$(STAMP): $(BIN)/python setup.cfg setup.py pyproject.toml
	$(BIN)/python -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"]))' \
	    | $(BIN)/python -m pip install --quiet -r /dev/stdin
	$(BIN)/python -m pip install --quiet -e '.[test,spark,admin]'
	touch $(STAMP)

# The compiled hot modules (setup.py), rebuilt in place if their sources changed: incremental,
# so a build never lags the source it is tested as. Without Cython or a C compiler it warns.
build: $(STAMP)
	$(BIN)/python setup.py --quiet build_ext --inplace -j 2

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

# nats-core and nats-jetstream (tests/test_nats_core.py) need Python >= 3.13: a venv of their
# own, from tests/nats_core/requirements.txt. pyenv's `python3.13` shim fails while 3.13 is not
# an active pyenv version, so pyenv's 3.13 install is the fallback; PYTHON313=... overrides.
PYTHON313 ?= $(or $(shell python3.13 -c 'import sys; print(sys.executable)' 2>/dev/null),$(lastword $(wildcard $(HOME)/.pyenv/versions/3.13*/bin/python3.13)),python3.13)
CLIENT313 := .venv-client313
CLIENT313_STAMP := $(CLIENT313)/.installed

$(CLIENT313)/bin/python:
	@py='$(PYTHON313)'; "$$py" -c 'import sys; assert sys.version_info >= (3, 13)' 2>/dev/null || { \
	    echo "make: nats-core needs Python >= 3.13 and '$$py' is not one: install it (pyenv install 3.13)" \
	         "or pass PYTHON313=/path/to/python3.13" >&2; exit 1; }; \
	    echo "$$py -m venv $(CLIENT313)"; "$$py" -m venv $(CLIENT313)
	$(CLIENT313)/bin/python -m pip install --quiet --upgrade pip

$(CLIENT313_STAMP): $(CLIENT313)/bin/python tests/nats_core/requirements.txt
	$(CLIENT313)/bin/python -m pip install --quiet -r tests/nats_core/requirements.txt
	touch $(CLIENT313_STAMP)

client313: $(CLIENT313_STAMP)

# Against the compiled build (tests/test_compiled.py fails without one, and reruns the
# parser and subject-index property tests with NATSBROKER_PURE=1, the interpreted build).
# In parallel (pytest-xdist): the tests mostly wait on sockets and subprocesses, so more
# workers than cores pays; each test has its own ports and directories. The long tests
# (marker `long`) are collected first and loadgroup hands them out first, one per worker;
# xdist_group keeps a module that must not run twice at once (test_wheel) on one worker.
# TEST_WORKERS=0 runs serially.
TEST_WORKERS ?= 4
# ruff (pyproject.toml): pyflakes and import order over the whole tree.
lint: $(STAMP)
	$(BIN)/ruff check .

test: lint build $(JS_BUNDLE) $(CLIENT313_STAMP)
	NATSBROKER_REQUIRE_COMPILED=1 $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup -m 'not chaos' tests

# The hypothesis tests with fresh random examples (`make test` uses fixed ones).
fuzz: $(STAMP)
	HYPOTHESIS_PROFILE=fuzz $(BIN)/python -m pytest -q $$(grep -l "from hypothesis" tests/test_*.py)

# One report: tools/bench/report/REPORT.md + plots (generated, ignored by git); a failed
# measurement does not stop the others, the report shows what failed.
BENCH_REPORT = tools/bench/report
bench: $(STAMP)
	mkdir -p $(BENCH_REPORT)
	-$(BIN)/python -m tools.bench --json > $(BENCH_REPORT)/throughput.json
	-$(BIN)/python -m tools.bench.cluster | tee $(BENCH_REPORT)/cluster.txt
	-$(BIN)/python -m tools.bench.jscluster --replicas 3 --consume --msgs 5000 | tee $(BENCH_REPORT)/jscluster.txt
	-$(BIN)/python -m tools.bench.curves --out $(BENCH_REPORT)
	-$(BIN)/python -m tools.bench.latency --out $(BENCH_REPORT)
	$(BIN)/python -m tools.bench.report --dir $(BENCH_REPORT)

# Crash-loop soak of JetStream (SIGKILL every 2-6 s for 10 minutes, then checks): not in `make test`.
SOAK_MINUTES ?= 10
# Long fault runs outside `make test`: the Raft state machine under thousands
# of fresh random schedules of loss, reordering, duplication, partitions and
# restarts.
CHAOS_EXAMPLES ?= 3000
chaos: $(STAMP)
	HYPOTHESIS_PROFILE=fuzz RAFT_CHAOS_EXAMPLES=$(CHAOS_EXAMPLES) $(BIN)/python -m pytest -q -p no:cacheprovider --timeout=0 tests/test_raft_node.py -k chaos
	$(BIN)/python -m pytest -q -p no:cacheprovider -m chaos tests

soak: $(STAMP)
	$(BIN)/python -m tools.soak --minutes $(SOAK_MINUTES)

clean:
	rm -rf $(VENV) $(CLIENT313) build *.egg-info $(JS)/node_modules $(JS)/build
	find . \( -name '.venv*' -o -name .git -o -name node_modules \) -prune -o \
	    \( -name '*.so' -o -name '*.so.sha256' \) -print -delete
