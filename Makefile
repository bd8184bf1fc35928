# fedrun: `make run` for the default experiment, `make test` for the test suite. Both set up .venv when needed.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
ARGS ?=

.PHONY: setup data run test test-slow bench bench-addons clean

$(STAMP): pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -c requirements.lock -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)

data: setup
	$(VENV)/bin/fedrun-data fetch mnist

run: data
	$(VENV)/bin/fedrun $(ARGS)

test: data
	$(PY) -m pytest -q

test-slow: data
	$(PY) -m pytest -q -m slow

bench: setup
	$(PY) -m fedrun.bench --out results/bench/$$($(PY) -c "import torch; print('gpu' if torch.cuda.is_available() else 'cpu')").json

ADDONS := herd_svm_mnist,herd_cnn_cifar10,harmonize_cnn_k20,harmonize_perceptron_k1000
bench-addons: setup
	$(PY) -m fedrun.bench --only $(ADDONS) --repeats 2 --out results/bench/addons-$$($(PY) -c "import torch; print('gpu' if torch.cuda.is_available() else 'cpu')").json

clean:
	rm -rf $(VENV) outputs multirun .pytest_cache
