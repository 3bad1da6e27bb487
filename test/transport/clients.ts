import * as http from "node:http";
import * as https from "node:https";
import { createRequire } from "node:module";
import * as path from "node:path";
import {
  create,
  type DescMethodServerStreaming,
  type DescMethodUnary,
  type DescService,
  fromBinary,
  type MessageInitShape,
  type MessageShape,
} from "@bufbuild/protobuf";
import { type FileDescriptorProto, FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import { type Client, createClient, type Interceptor, type Transport } from "@connectrpc/connect";
import {
  createConnectTransport,
  createGrpcTransport,
  createGrpcWebTransport,
  Http2SessionManager,
} from "@connectrpc/connect-node";
import {
  type ChannelCredentials,
  type ChannelOptions,
  type ClientReadableStream,
  type Deadline,
  Client as GrpcJsClient,
  credentials as grpcCredentials,
  Metadata,
  type MethodDefinition,
  type ServiceError,
} from "@grpc/grpc-js";
import { loadSync } from "@grpc/proto-loader";
import { service as healthService } from "grpc-health-check";
import { MemoryService } from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import { grpcServiceDefinition } from "../../src/transport/grpc-service-definition.js";

/**
 * Real clients for the transport and integration tests: grpc-js built from
 * the same protobuf-es descriptor as the server, and connect-node clients for
 * the Connect, gRPC and gRPC-Web protocols over HTTP/1.1 or HTTP/2.
 */

/** Per-call options of the grpc-js client. */
export interface GrpcCallOptions {
  readonly deadline?: Deadline;
  /** Sent as `authorization: Bearer <token>`; overrides the client's token. */
  readonly token?: string;
  readonly metadata?: Metadata;
}

type GrpcMethod<M> =
  M extends DescMethodUnary<infer I, infer O>
    ? (request: MessageInitShape<I>, options?: GrpcCallOptions) => Promise<MessageShape<O>>
    : M extends DescMethodServerStreaming<infer I, infer O>
      ? (
          request: MessageInitShape<I>,
          options?: GrpcCallOptions,
        ) => ClientReadableStream<MessageShape<O>>
      : never;

/** A promise-based grpc-js client of a service; unary calls reject with a grpc-js ServiceError. */
export type GrpcClientOf<S extends DescService> = {
  readonly [K in keyof S["method"]]: GrpcMethod<S["method"][K]>;
} & {
  /** The underlying grpc-js client (its channel). */
  readonly raw: GrpcJsClient;
  close(): void;
};

export type MemoryGrpcClient = GrpcClientOf<typeof MemoryService>;

export interface GrpcClientOptions {
  /** Default bearer token for every call. */
  readonly token?: string;
  /** Default: insecure (cleartext HTTP/2). */
  readonly credentials?: ChannelCredentials;
  readonly channelOptions?: ChannelOptions;
}

/** Creates a grpc-js MemoryService client for `address` ("127.0.0.1:port"). */
export function createGrpcClient(
  address: string,
  options: GrpcClientOptions = {},
): MemoryGrpcClient {
  return createGrpcClientOf(MemoryService, address, options);
}

/** Creates a grpc-js client for any protobuf-es service descriptor (unary and server streaming). */
export function createGrpcClientOf<S extends DescService>(
  service: S,
  address: string,
  options: GrpcClientOptions = {},
): GrpcClientOf<S> {
  const raw = new GrpcJsClient(
    address,
    options.credentials ?? grpcCredentials.createInsecure(),
    options.channelOptions ?? {},
  );
  const definition = grpcServiceDefinition(service);
  const metadataFor = (call: GrpcCallOptions | undefined): Metadata => {
    const metadata = call?.metadata?.clone() ?? new Metadata();
    const token = call?.token ?? options.token;
    if (token !== undefined) metadata.set("authorization", `Bearer ${token}`);
    return metadata;
  };
  const client: Record<string, unknown> = { raw, close: () => raw.close() };
  for (const method of service.methods) {
    const def = definition[method.localName] as MethodDefinition<unknown, unknown>;
    if (method.methodKind === "unary") {
      client[method.localName] = (init: unknown, call?: GrpcCallOptions) =>
        new Promise((resolve, reject) => {
          raw.makeUnaryRequest(
            def.path,
            def.requestSerialize,
            def.responseDeserialize,
            create(method.input, init as MessageInitShape<typeof method.input>),
            metadataFor(call),
            call?.deadline === undefined ? {} : { deadline: call.deadline },
            (err, value) => (err === null ? resolve(value) : reject(err)),
          );
        });
    } else if (method.methodKind === "server_streaming") {
      client[method.localName] = (init: unknown, call?: GrpcCallOptions) =>
        raw.makeServerStreamRequest(
          def.path,
          def.requestSerialize,
          def.responseDeserialize,
          create(method.input, init as MessageInitShape<typeof method.input>),
          metadataFor(call),
          call?.deadline === undefined ? {} : { deadline: call.deadline },
        );
    }
  }
  // The loop above filled one entry per method of the descriptor, each with
  // the signature GrpcClientOf derives from that method's kind.
  return client as GrpcClientOf<S>;
}

/** Which protocol a connect-node client speaks. */
export type ConnectProtocol = "connect" | "grpc" | "grpc-web";

export interface ConnectClientOptions {
  /** Default "connect". */
  readonly protocol?: ConnectProtocol;
  /** Default "2". gRPC always uses HTTP/2. */
  readonly httpVersion?: "1.1" | "2";
  /** Default false: JSON for Connect and gRPC-Web. gRPC is always binary. */
  readonly useBinaryFormat?: boolean;
  /** Sent as `authorization: Bearer <token>` on every call. */
  readonly token?: string;
  /** CA certificate to trust for https base URLs. */
  readonly ca?: Buffer;
  /** Client certificate and key for mutual TLS. */
  readonly clientCert?: { readonly cert: Buffer; readonly key: Buffer };
}

export interface ConnectClientHandle {
  readonly client: Client<typeof MemoryService>;
  readonly transport: Transport;
  /** Closes the client's connections (HTTP/2 session or HTTP/1.1 agent). */
  close(): void;
}

/** Creates a connect-node MemoryService client for `baseUrl` ("http://127.0.0.1:port"). */
export function createConnectClient(
  baseUrl: string,
  options: ConnectClientOptions = {},
): ConnectClientHandle {
  const protocol = options.protocol ?? "connect";
  const httpVersion = protocol === "grpc" ? "2" : (options.httpVersion ?? "2");
  const interceptors: Interceptor[] = [];
  const token = options.token;
  if (token !== undefined) {
    interceptors.push((next) => (req) => {
      req.header.set("authorization", `Bearer ${token}`);
      return next(req);
    });
  }
  const tlsOptions = {
    ...(options.ca === undefined ? {} : { ca: options.ca }),
    ...(options.clientCert === undefined ? {} : options.clientCert),
  };
  const common = {
    baseUrl,
    interceptors,
    useBinaryFormat: protocol === "grpc" || (options.useBinaryFormat ?? false),
  };
  let transport: Transport;
  let close: () => void;
  if (httpVersion === "2") {
    const sessionManager = new Http2SessionManager(baseUrl, undefined, tlsOptions);
    const http2Options = { ...common, httpVersion: "2" as const, sessionManager };
    transport =
      protocol === "grpc"
        ? createGrpcTransport(http2Options)
        : protocol === "grpc-web"
          ? createGrpcWebTransport(http2Options)
          : createConnectTransport(http2Options);
    close = () => sessionManager.abort();
  } else {
    const agent = baseUrl.startsWith("https:")
      ? new https.Agent({ keepAlive: true, ...tlsOptions })
      : new http.Agent({ keepAlive: true });
    const http1Options = { ...common, httpVersion: "1.1" as const, nodeOptions: { agent } };
    transport =
      protocol === "grpc-web"
        ? createGrpcWebTransport(http1Options)
        : createConnectTransport(http1Options);
    close = () => agent.destroy();
  }
  return { client: createClient(MemoryService, transport), transport, close };
}

/**
 * grpc.health.v1.Health/Check: resolves with the status name ("SERVING",
 * "NOT_SERVING", ...); rejects with the ServiceError (NOT_FOUND for an
 * unknown service).
 */
export function grpcHealthCheck(address: string, service: string): Promise<string> {
  const client = new GrpcJsClient(address, grpcCredentials.createInsecure());
  const check = healthService.Check;
  if (check === undefined) throw new Error("grpc-health-check has no Check method");
  return new Promise<string>((resolve, reject) => {
    client.makeUnaryRequest(
      check.path,
      check.requestSerialize,
      check.responseDeserialize,
      { service },
      new Metadata(),
      { deadline: Date.now() + 5_000 },
      (err: ServiceError | null, value?: unknown) => {
        const status = isRecord(value) ? value.status : undefined;
        if (err !== null) reject(err);
        else if (typeof status === "string") resolve(status);
        else reject(new Error("health response without status"));
      },
    );
  }).finally(() => client.close());
}

export type ReflectionVersion = "v1" | "v1alpha";

/** One ServerReflectionRequest (field names as in the proto). */
export type ReflectionRequest =
  | { readonly list_services: string }
  | { readonly file_containing_symbol: string }
  | { readonly file_by_filename: string };

/** One ServerReflectionResponse, decoded. */
export type ReflectionAnswer =
  | { readonly kind: "services"; readonly services: string[] }
  | { readonly kind: "files"; readonly files: FileDescriptorProto[] }
  | { readonly kind: "error"; readonly code: number; readonly message: string };

/**
 * Runs one real ServerReflectionInfo stream (grpc.reflection.v1 or v1alpha):
 * sends `requests`, half-closes, and resolves with the answers in order.
 * The client side loads the reflection protos shipped with @grpc/reflection
 * (a test-only convenience; the server reads no .proto file).
 */
export function reflect(
  address: string,
  version: ReflectionVersion,
  requests: readonly ReflectionRequest[],
): Promise<ReflectionAnswer[]> {
  const protoPath = path.join(
    path.dirname(createRequire(import.meta.url).resolve("@grpc/reflection")),
    `../proto/grpc/reflection/${version}/reflection.proto`,
  );
  const definition = loadSync(protoPath, { keepCase: true, oneofs: true })[
    `grpc.reflection.${version}.ServerReflection`
  ];
  const method =
    definition !== undefined && !("format" in definition)
      ? definition.ServerReflectionInfo
      : undefined;
  if (method === undefined) throw new Error(`no ServerReflectionInfo in ${protoPath}`);
  const client = new GrpcJsClient(address, grpcCredentials.createInsecure());
  const call = client.makeBidiStreamRequest(
    method.path,
    method.requestSerialize,
    method.responseDeserialize,
    new Metadata(),
    { deadline: Date.now() + 5_000 },
  );
  return new Promise<ReflectionAnswer[]>((resolve, reject) => {
    const answers: ReflectionAnswer[] = [];
    call.on("data", (response: unknown) => answers.push(reflectionAnswer(response)));
    call.on("error", reject);
    call.on("end", () => resolve(answers));
    for (const request of requests) call.write(request);
    call.end();
  }).finally(() => client.close());
}

function reflectionAnswer(response: unknown): ReflectionAnswer {
  if (!isRecord(response)) throw new Error("reflection response is not an object");
  const listed = response.list_services_response;
  if (isRecord(listed) && Array.isArray(listed.service)) {
    return {
      kind: "services",
      services: listed.service.map((s: unknown) => (isRecord(s) ? String(s.name) : "")),
    };
  }
  const described = response.file_descriptor_response;
  if (isRecord(described) && Array.isArray(described.file_descriptor_proto)) {
    return {
      kind: "files",
      files: described.file_descriptor_proto.map((bytes: unknown) => {
        if (!(bytes instanceof Uint8Array)) throw new Error("file_descriptor_proto is not bytes");
        return fromBinary(FileDescriptorProtoSchema, bytes);
      }),
    };
  }
  const error = response.error_response;
  if (isRecord(error)) {
    return { kind: "error", code: Number(error.error_code), message: String(error.error_message) };
  }
  throw new Error("unexpected reflection response");
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null;
}
