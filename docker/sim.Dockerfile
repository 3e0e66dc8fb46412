# syntax=docker/dockerfile:1
# One surface alone: mokka-core and the sim package named by SIM (gpu pci cdi imex nvlink fabricmanager ib).
# Build from the repository root (docker/docker-bake.json builds all seven):
#   docker build -f docker/sim.Dockerfile --build-arg SIM=pci -t localhost/mokka-sim-pci:0.1.0 .
# Run:
#   docker run --rm -v /tmp/node:/node localhost/mokka-sim-pci:0.1.0 stage --root /node -p h100
#   docker run --rm -v /tmp/node:/node localhost/mokka-sim-pci:0.1.0 serve --root /node -p h100
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS native
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev make \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY native/ native/
COPY packages/mokka-core/ packages/mokka-core/
RUN make -C native install PYTHON=python3

FROM ${PYTHON_IMAGE} AS wheels
ARG SIM
WORKDIR /src
COPY packages/mokka-core/ packages/mokka-core/
COPY packages/sim-${SIM}/ packages/sim-${SIM}/
COPY --from=native /src/packages/mokka-core/src/mokka_core/_native/ packages/mokka-core/src/mokka_core/_native/
RUN test -n "${SIM}" \
 && pip wheel --no-cache-dir --wheel-dir /wheels packages/mokka-core "packages/sim-${SIM}"

FROM ${PYTHON_IMAGE}
ARG SIM
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    MOKKA_MAIN=mokka-sim-${SIM}
RUN --mount=type=bind,from=wheels,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index /wheels/*.whl \
 && useradd --uid 65532 --user-group --no-create-home --shell /usr/sbin/nologin mokka
COPY --chmod=0755 docker/entrypoint.sh /usr/local/bin/mokka-entrypoint
# Non-root: staging into a mounted directory needs no privilege (device nodes become empty
# placeholder files without CAP_MKNOD; run with --user 0 --cap-add MKNOD for real ones).
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/mokka-entrypoint"]
CMD ["--help"]
