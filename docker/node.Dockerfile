# syntax=docker/dockerfile:1
# The node image: mokka-core (`mokka node`, nvml-mock-ctl, the mock libnvidia-ml, mokka-allocwatch, mokka-nri)
# and every sim package.
# This is what charts/mokka runs. Build from the repository root:
#   docker build -f docker/node.Dockerfile -t localhost/mokka-node:0.1.0 .
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# Stage 1: the mock NVML library (gcc, make; nvml.h is fetched from PyPI by native/Makefile).
FROM ${PYTHON_IMAGE} AS native
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev make \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY native/ native/
COPY packages/mokka-core/ packages/mokka-core/
RUN make -C native install PYTHON=python3

# Stage 2: wheels of every package and their dependencies (the library travels inside mokka-core's wheel).
# mokka-core with its `cluster` extra (grpcio, protobuf): the chart's allocation watcher (mokka-allocwatch)
# and NRI plugin (mokka-nri) run from this image.
FROM ${PYTHON_IMAGE} AS wheels
WORKDIR /src
COPY packages/ packages/
COPY --from=native /src/packages/mokka-core/src/mokka_core/_native/ packages/mokka-core/src/mokka_core/_native/
RUN pip wheel --no-cache-dir --wheel-dir /wheels "packages/mokka-core[cluster]" packages/sim-*

# Final stage: the runtime only; no compiler, no build tools, wheels not kept in a layer.
FROM ${PYTHON_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    MOKKA_MAIN="mokka node" \
    MOKKA_ROOT=/var/lib/mokka/root
RUN --mount=type=bind,from=wheels,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index /wheels/*.whl
COPY --chmod=0755 docker/entrypoint.sh /usr/local/bin/mokka-entrypoint
# Root on purpose: the node daemon creates device nodes (CAP_MKNOD) and writes root-owned host paths
# (the chart drops every other capability). The per-surface images run as a non-root user.
# hadolint ignore=DL3002
USER 0:0
ENTRYPOINT ["/usr/local/bin/mokka-entrypoint"]
CMD ["up"]
