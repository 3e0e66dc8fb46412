"""NRI plugin: inject the mock driver into containers at creation (see :mod:`.plugin`)."""
