import {
  type handleUnaryCall,
  type MethodDefinition,
  Server,
  ServerCredentials,
  type ServiceDefinition,
} from "@grpc/grpc-js";
import { MemoryService } from "../gen/ts/windlass/memory/v1/memory_pb.js";

/**
 * The baseline of the benchmark: a bare @grpc/grpc-js server on the same
 * paths as MemoryService/Add and /Get that answers every call with response
 * bytes captured from the real server. It neither parses requests nor
 * encodes responses, so "real / bare" is the share of grpc-js's own
 * throughput the service keeps.
 *
 * Run as a child process by bench/run.ts:
 *   node dist/bench/bare-server.js --add BASE64 --get BASE64
 * Prints "bare grpc-js listening: gRPC 127.0.0.1:PORT"; stops on SIGTERM/SIGINT.
 */

const HOST = "127.0.0.1";
// The real server's default (--max-message-bytes), so both refuse and accept alike.
const MAX_MESSAGE_BYTES = 4 * 1024 * 1024;

const identity = (bytes: Buffer): Buffer => bytes;

function cannedUnary(
  path: string,
  response: Buffer,
): [MethodDefinition<Buffer, Buffer>, handleUnaryCall<Buffer, Buffer>] {
  return [
    {
      path,
      requestStream: false,
      responseStream: false,
      requestSerialize: identity,
      requestDeserialize: identity,
      responseSerialize: identity,
      responseDeserialize: identity,
    },
    (_call, callback) => callback(null, response),
  ];
}

function argValue(argv: readonly string[], flag: string): Buffer {
  const i = argv.indexOf(flag);
  const value = i === -1 ? undefined : argv[i + 1];
  if (value === undefined) throw new Error(`bare-server: ${flag} BASE64 is required`);
  return Buffer.from(value, "base64");
}

async function main(argv: readonly string[]): Promise<void> {
  const methods = {
    add: cannedUnary(
      `/${MemoryService.typeName}/${MemoryService.method.add.name}`,
      argValue(argv, "--add"),
    ),
    get: cannedUnary(
      `/${MemoryService.typeName}/${MemoryService.method.get.name}`,
      argValue(argv, "--get"),
    ),
  };
  const definition: ServiceDefinition = {
    add: methods.add[0],
    get: methods.get[0],
  };
  const server = new Server({
    "grpc.max_receive_message_length": MAX_MESSAGE_BYTES,
    "grpc.max_send_message_length": MAX_MESSAGE_BYTES,
    // channelz (grpc-js's call tracing) is not served here and costs CPU on every call.
    "grpc.enable_channelz": 0,
  });
  server.addService(definition, { add: methods.add[1], get: methods.get[1] });
  const port = await new Promise<number>((resolve, reject) => {
    server.bindAsync(`${HOST}:0`, ServerCredentials.createInsecure(), (err, bound) =>
      err === null ? resolve(bound) : reject(err),
    );
  });
  process.stdout.write(`bare grpc-js listening: gRPC ${HOST}:${port}\n`);
  await new Promise<void>((resolve) => {
    process.once("SIGTERM", resolve);
    process.once("SIGINT", resolve);
  });
  // The bench closes its channels before stopping us; forceShutdown bounds
  // the exit if one is left.
  await new Promise<void>((resolve) => {
    const timer = setTimeout(() => {
      server.forceShutdown();
      resolve();
    }, 2_000);
    server.tryShutdown(() => {
      clearTimeout(timer);
      resolve();
    });
  });
}

main(process.argv.slice(2)).catch((err: unknown) => {
  process.stderr.write(`${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exitCode = 1;
});
