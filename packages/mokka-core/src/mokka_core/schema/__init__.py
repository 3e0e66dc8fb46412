"""Documents: the profile, overlay and override schemas, their loader, the built-in profiles."""
