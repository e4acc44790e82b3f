# DialFork: two entry points on a fresh machine.
#   make demo   runs the main job on the embedded default (STAR at ../shared/star)
#   make test   runs the test suite
# Both create .venv and install what they need (torch 2.13.0 CPU wheel first).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAR ?= $(if $(DIALFORK_STAR_DIR),$(DIALFORK_STAR_DIR),../shared/star)
DEMO_OUT ?= demo_out
EXTRAS ?= dev,stats,annotation
export HF_HUB_OFFLINE ?= 1
export HF_EVALUATE_OFFLINE ?= 1
export HF_DATASETS_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: install system-deps demo test lint bench clean

# Debian's headless chromium drives the browser tests (leaderboard page, annotation tool).
system-deps:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "note: chromium missing and not root: browser tests will be skipped"; fi; }

$(VENV)/.installed: setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[$(EXTRAS)]"
	touch $@

install: $(VENV)/.installed

demo: install
	$(PY) -m dialfork_dataset.demo --star $(STAR) --out $(DEMO_OUT)

test: install system-deps
	DIALFORK_STAR_DIR=$(abspath $(STAR)) $(PY) -m pytest -q -p no:cacheprovider tests

lint: install
	$(VENV)/bin/ruff check .

bench: install
	for f in benchmarks/bench_*.py; do $(PY) $$f || exit 1; done

clean:
	rm -rf $(DEMO_OUT) build *.egg-info
