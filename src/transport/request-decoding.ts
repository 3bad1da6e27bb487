/**
 * Strict decoding of request bodies, for every transport. Anything that is not
 * a well-formed message of the method's input type is INVALID_ARGUMENT with
 * the field at fault named ("messages[0].content: invalid UTF-8"), never
 * INTERNAL, and nothing reaches the service.
 *
 * Binary: one pass over the wire format guided by the descriptor checks tags,
 * wire types, varints, length prefixes and UTF-8 before protobuf-es decodes
 * (protobuf-es neither checks wire types of known fields nor names fields in
 * its errors). Unknown fields stay allowed, as protobuf requires.
 *
 * JSON: the bytes must be UTF-8 (no silent U+FFFD), the text JSON, and the
 * value a message of the input type; unknown keys are refused unless
 * `ignoreUnknownFields`. Failures are located by walking the JSON value.
 */

export { checkBinaryRequest, decodeBinaryRequest } from "./binary-decoding.js";
export {
  checkJsonRequest,
  decodeJsonRequest,
  firstInvalidUtf8,
  type JsonDecodeOptions,
  jsonPathAt,
} from "./json-decoding.js";
