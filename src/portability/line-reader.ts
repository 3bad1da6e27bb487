/**
 * Typed reads of one parsed export line (thread-line.ts), each failing with
 * a ThreadLineError that names the line and the field.
 */

/** A line that cannot be imported; the message names the line and the field. */
export class ThreadLineError extends Error {
  override readonly name = "ThreadLineError";
}

/** Typed reads of parsed JSON, each failing with the line and the field. */
export class Reader {
  constructor(readonly where: string) {}

  fail(field: string, problem: string): never {
    throw new ThreadLineError(`${this.where}: ${field}: ${problem}`);
  }

  /** A plain object; with `allowed`, refuses other keys (unless `partial`). */
  object(
    v: unknown,
    field: string,
    allowed: readonly string[] | undefined,
    partial = false,
  ): Record<string, unknown> {
    if (typeof v !== "object" || v === null || Array.isArray(v)) {
      this.fail(field || "the line", "must be a JSON object");
    }
    const o = v as Record<string, unknown>;
    if (allowed !== undefined && !partial) {
      for (const k of Object.keys(o)) {
        if (!allowed.includes(k))
          this.fail(field === "" ? k : `${field}.${k}`, "is not a known field");
      }
    }
    return o;
  }

  array(v: unknown, field: string): unknown[] {
    if (!Array.isArray(v)) this.fail(field, "must be a JSON array");
    return v;
  }

  string(v: unknown, field: string): string {
    if (typeof v !== "string") this.fail(field, "must be a string");
    return v;
  }

  boolean(v: unknown, field: string): boolean {
    if (typeof v !== "boolean") this.fail(field, "must be true or false");
    return v;
  }

  /** A whole number from 0 up to 2^53 - 1. */
  count(v: unknown, field: string): number {
    if (typeof v !== "number" || !Number.isSafeInteger(v) || v < 0) {
      this.fail(field, "must be a whole number, 0 or more");
    }
    return v;
  }
}
