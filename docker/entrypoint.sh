#!/bin/sh
# Entrypoint of every Mokka image: docker run IMAGE [ARGS...]
#   no ARGS           -> the image's CMD (node image: `up`; surface images: `--help`)
#   ARGS[0] on $PATH  -> run it as it is (nvml-mock-ctl, mokka, sh, ...)
#   otherwise         -> the image's main program, $MOKKA_MAIN, with ARGS
#                        (node image: `mokka node up --profile h100`; mokka-sim-pci: `stage --root /node`)
set -eu
if [ -z "${MOKKA_MAIN:-}" ]; then
    echo "mokka-entrypoint: MOKKA_MAIN is not set (the image names its main program there)" >&2
    exit 2
fi
if [ "$#" -eq 0 ]; then
    set -- --help
fi
case "$1" in
    -*) ;;
    */*) exec "$@" ;;
    *) if command -v "$1" >/dev/null 2>&1; then exec "$@"; fi ;;
esac
# MOKKA_MAIN may hold a program and its subcommand ("mokka node"): split it on purpose.
# shellcheck disable=SC2086
exec $MOKKA_MAIN "$@"
