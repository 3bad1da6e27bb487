import {
  type DescMethod,
  type DescService,
  fromBinary,
  type Message,
  toBinary,
} from "@bufbuild/protobuf";
import type { MethodDefinition, ServiceDefinition } from "@grpc/grpc-js";
import {
  type AddResponse,
  AddResponseSchema,
  type GetResponse,
  GetResponseSchema,
  type WatchResponse,
  WatchResponseSchema,
} from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import { encodeGetResponse, encodeWatchResponse } from "../service/pre-encoded.js";
import { encodeAddResponse } from "../service/response-encoding.js";

/**
 * grpc-js service definitions built from protobuf-es descriptors, so the
 * grpc-js server (and test clients) use the same generated schemas as the
 * Connect side: no proto-loader, no .proto files read at run time, and
 * messages are protobuf-es messages on both sides.
 *
 * Keys are the methods' local names ("listThreads"); `originalName` is the
 * proto name ("ListThreads").
 */
export function grpcServiceDefinition(service: DescService): ServiceDefinition {
  const definition: Record<string, MethodDefinition<Message, Message>> = {};
  for (const method of service.methods) {
    definition[method.localName] = grpcMethodDefinition(method);
  }
  return definition;
}

/**
 * The server's definitions: requests stay bytes (an identity deserializer),
 * so the handler decodes them itself after authentication, strictly, and a
 * body that is not a valid message is INVALID_ARGUMENT naming the field
 * (request-decoding.ts). Decoding in grpc-js' deserializer would run before
 * auth and turn every failure into INTERNAL "Error deserializing request".
 */
export function grpcServerDefinition(service: DescService): ServiceDefinition {
  const definition: Record<string, MethodDefinition<Buffer, Message>> = {};
  for (const method of service.methods) {
    const serialize = responseSerializer(method);
    definition[method.localName] = {
      ...grpcMethodDefinition(method),
      requestSerialize: (bytes) => bytes,
      requestDeserialize: (bytes) => bytes,
      // Unary handlers pass the bytes they encoded (to check their size first).
      responseSerialize: (message) => (Buffer.isBuffer(message) ? message : serialize(message)),
    };
  }
  return definition;
}

/** The HTTP/2 path of a method: "/windlass.memory.v1.MemoryService/Add". */
export function grpcMethodPath(method: DescMethod): string {
  return `/${method.parent.typeName}/${method.name}`;
}

function grpcMethodDefinition(method: DescMethod): MethodDefinition<Message, Message> {
  const kind = method.methodKind;
  return {
    path: grpcMethodPath(method),
    requestStream: kind === "client_streaming" || kind === "bidi_streaming",
    responseStream: kind === "server_streaming" || kind === "bidi_streaming",
    requestSerialize: (message) => asBuffer(toBinary(method.input, message)),
    requestDeserialize: (bytes) => fromBinary(method.input, bytes),
    responseSerialize: responseSerializer(method),
    responseDeserialize: (bytes) => fromBinary(method.output, bytes),
    originalName: method.name,
  };
}

/**
 * Get and Watch responses carry bytes encoded once (service/pre-encoded.ts);
 * Add and Get responses are written by hand-written encoders
 * (service/response-encoding.ts).
 */
export function responseSerializer(method: DescMethod): (message: Message) => Buffer {
  switch (method.output.typeName) {
    case AddResponseSchema.typeName:
      return (message) => asBuffer(encodeAddResponse(message as AddResponse));
    case GetResponseSchema.typeName:
      return (message) => asBuffer(encodeGetResponse(message as GetResponse));
    case WatchResponseSchema.typeName:
      return (message) => asBuffer(encodeWatchResponse(message as WatchResponse));
    default:
      return (message) => asBuffer(toBinary(method.output, message));
  }
}

// grpc-js wants a Buffer; wrapping the same memory avoids a copy per message.
function asBuffer(bytes: Uint8Array): Buffer {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}
