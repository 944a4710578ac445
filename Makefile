# Two commands (see README): `make quickstart` and `make test`. Everything installs into .venv.
PYTHON ?= python3
# The CPU build of torch, installed first so nothing pulls the CUDA build (on a Trn1 use the DLAMI's venv instead).
TORCH ?= torch==2.13.0
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup quickstart test export readme

$(BIN)/trn-tutorials: settings.ini setup.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(TORCH)
	$(BIN)/pip install -q -e ".[dev,sagemaker]"
	touch $@

setup: $(BIN)/trn-tutorials

quickstart: setup
	HF_HUB_DISABLE_TELEMETRY=1 $(BIN)/trn-tutorials quickstart

test:   # sets up .venv too (tools/test.sh runs `make setup` while the stand-ins' bases download); one stage or a few: STAGES="trn1 trn2" make test
	bash tools/test.sh

# after editing notebooks: the library, clean notebooks and README.md from them
export: setup
	$(BIN)/nbdev_export && $(BIN)/nbdev_clean && bash tools/readme.sh
