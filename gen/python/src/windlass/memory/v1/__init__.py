"""Generated code for the windlass.memory.v1 protobuf package.

memory_pb2 holds the messages and enums, memory_pb2_grpc the MemoryService
stub and servicer. Both are written by scripts/generate.sh; only this file and
py.typed are hand-written.
"""
