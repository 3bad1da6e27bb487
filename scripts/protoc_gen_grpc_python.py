"""A protoc plugin that runs grpcio-tools' gRPC Python generator, for buf.

grpcio-tools ships protoc and the gRPC Python generator compiled into one
Python extension; it has no `protoc-gen-grpc_python` executable that buf could
call as a plugin. This adapter is that executable: it reads buf's
CodeGeneratorRequest from stdin, hands the request's descriptors to the bundled
protoc (`--descriptor_set_in`, so protoc parses nothing itself), and answers
with the files it wrote. Run it with the Python of the generation venv
(scripts/generate.sh creates it), so the generator is the pinned grpcio-tools.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from google.protobuf import descriptor_pb2
from google.protobuf.compiler import plugin_pb2
from grpc_tools import protoc


def generate(request: plugin_pb2.CodeGeneratorRequest) -> plugin_pb2.CodeGeneratorResponse:
    response = plugin_pb2.CodeGeneratorResponse(
        # The gRPC generator only reads services, so proto3 `optional` fields
        # need nothing from it; buf refuses plugins that do not say so.
        supported_features=plugin_pb2.CodeGeneratorResponse.FEATURE_PROTO3_OPTIONAL,
    )
    with tempfile.TemporaryDirectory(prefix="protoc-gen-grpc-python-") as tmp:
        descriptor_set = Path(tmp, "descriptors.binpb")
        descriptor_set.write_bytes(
            descriptor_pb2.FileDescriptorSet(file=request.proto_file).SerializeToString()
        )
        out = Path(tmp, "out")
        out.mkdir()
        args = [
            "protoc",
            f"--descriptor_set_in={descriptor_set}",
            f"--grpc_python_out={out}",
        ]
        if request.parameter:
            args.append(f"--grpc_python_opt={request.parameter}")
        args.extend(request.file_to_generate)
        if protoc.main(args) != 0:
            response.error = "grpcio-tools protoc failed (its message is above)"
            return response
        # Sorted, so the response (and buf's writes) do not depend on the
        # order the file system lists them in.
        for path in sorted(p for p in out.rglob("*") if p.is_file()):
            response.file.add(
                name=path.relative_to(out).as_posix(),
                content=path.read_text(encoding="utf-8"),
            )
    return response


def main() -> None:
    request = plugin_pb2.CodeGeneratorRequest.FromString(sys.stdin.buffer.read())
    sys.stdout.buffer.write(generate(request).SerializeToString())


if __name__ == "__main__":
    main()
