"""The protobuf definitions the cluster components speak, loaded without generated Python code.

The ``.proto`` files here are compiled by grpcio-tools into one binary
``FileDescriptorSet`` (``descriptors.binpb``, committed); at run time the message
classes are built from it with the protobuf runtime alone.  Generated ``_pb2``
modules would pin the protobuf runtime to the generator's major version; a
descriptor set works with every protobuf from 4 on.  ``python -m
mokka_core.cluster.protos`` regenerates it, and a test fails when it is stale.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
PROTO_FILES = ("podresources_v1.proto", "nri_v1alpha1.proto", "ttrpc.proto")
DESCRIPTOR_SET = HERE / "descriptors.binpb"


@functools.cache
def _pool() -> Any:
    from google.protobuf import descriptor_pb2, descriptor_pool

    files = descriptor_pb2.FileDescriptorSet.FromString(DESCRIPTOR_SET.read_bytes())
    pool = descriptor_pool.DescriptorPool()  # private: never clashes with another copy of these packages
    for file in files.file:
        pool.Add(file)
    return pool


@functools.cache
def message(full_name: str) -> Any:
    """The message class for ``full_name`` (``v1.ListPodResourcesResponse``, ``ttrpc.Request`` ...)."""
    from google.protobuf import message_factory

    descriptor = _pool().FindMessageTypeByName(full_name)
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(descriptor)
    return message_factory.MessageFactory(_pool()).GetPrototype(descriptor)  # protobuf < 4.22


def compile_descriptor_set(out: Path) -> None:
    """Run grpcio-tools' protoc over :data:`PROTO_FILES` into ``out`` (a FileDescriptorSet)."""
    from grpc_tools import protoc

    args = ["protoc", f"--proto_path={HERE}", f"--descriptor_set_out={out}", *PROTO_FILES]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed on {', '.join(PROTO_FILES)} in {HERE}")
