import { create, type DescFile, toBinary } from "@bufbuild/protobuf";
import {
  type FileDescriptorProto,
  FileDescriptorProtoSchema,
  FileDescriptorSetSchema,
} from "@bufbuild/protobuf/wkt";
import {
  type AnyDefinition,
  type EnumTypeDefinition,
  loadFileDescriptorSetFromBuffer,
  type MessageTypeDefinition,
  type PackageDefinition,
} from "@grpc/proto-loader";
import { ReflectionService } from "@grpc/reflection";
import { file_windlass_memory_v1_memory } from "../../gen/ts/windlass/memory/v1/memory_pb.js";
import { healthFileDescriptor } from "./health-descriptor.js";

/**
 * gRPC server reflection (v1 and v1alpha), so grpcurl and other tools can
 * call the service without the .proto files.
 *
 * @grpc/reflection reads a proto-loader package definition. It is built from
 * a google.protobuf.FileDescriptorSet of the descriptors already embedded in
 * the generated code (the memory proto and its imports) plus the health
 * service's (health-descriptor.ts); nothing is read from disk.
 *
 * proto-loader rebuilds descriptors through protobufjs, which renames each
 * file after its package and leaves its `dependency` list empty. Reflection
 * clients link files by those names and lists (grpcurl; protobuf-es
 * `createFileRegistry`) and then cannot resolve google.protobuf.Timestamp.
 * So the descriptors that reflection serves are swapped back to the
 * originals.
 */
export function createReflectionService(): ReflectionService {
  const files = dedupeByName([
    ...withImports(file_windlass_memory_v1_memory),
    healthFileDescriptor,
  ]);
  const set = create(FileDescriptorSetSchema, { file: files });
  const loaded = loadFileDescriptorSetFromBuffer(
    Buffer.from(toBinary(FileDescriptorSetSchema, set)),
  );
  const originals = files.map((file) => Buffer.from(toBinary(FileDescriptorProtoSchema, file)));
  return new ReflectionService(withFileDescriptors(loaded, originals));
}

/**
 * The package definition with every type's `fileDescriptorProtos` replaced.
 * Reflection indexes the files of all entries and keeps each name once.
 */
function withFileDescriptors(
  definition: PackageDefinition,
  fileDescriptorProtos: Buffer[],
): PackageDefinition {
  const replaced: PackageDefinition = {};
  for (const [name, entry] of Object.entries(definition)) {
    replaced[name] = isTypeDefinition(entry) ? { ...entry, fileDescriptorProtos } : entry;
  }
  return replaced;
}

function isTypeDefinition(
  entry: AnyDefinition,
): entry is MessageTypeDefinition<object, object> | EnumTypeDefinition {
  // Services map method names to definitions; types carry their files.
  return Array.isArray(entry.fileDescriptorProtos);
}

/** The file and everything it imports, imports first. */
function withImports(file: DescFile): FileDescriptorProto[] {
  return [...file.dependencies.flatMap(withImports), file.proto];
}

function dedupeByName(files: FileDescriptorProto[]): FileDescriptorProto[] {
  const byName = new Map<string, FileDescriptorProto>();
  for (const file of files) {
    if (!byName.has(file.name)) byName.set(file.name, file);
  }
  return [...byName.values()];
}
