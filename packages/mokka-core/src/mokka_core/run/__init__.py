"""``mokka run`` and ``mokka shim``: a node in a private root, one command against it."""
