# fedrun: `make run` for the default experiment, `make test` for the test suite. Both set up .venv when needed.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
ARGS ?=

.PHONY: setup setup-ray data run lint test test-slow coverage docs bench bench-scale bench-addons bench-limits clean

$(STAMP): pyproject.toml setup.py requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -c requirements.lock -e '.[test,launchers,docs]'
	touch $(STAMP)

setup: $(STAMP)
	$(PY) -m fedrun.model.native.build

# Ray for hydra/launcher=ray_cluster (big; only the slow tests and Ray users need it)
setup-ray: setup
	$(PY) -m pip install --quiet -c requirements.lock 'ray[default]==2.60.0'
	$(PY) -m pip install --quiet --no-deps 'hydra-ray-launcher==1.2.2'

data: setup
	$(VENV)/bin/fedrun-data fetch mnist

run: data
	$(VENV)/bin/fedrun $(ARGS)

lint: setup
	$(VENV)/bin/ruff check fedrun tests scripts

# two or more workers (pytest-xdist, one per core), each test file in one worker so a module's shared runs are made
# once: docs/development.md says what each measure saved
test: data lint
	$(PY) -m pytest -q -n auto --dist loadfile --durations=30

test-slow: data setup-ray
	$(PY) -m pytest -q -m slow --durations=30

# line and branch coverage of fedrun/ by the default suite, subprocesses included (pyproject.toml's [tool.coverage]);
# tracing slows every test, so the per-test time budget (tests/time_budget.py) is off here
coverage: data
	FEDRUN_TEST_BUDGET_S=0 $(PY) -m pytest -q -n 2 --cov --cov-report=term --cov-report=json:coverage.json

# docs/ as a site under site/ (mkdocs, material theme); strict: a warning (a broken link) fails the build
docs: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# the executors' workloads (results/bench/<device>.*) and the add-ons' (addons-<device>.*), each run on its own
WORKLOADS := softmax576_400,softmax576_1000,svm_mnist_5,lenet5_cifar_100,lenet5_mnist_10,cnn_fedgh_20,mlp_synthetic_100
ADDONS := herd_svm_mnist,herd_cnn_cifar10,harmonize_cnn_k20,harmonize_perceptron_k1000,gift_lenet5_k40
bench: setup
	$(PY) -m fedrun.bench.workloads --only $(WORKLOADS) --out results/bench/$$($(PY) -c "import torch; print('gpu' if torch.cuda.is_available() else 'cpu')").json

# cohorts of 1000 clients, and 16 runs' cohorts as one (the GPU's scale; minutes on a CPU): results/bench/scale-<device>.*
SCALE := lenet5_cifar_1000,mlp_mnist_1000,lenet5_mnist_160
bench-scale: setup
	$(PY) -m fedrun.bench.workloads --only $(SCALE) --out results/bench/scale-$$($(PY) -c "import torch; print('gpu' if torch.cuda.is_available() else 'cpu')").json

bench-addons: setup
	$(PY) -m fedrun.bench.workloads --only $(ADDONS) --repeats 2 --out results/bench/addons-$$($(PY) -c "import torch; print('gpu' if torch.cuda.is_available() else 'cpu')").json

# each cohort's round under the vmap and graph executors and every precision, beside the chip's FLOP and byte floors
# (a GPU's table: results/bench/limits-<device>.*)
bench-limits: setup
	$(PY) -m fedrun.bench.limits --out results/bench/limits-$$($(PY) -c "import torch; print('gpu' if torch.cuda.is_available() else 'cpu')").json

clean:
	rm -rf $(VENV) outputs multirun .pytest_cache site
