# fedrun: `make run` for the default experiment, `make test` for the test suite. Both set up .venv when needed.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
ARGS ?=

.PHONY: setup data run test test-slow clean

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

clean:
	rm -rf $(VENV) outputs multirun .pytest_cache
