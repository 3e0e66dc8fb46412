"""Regenerate ``descriptors.binpb`` from the ``.proto`` files (needs grpcio-tools)."""

from . import DESCRIPTOR_SET, compile_descriptor_set

compile_descriptor_set(DESCRIPTOR_SET)
print(f"wrote {DESCRIPTOR_SET}")
