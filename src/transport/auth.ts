import { createHash, timingSafeEqual } from "node:crypto";
import { MemoryError } from "../core/errors.js";

/**
 * Bearer-token authentication shared by the gRPC and Connect servers. Each
 * token maps to a namespace; the namespace is all the service ever learns
 * about the caller. Health and reflection never pass through here: probes and
 * grpcurl work without a token.
 */
export interface Authenticator {
  /** Whether calls must carry a token. */
  readonly required: boolean;
  /**
   * The caller's namespace, from the value of the `authorization` header or
   * metadata. Throws MemoryError("unauthenticated") when a token is required
   * and the value is missing, malformed or unknown. The token is never put
   * into the error or any log.
   */
  namespaceOf(authorization: string | undefined): string;
}

/** The namespace of every call when no tokens are configured. */
export const DEFAULT_NAMESPACE = "";

interface TokenEntry {
  readonly digest: Buffer;
  readonly namespace: string;
}

const BEARER = /^bearer[ \t]+([^ \t]+)[ \t]*$/i;

/**
 * Creates an Authenticator. Without `tokens` (or with an empty map), every
 * call is in namespace "". With tokens, each call needs
 * `authorization: Bearer <token>` with a configured token.
 *
 * Tokens are compared as SHA-256 digests with timingSafeEqual, against every
 * configured token without stopping at a match, so neither a token's content
 * nor its length can be learnt from response times.
 */
export function createAuthenticator(tokens?: ReadonlyMap<string, string>): Authenticator {
  if (tokens === undefined || tokens.size === 0) {
    return { required: false, namespaceOf: () => DEFAULT_NAMESPACE };
  }
  const entries: TokenEntry[] = [];
  for (const [token, namespace] of tokens) {
    if (token.length === 0 || /\s/.test(token)) {
      throw new Error("auth tokens must be non-empty and contain no whitespace");
    }
    entries.push({ digest: sha256(token), namespace });
  }
  return {
    required: true,
    namespaceOf(authorization) {
      const token = authorization === undefined ? undefined : BEARER.exec(authorization)?.[1];
      if (token === undefined) {
        throw new MemoryError("unauthenticated", "missing bearer token (authorization: Bearer …)");
      }
      const presented = sha256(token);
      let namespace: string | undefined;
      for (const entry of entries) {
        if (timingSafeEqual(entry.digest, presented) && namespace === undefined) {
          namespace = entry.namespace;
        }
      }
      if (namespace === undefined) {
        throw new MemoryError("unauthenticated", "unknown bearer token");
      }
      return namespace;
    },
  };
}

function sha256(text: string): Buffer {
  return createHash("sha256").update(text, "utf8").digest();
}
