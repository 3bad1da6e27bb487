import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";

/**
 * `google.rpc.RetryInfo`, the standard error detail that tells a client when
 * to retry (grpc-go `status.Details()`, Python `grpc_status.rpc_status`,
 * Connect `ConnectError.findDetails`). Written by hand: two small messages
 * are not worth generating the googleapis protos for.
 */
export const RETRY_INFO_TYPE = "google.rpc.RetryInfo";

/** The key of the trailer that carries a `google.rpc.Status` with details (gRPC). */
export const STATUS_DETAILS_KEY = "grpc-status-details-bin";

/** RetryInfo { google.protobuf.Duration retry_delay = 1; } */
export function encodeRetryInfo(retryAfterMs: number): Uint8Array {
  const ms = Math.max(0, Math.ceil(retryAfterMs));
  const duration = new BinaryWriter();
  const seconds = Math.floor(ms / 1000);
  const nanos = (ms % 1000) * 1_000_000;
  if (seconds !== 0) duration.tag(1, WireType.Varint).int64(seconds);
  if (nanos !== 0) duration.tag(2, WireType.Varint).int32(nanos);
  return new BinaryWriter().tag(1, WireType.LengthDelimited).bytes(duration.finish()).finish();
}

/**
 * google.rpc.Status { int32 code = 1; string message = 2; repeated Any details = 3; }
 * with one RetryInfo, for grpc-js, which sends trailers as they are given.
 * `message` must be the status message exactly: clients check that it matches.
 */
export function encodeStatusWithRetryInfo(
  code: number,
  message: string,
  retryAfterMs: number,
): Uint8Array {
  const any = new BinaryWriter()
    .tag(1, WireType.LengthDelimited)
    .string(`type.googleapis.com/${RETRY_INFO_TYPE}`)
    .tag(2, WireType.LengthDelimited)
    .bytes(encodeRetryInfo(retryAfterMs))
    .finish();
  const status = new BinaryWriter();
  if (code !== 0) status.tag(1, WireType.Varint).int32(code);
  if (message !== "") status.tag(2, WireType.LengthDelimited).string(message);
  return status.tag(3, WireType.LengthDelimited).bytes(any).finish();
}
