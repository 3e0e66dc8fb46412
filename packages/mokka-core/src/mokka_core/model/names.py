"""Node names: DNS-1123 subdomains, as Kubernetes node names are (files are named after them).

A module of its own, importing only ``re``: the per-node services that name files after the node check
its name without loading the node model.
"""

from __future__ import annotations

import re

_NODE_NAME_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
NODE_NAME_MAX = 253


def node_name_problem(name: str) -> str | None:
    """Why ``name`` is not a node name (a DNS-1123 subdomain of at most 253 characters), or None."""
    if len(name) > NODE_NAME_MAX or not _NODE_NAME_RE.fullmatch(name):
        return (f"must be a DNS-1123 subdomain (lower-case letters, digits, '-' and '.', at most {NODE_NAME_MAX} "
                f"characters, as Kubernetes node names are), got {name[:80]!r}")
    return None
