import { describe, expect, it } from "vitest";
import { MemoryError } from "../../src/core/errors.js";
import { createAuthenticator } from "../../src/transport/auth.js";

describe("createAuthenticator", () => {
  it("puts every call in namespace '' without tokens", () => {
    for (const auth of [createAuthenticator(), createAuthenticator(new Map())]) {
      expect(auth.required).toBe(false);
      expect(auth.namespaceOf(undefined)).toBe("");
      expect(auth.namespaceOf("Bearer anything")).toBe("");
    }
  });

  const auth = createAuthenticator(
    new Map([
      ["token-of-alpha", "alpha"],
      ["token-of-beta", "beta"],
    ]),
  );

  it("maps each bearer token to its namespace", () => {
    expect(auth.required).toBe(true);
    expect(auth.namespaceOf("Bearer token-of-alpha")).toBe("alpha");
    expect(auth.namespaceOf("Bearer token-of-beta")).toBe("beta");
    expect(auth.namespaceOf("bearer  token-of-beta ")).toBe("beta");
  });

  it.each([
    ["missing", undefined],
    ["empty", ""],
    ["another scheme", "Basic dG9rZW4tb2YtYWxwaGE="],
    ["without a token", "Bearer "],
    ["unknown", "Bearer token-of-gamma"],
    ["a prefix of a token", "Bearer token-of-alph"],
    ["a token with more after it", "Bearer token-of-alpha x"],
  ])("refuses a %s token as unauthenticated, without echoing it", (_, header) => {
    let thrown: unknown;
    try {
      auth.namespaceOf(header);
    } catch (err) {
      thrown = err;
    }
    expect(thrown).toBeInstanceOf(MemoryError);
    expect((thrown as MemoryError).code).toBe("unauthenticated");
    expect((thrown as MemoryError).message).not.toContain("token-of");
  });

  it("refuses empty tokens in the configuration", () => {
    expect(() => createAuthenticator(new Map([["", "ns"]]))).toThrow(/non-empty/);
  });
});
