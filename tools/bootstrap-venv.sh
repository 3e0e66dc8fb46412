#!/bin/sh
# Create the project's virtual environment with the system python3.
# Debian ships venv's pip bootstrap in a separate package (python3-venv); install it when we may.
set -eu
python=${1:-python3}
venv=${2:-.venv}
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
    exit 0
fi
rm -rf "$venv"
if ! "$python" -m venv "$venv" 2>/dev/null; then
    rm -rf "$venv"
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "bootstrap: installing python3-venv (Debian keeps venv's pip bootstrap separate)" >&2
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
        "$python" -m venv "$venv"
    else
        echo "bootstrap: '$python -m venv' failed; install python3-venv (as root: apt-get install python3-venv)" >&2
        exit 1
    fi
fi
