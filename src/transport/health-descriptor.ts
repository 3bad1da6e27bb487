import { create } from "@bufbuild/protobuf";
import {
  type FileDescriptorProto,
  FileDescriptorProtoSchema,
  FieldDescriptorProto_Label as Label,
  FieldDescriptorProto_Type as Type,
} from "@bufbuild/protobuf/wkt";

/**
 * The descriptor of grpc/health/v1/health.proto, for server reflection.
 *
 * grpc-health-check serves the health service but only exposes a descriptor
 * rebuilt by protobufjs, which is not valid protobuf (its map entry is named
 * "Statuses" instead of "StatusesEntry", its type names are relative), so
 * grpcurl refuses it. This is the canonical file, written out; it changes
 * only if gRPC changes the health protocol.
 */
export const healthFileDescriptor: FileDescriptorProto = create(FileDescriptorProtoSchema, {
  name: "grpc/health/v1/health.proto",
  package: "grpc.health.v1",
  syntax: "proto3",
  messageType: [
    {
      name: "HealthCheckRequest",
      field: [
        {
          name: "service",
          jsonName: "service",
          number: 1,
          label: Label.OPTIONAL,
          type: Type.STRING,
        },
      ],
    },
    {
      name: "HealthCheckResponse",
      field: [
        {
          name: "status",
          jsonName: "status",
          number: 1,
          label: Label.OPTIONAL,
          type: Type.ENUM,
          typeName: ".grpc.health.v1.HealthCheckResponse.ServingStatus",
        },
      ],
      enumType: [
        {
          name: "ServingStatus",
          value: [
            { name: "UNKNOWN", number: 0 },
            { name: "SERVING", number: 1 },
            { name: "NOT_SERVING", number: 2 },
            { name: "SERVICE_UNKNOWN", number: 3 },
          ],
        },
      ],
    },
    { name: "HealthListRequest" },
    {
      name: "HealthListResponse",
      field: [
        {
          name: "statuses",
          jsonName: "statuses",
          number: 1,
          label: Label.REPEATED,
          type: Type.MESSAGE,
          typeName: ".grpc.health.v1.HealthListResponse.StatusesEntry",
        },
      ],
      nestedType: [
        {
          name: "StatusesEntry",
          field: [
            { name: "key", jsonName: "key", number: 1, label: Label.OPTIONAL, type: Type.STRING },
            {
              name: "value",
              jsonName: "value",
              number: 2,
              label: Label.OPTIONAL,
              type: Type.MESSAGE,
              typeName: ".grpc.health.v1.HealthCheckResponse",
            },
          ],
          options: { mapEntry: true },
        },
      ],
    },
  ],
  service: [
    {
      name: "Health",
      method: [
        {
          name: "Check",
          inputType: ".grpc.health.v1.HealthCheckRequest",
          outputType: ".grpc.health.v1.HealthCheckResponse",
        },
        {
          name: "List",
          inputType: ".grpc.health.v1.HealthListRequest",
          outputType: ".grpc.health.v1.HealthListResponse",
        },
        {
          name: "Watch",
          inputType: ".grpc.health.v1.HealthCheckRequest",
          outputType: ".grpc.health.v1.HealthCheckResponse",
          serverStreaming: true,
        },
      ],
    },
  ],
  options: {
    goPackage: "google.golang.org/grpc/health/grpc_health_v1",
    javaPackage: "io.grpc.health.v1",
    javaOuterClassname: "HealthProto",
    javaMultipleFiles: true,
    csharpNamespace: "Grpc.Health.V1",
  },
});
