import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { parseAst } from "vite";
import { describe, expect, it } from "vitest";

/**
 * A lint for regular expressions that backtrack: no regular expression in
 * src/ may take more than linear time on text a caller controls. It parses
 * each pattern and rejects the shapes that make a backtracking engine (V8's
 * irregexp is one) exponential or polynomial:
 *
 * - nested: a repeated group holding an unbounded quantifier, `(a+)+`;
 * - ambiguous: a repeated group whose alternatives can start alike, `(a|ab)*`;
 * - adjacent: two quantifiers in a row, one unbounded, whose characters
 *   overlap, with nothing but optional items between, `\s*\s*`, `.*.*`,
 *   `[.!?]+\s*[.!?]*`;
 * - scanning: an unanchored pattern that starts with an unbounded quantifier
 *   and has more to match after it, `[.!?]+(?=\s)`, `\s+$`: every start in a
 *   long run re-reads the rest of the run, so the search is quadratic.
 *
 * Character sets are compared on a sample of characters (all of ASCII and a
 * few others) by asking the engine itself, so classes and escapes need no
 * hand-written semantics. The lint is conservative: a shape it rejects may
 * be safe on some inputs; rewrite it as a loop or anchor it.
 */

interface Term {
  atom: Atom;
  min: number;
  max: number;
}

type Atom =
  | { kind: "char"; source: string }
  | { kind: "group"; look: boolean; alternatives: Term[][] }
  | { kind: "assertion"; source: string }
  | { kind: "backreference" };

class PatternParser {
  private i = 0;
  private readonly source: string;
  private readonly unicode: boolean;
  /** The v flag's classes nest: [\w--[a-z]]. */
  private readonly setsNest: boolean;

  constructor(source: string, flags: string) {
    this.source = source;
    this.unicode = flags.includes("u") || flags.includes("v");
    this.setsNest = flags.includes("v");
  }

  parse(): Term[][] {
    const alternatives = this.alternation();
    if (this.i < this.source.length) throw new Error(`unexpected ")" at ${this.i}`);
    return alternatives;
  }

  private alternation(): Term[][] {
    const alternatives = [this.sequence()];
    while (this.source[this.i] === "|") {
      this.i += 1;
      alternatives.push(this.sequence());
    }
    return alternatives;
  }

  private sequence(): Term[] {
    const terms: Term[] = [];
    while (this.i < this.source.length && this.source[this.i] !== "|") {
      if (this.source[this.i] === ")") break;
      const atom = this.atom();
      const [min, max] = this.quantifier();
      terms.push({ atom, min, max });
    }
    return terms;
  }

  private atom(): Atom {
    const s = this.source;
    const start = this.i;
    const c = s[this.i];
    if (c === "(") {
      this.i += 1;
      let look = false;
      if (s.startsWith("?:", this.i)) this.i += 2;
      else if (s.startsWith("?=", this.i) || s.startsWith("?!", this.i)) {
        look = true;
        this.i += 2;
      } else if (s.startsWith("?<=", this.i) || s.startsWith("?<!", this.i)) {
        look = true;
        this.i += 3;
      } else if (s.startsWith("?<", this.i)) this.i = s.indexOf(">", this.i) + 1;
      else if (s[this.i] === "?") this.i = s.indexOf(":", this.i) + 1; // (?i:...) modifiers
      const alternatives = this.alternation();
      if (s[this.i] !== ")") throw new Error(`unclosed group at ${start}`);
      this.i += 1;
      return { kind: "group", look, alternatives };
    }
    if (c === "[") {
      this.i += 1;
      let depth = 1;
      while (this.i < s.length && depth > 0) {
        if (s[this.i] === "\\") this.i += 2;
        else {
          if (s[this.i] === "[" && this.setsNest) depth += 1;
          if (s[this.i] === "]") depth -= 1;
          this.i += 1;
        }
      }
      if (depth > 0) throw new Error(`unclosed class at ${start}`);
      return { kind: "char", source: s.slice(start, this.i) };
    }
    if (c === "^" || c === "$") {
      this.i += 1;
      return { kind: "assertion", source: c };
    }
    if (c === "\\") {
      const e = s[this.i + 1] ?? "";
      if (e === "b" || e === "B") {
        this.i += 2;
        return { kind: "assertion", source: `\\${e}` };
      }
      if (/[1-9]/.test(e)) {
        this.i += 2;
        while (/[0-9]/.test(s[this.i] ?? "")) this.i += 1;
        return { kind: "backreference" };
      }
      if (e === "k" && s[this.i + 2] === "<") {
        this.i = s.indexOf(">", this.i) + 1;
        return { kind: "backreference" };
      }
      this.i += 2;
      if (e === "u" && s[this.i] === "{") this.i = s.indexOf("}", this.i) + 1;
      else if (e === "u") this.i += 4;
      else if (e === "x") this.i += 2;
      else if (e === "c") this.i += 1;
      else if ((e === "p" || e === "P") && s[this.i] === "{") this.i = s.indexOf("}", this.i) + 1;
      return { kind: "char", source: s.slice(start, this.i) };
    }
    const code = s.codePointAt(this.i) ?? 0;
    this.i += this.unicode && code > 0xffff ? 2 : 1;
    return { kind: "char", source: s.slice(start, this.i) };
  }

  private quantifier(): [number, number] {
    const s = this.source;
    let bounds: [number, number] | undefined;
    const c = s[this.i];
    if (c === "*") bounds = [0, Infinity];
    else if (c === "+") bounds = [1, Infinity];
    else if (c === "?") bounds = [0, 1];
    if (bounds !== undefined) this.i += 1;
    else if (c === "{") {
      const m = /^\{(\d+)(,(\d*))?\}/.exec(s.slice(this.i, this.i + 24));
      if (m === null) return [1, 1]; // a literal "{"
      const min = Number(m[1]);
      bounds = [min, m[2] === undefined ? min : m[3] === "" ? Infinity : Number(m[3])];
      this.i += m[0].length;
    } else return [1, 1];
    if (s[this.i] === "?") this.i += 1; // lazy: same backtracking, other order
    return bounds;
  }
}

/** Sample characters the character sets are compared on. */
const SAMPLES = [
  ...Array.from({ length: 128 }, (_, c) => String.fromCharCode(c)),
  "\u00a0",
  "\u00e9",
  "\u03b1",
  "\u2028",
  "\u3000",
  "\u4e2d",
  "\ufeff",
  "\u{1f600}",
];
const ALL = SAMPLES.map(() => true);
const NONE = SAMPLES.map(() => false);

type CharSet = boolean[];

function union(a: CharSet, b: CharSet): CharSet {
  return a.map((x, i) => x || (b[i] ?? false));
}

function overlaps(a: CharSet, b: CharSet): boolean {
  return a.some((x, i) => x && (b[i] ?? false));
}

class Linter {
  private readonly flags: string;
  private readonly findings: string[] = [];
  private readonly cache = new Map<string, CharSet>();

  constructor(flags: string) {
    this.flags = flags.replace(/[gyd]/g, "");
  }

  lint(source: string, flags: string): string[] {
    const alternatives = new PatternParser(source, flags).parse();
    this.alternation(alternatives, 1);
    if (!flags.includes("y")) {
      for (const seq of alternatives) this.scanning(flatten(seq));
    }
    return this.findings;
  }

  private charSet(source: string): CharSet {
    let set = this.cache.get(source);
    if (set === undefined) {
      const re = new RegExp(`^(?:${source})$`, this.flags);
      set = SAMPLES.map((c) => re.test(c));
      this.cache.set(source, set);
    }
    return set;
  }

  /** Every character a term can consume. */
  private chars(term: Term): CharSet {
    const a = term.atom;
    if (a.kind === "char") return this.charSet(a.source);
    if (a.kind === "backreference") return ALL;
    if (a.kind === "assertion" || a.look) return NONE;
    return a.alternatives.flat().reduce((acc, t) => union(acc, this.chars(t)), NONE);
  }

  /** Every character a sequence can start with. */
  private first(seq: Term[]): CharSet {
    let set = NONE;
    for (const t of seq) {
      const a = t.atom;
      if (a.kind === "group" && !a.look) {
        for (const alt of a.alternatives) set = union(set, this.first(alt));
      } else set = union(set, this.chars(t));
      if (t.min > 0 && !nullable(t)) break;
    }
    return set;
  }

  /** `outerMax`: the largest repeat count of the enclosing groups. */
  private alternation(alternatives: Term[][], outerMax: number): void {
    for (const seq of alternatives) {
      this.adjacent(flatten(seq));
      for (const t of seq) {
        if ((outerMax > 1 && t.max === Infinity) || (outerMax === Infinity && t.max > 1)) {
          this.findings.push("nested quantifier: a repeated group holds a quantifier, as in (a+)+");
        }
        if (t.atom.kind !== "group") continue;
        if (t.max > 1) this.ambiguous(t.atom.alternatives);
        this.alternation(t.atom.alternatives, Math.max(outerMax, t.max));
      }
    }
  }

  private ambiguous(alternatives: Term[][]): void {
    const firsts = alternatives.map((alt) => this.first(alt));
    for (let i = 0; i < firsts.length; i++) {
      for (let j = i + 1; j < firsts.length; j++) {
        if (overlaps(firsts[i] ?? NONE, firsts[j] ?? NONE)) {
          this.findings.push(
            "ambiguous repetition: alternatives of a repeated group start alike, as in (a|ab)*",
          );
          return;
        }
      }
    }
  }

  private adjacent(seq: Term[]): void {
    for (let i = 0; i < seq.length; i++) {
      const a = seq[i] as Term;
      if (a.max <= 1) continue;
      const aChars = this.chars(a);
      for (let j = i + 1; j < seq.length; j++) {
        const b = seq[j] as Term;
        const bChars = this.chars(b);
        if (b.max > 1 && (a.max === Infinity || b.max === Infinity) && overlaps(aChars, bChars)) {
          this.findings.push(
            "adjacent quantifiers over overlapping characters, as in \\s*\\s* or [.!?]+\\s*[.!?]*",
          );
          return;
        }
        // Only optional items, or items either side could also match, keep them adjacent.
        if (!(b.min === 0 || nullable(b) || overlaps(aChars, bChars))) break;
      }
    }
  }

  private scanning(seq: Term[]): void {
    const start = seq[0]?.atom;
    if (start?.kind === "assertion" && start.source === "^") return;
    for (let k = 0; k < seq.length; k++) {
      const q = seq[k] as Term;
      if (q.max !== Infinity) continue;
      const qChars = this.chars(q);
      // A prefix that a run of q's characters can match too starts a match at every character.
      const everywhere = seq
        .slice(0, k)
        .every((t) => nullable(t) || overlaps(this.chars(t), qChars));
      const canFailAfter = seq.slice(k + 1).some((t) => !nullable(t) || isZeroWidth(t));
      if (everywhere && canFailAfter) {
        this.findings.push(
          "unanchored leading quantifier with more to match, as in [.!?]+(?=\\s) or \\s+$: quadratic search",
        );
        return;
      }
    }
  }
}

/** Assertions and lookarounds: they consume nothing but can fail. */
function isZeroWidth(t: Term): boolean {
  return t.atom.kind === "assertion" || (t.atom.kind === "group" && t.atom.look);
}

/** Whether a term can match the empty string (zero-width items included). */
function nullable(t: Term): boolean {
  if (t.min === 0) return true;
  const a = t.atom;
  if (a.kind === "assertion") return true;
  if (a.kind !== "group") return false;
  return a.look || a.alternatives.some((alt) => alt.every(nullable));
}

/** A sequence with its once-only, single-alternative groups opened in place. */
function flatten(seq: Term[]): Term[] {
  return seq.flatMap((t) => {
    const a = t.atom;
    const only = a.kind === "group" && !a.look ? a.alternatives : undefined;
    if (only?.length === 1 && t.min === 1 && t.max === 1) return flatten(only[0] ?? []);
    return [t];
  });
}

/** Findings for one pattern; empty when it is linear. */
function lintPattern(source: string, flags = ""): string[] {
  return [...new Set(new Linter(flags).lint(source, flags))];
}

interface Found {
  where: string;
  source: string;
  flags: string;
}

/** Every regular expression in the TypeScript files under `dir`: literals and RegExp(...). */
function regexesIn(dir: string): { found: Found[]; dynamic: string[] } {
  const found: Found[] = [];
  const dynamic: string[] = [];
  const files = readdirSync(dir, { recursive: true, encoding: "utf8" }).filter((f) =>
    f.endsWith(".ts"),
  );
  for (const file of files) {
    const path = join(dir, file);
    const code = readFileSync(path, "utf8");
    const lineOf = (offset: number) => code.slice(0, offset).split("\n").length;
    const where = (offset: number) => `${relative(process.cwd(), path)}:${lineOf(offset)}`;
    const visit = (node: unknown): void => {
      if (Array.isArray(node)) {
        for (const n of node) visit(n);
        return;
      }
      if (node === null || typeof node !== "object") return;
      const n = node as Record<string, unknown> & { start: number };
      const regex = n.regex as { pattern: string; flags: string } | undefined;
      if (n.type === "Literal" && regex !== undefined) {
        found.push({ where: where(n.start), source: regex.pattern, flags: regex.flags });
      }
      const callee = n.callee as { type?: string; name?: string } | undefined;
      if (
        (n.type === "NewExpression" || n.type === "CallExpression") &&
        callee?.type === "Identifier" &&
        callee.name === "RegExp"
      ) {
        const [pattern, flags] = (n.arguments as { type: string; value: unknown }[]) ?? [];
        const literal = (a: typeof pattern) =>
          a?.type === "Literal" && typeof a.value === "string" ? a.value : undefined;
        const source = literal(pattern);
        if (source === undefined) dynamic.push(where(n.start));
        else found.push({ where: where(n.start), source, flags: literal(flags) ?? "" });
      }
      for (const value of Object.values(n)) visit(value);
    };
    visit(parseAst(code, { lang: "ts" }));
  }
  return { found, dynamic };
}

describe("regular expression lint: the detector", () => {
  const bad = [
    "(a+)+",
    "(a*)*b",
    "^(a+)+$",
    "(?:x+x+)+y",
    "(?<word>\\w+\\s?)*$",
    "((ab)*c)*",
    "(a|a)*",
    "(a|ab)+c",
    "(?:\\d|[0-9a-f])*!",
    "\\s*\\s*",
    ".*.*=",
    "x.*.*y",
    "[.!?]+\\s*[.!?]*",
    "a*a+",
    "\\d+\\d+",
    "\\s+\\S*\\s+x",
    "[.!?]+(?=\\s)",
    "\\/+$",
    "\\s+$",
    "\\d+\\.\\d+",
    "a[a-z]+;",
    "(?:\\w+)x",
  ];
  const good = [
    "^\\d+$",
    "\\s+",
    "\\r?\\n",
    "[{}]",
    "^\\[(\\d+) earlier lines? omitted\\]$",
    "^(\\d{1,3}\\.){3}\\d{1,3}$",
    "^bearer[ \\t]+([^ \\t]+)[ \\t]*$",
    "[\\u0000-\\u001f\\u007f-\\u009f]",
    "^([0-9a-f]+)\\.(\\d{1,15})$",
    "^(0|[1-9]\\d{0,19})-(0|[1-9]\\d{0,19})$",
    "redis_version:(\\d+)\\.(\\d+)",
    "^(LOADING|BUSY|MASTERDOWN)\\b",
    "^\\d+\\.\\d+$",
    "x\\s+y",
    "\\\\",
    "a{2}b{3,}",
    "[\\]+]+",
    "\\p{L}",
  ];

  it.each(bad)("rejects %s", (source) => {
    expect(lintPattern(source)).not.toEqual([]);
  });

  it.each(good)("accepts %s", (source) => {
    expect(lintPattern(source, source.includes("\\p") ? "u" : "")).toEqual([]);
  });

  it("accepts a leading run when the pattern is sticky, and flags the literal it sees", () => {
    expect(lintPattern("\\s+$", "y")).toEqual([]);
    expect(lintPattern("[.!?]+(?=\\s)", "g")).not.toEqual([]);
  });

  it("finds literals and RegExp(...) calls in TypeScript, and refuses built patterns", () => {
    const dir = mkdtempSync(join(tmpdir(), "regex-lint-"));
    writeFileSync(
      join(dir, "sample.ts"),
      [
        "// a comment with /(b+)+/ in it",
        'const path: string = "/not/a/regex/";',
        "const ratio = (1 / 2) / 3;",
        "const t = `$" + "{ratio / 2}/x/`;",
        'export const found = [/(a+)+/, /\\d+/g, new RegExp("\\\\s*\\\\s*", "i"), RegExp("x")];',
        "export const built = new RegExp(path + t);",
      ].join("\n"),
    );
    const { found, dynamic } = regexesIn(dir);
    rmSync(dir, { recursive: true });
    expect(found.map((f) => `${f.source}/${f.flags}`).sort()).toEqual(
      ["(a+)+/", "\\d+/g", "\\s*\\s*/i", "x/"].sort(),
    );
    expect(dynamic).toHaveLength(1);
  });
});

describe("regular expression lint: src/", () => {
  const { found, dynamic } = regexesIn(join(process.cwd(), "src"));

  it("finds the patterns the sources hold", () => {
    expect(found.length).toBeGreaterThan(5);
  });

  it("has no regular expression that backtracks", () => {
    const findings = found.flatMap((f) =>
      lintPattern(f.source, f.flags).map((why) => `${f.where} /${f.source}/${f.flags}: ${why}`),
    );
    expect(findings).toEqual([]);
  });

  it("builds no regular expression from a string it cannot check", () => {
    expect(dynamic).toEqual([]);
  });
});
