# Set-up and entry points. The README's two commands are `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
HELM ?= helm
PACKAGES := mokka-core sim-gpu sim-pci sim-cdi sim-imex sim-nvlink sim-fabricmanager sim-ib

.PHONY: setup native demo test images publish clean

$(VENV)/.installed: tools/bootstrap-venv.sh $(foreach p,$(PACKAGES),packages/$(p)/pyproject.toml)
	sh tools/bootstrap-venv.sh $(PYTHON) $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(foreach p,$(PACKAGES),-e packages/$(p)[test]) tox ruff mypy import-linter
	touch $@

setup: $(VENV)/.installed native
	@# Debian's real nvidia-smi for /usr/bin/nvidia-smi of staged nodes (cached; offline: the node has none)
	@$(PY) -m mokka_core fetch nvidia-smi || echo "make: nvidia-smi not fetched (offline?): staged nodes have no /usr/bin/nvidia-smi until \`mokka fetch nvidia-smi\` succeeds"

native: $(VENV)/.installed
	@if [ -f native/Makefile ]; then $(MAKE) -C native install PYTHON=$(abspath $(PY)); fi
	@# bytecode caches, as an installed package has them: nvml-mock-ctl's latency includes start-up
	@$(PY) -m compileall -q packages > /dev/null

# Main job on the embedded default: a simulated H100 node seen by real nvidia-smi, lspci and lsmod.
demo: setup
	$(PY) tools/demo.py h100

# Every package's tests alone (tox), plus lint, types and the native library against real consumers.
test: setup
	$(VENV)/bin/tox run

# The node image and the seven surface images, built with buildah from Debian's packages and this checkout
# (docker/README.md); PY= another interpreter with mokka-core installed skips the set-up.
images: $(if $(filter $(VENV)/bin/python,$(PY)),setup)
	$(MAKE) -C native install PYTHON=$(abspath $(PY))
	$(PY) tools/images.py build --python $(PY)

# Every image and the chart to an OCI registry: make publish REGISTRY=host:port (helm v3.8+ on PATH, or HELM=).
publish:
	@test -n "$(REGISTRY)" || { echo "make publish: REGISTRY=host:port is required" >&2; exit 2; }
	$(PY) tools/images.py publish --helm $(HELM) $(REGISTRY)

clean:
	rm -rf $(VENV) .tox native/build
