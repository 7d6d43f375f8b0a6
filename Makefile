# niclab: `make demo` runs the default scenario, `make test` runs the tests (`make unit`: the unit tests alone).
# Both install what is missing first (host packages, the virtualenv, the guest
# image), and do nothing more on a second run.

PYTHON  ?= $(shell command -v /usr/bin/python3 || command -v python3)
VENV    ?= .venv
SCENARIO ?= scenarios/two-node.yaml
UNIT_JOBS ?= 2
STAMP   := $(VENV)/.niclab-installed
BIN     := $(VENV)/bin

LAB_STAMP := $(VENV)/.niclab-lab-installed

.PHONY: demo test unit durations lint setup host test-host venv image vagrant lab lab-python docker clean

demo: setup
	$(BIN)/niclab run $(SCENARIO)

# The unit tests on two workers (they boot no guest), then the integration tests one at a time: they measure,
# and guests beside other guests on a 2-core machine measure the neighbour (docs/development.md). Each part
# prints its 15 slowest tests; exit status 5 ("nothing collected", when PYTEST_ARGS selects only the other
# part) is no failure.
test: setup test-host lab-python lint
	$(BIN)/pytest -ra -m "not integration" -n $(UNIT_JOBS) --durations=15 $(PYTEST_ARGS) || [ $$? -eq 5 ]
	$(BIN)/pytest -ra -m integration --durations=15 $(PYTEST_ARGS) || [ $$? -eq 5 ]

# The unit tests alone: they boot no guest. Every test below tests/integration is marked `integration`
# (tests/integration/conftest.py), so `-m "not integration"` leaves them out. What the host needs for them
# (mmdebstrap for the real driver builds, libvirt-dev for libvirt-python) comes first, as for `make test`.
unit: host test-host lab-python
	$(BIN)/pytest -ra -m "not integration" -n $(UNIT_JOBS) $(PYTEST_ARGS)

# Refresh tests/durations.json (each test's seconds: the suite's order, tests/order.py, and CI's shards) from a
# whole run on a quiet machine.
durations: setup test-host lab-python
	$(BIN)/pytest -m "not integration" -n $(UNIT_JOBS) --store-durations --durations-path=tests/durations.json $(PYTEST_ARGS)
	$(BIN)/pytest -m integration --store-durations --durations-path=tests/durations.json $(PYTEST_ARGS)

# ruff's lint and format check over the code, mypy over the package (files from pyproject.toml; every function
# annotated), then import-linter: the layer folders import only from below (contracts in pyproject.toml).
lint: venv
	$(BIN)/ruff check harness tests bench
	$(BIN)/ruff format --check harness tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports

setup: host venv image

host:
	scripts/setup-host

test-host:
	scripts/setup-host --test

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

# libvirt-python for the libvirt backend (lab runs); it builds against libvirt-dev, which setup-host
# --test and --lab install.
lab-python: $(LAB_STAMP)

$(LAB_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -e '.[lab]'
	touch $(LAB_STAMP)

# Lab mode's set-up: libvirt (started), libvirt-dev, pciutils, libvirt-python; then `niclab lab doctor --lab LAB_YAML`.
lab: setup
	scripts/setup-host --lab
	$(MAKE) lab-python

image: venv
	$(BIN)/niclab image build

# The Vagrant rig's set-up: Vagrant, vagrant-libvirt and a running libvirtd, then the niclab/debian box
# (built from Debian packages, added locally). Then: vagrant up, vagrant ssh a -c 'netperf -H b'.
vagrant: venv
	scripts/setup-host --vagrant
	$(BIN)/niclab vagrant box

# The lab container instead of a host set-up: Docker and Compose (dockerd started), then the lab image
# (images/docker/build.sh). Then: docker-compose run --rm lab niclab run scenarios/two-node.yaml.
docker:
	scripts/setup-host --docker
	images/docker/build.sh

clean:
	rm -rf $(VENV) runs
