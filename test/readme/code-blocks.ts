/**
 * The README's fenced code blocks and what the README says should be done with
 * each. Every block in a language a reader would run (sh, python, ts, js, go) is
 * preceded by a marker line:
 *
 *   <!-- example: run -->                 run it; it must exit 0
 *   <!-- example: stream -->              a command that streams until stopped:
 *                                         run it until it prints, then stop it
 *   <!-- example: not run (REASON) -->    not an example (install commands that
 *                                         CI runs itself, a layout listing …)
 *
 * so that an example added without a marker fails the README test instead of
 * going untested. Parsing is a line scan: no regular expression runs over
 * more than one line.
 */

export type BlockAction =
  | { kind: "run" }
  | { kind: "stream" }
  | { kind: "not-run"; reason: string };

export interface CodeBlock {
  /** The fence's info string, e.g. "sh", "python". */
  lang: string;
  code: string;
  /** 1-based line of the opening fence. */
  line: number;
  /** undefined: no marker on the line before the fence. */
  action: BlockAction | undefined;
}

/** Languages whose blocks must carry a marker. */
export const EXAMPLE_LANGUAGES = new Set(["sh", "bash", "python", "ts", "js", "go"]);

const MARKER_PREFIX = "<!-- example:";
const MARKER_SUFFIX = "-->";

/** Parses one marker line; undefined if the line is not a marker. Throws on a malformed one. */
export function parseMarker(line: string): BlockAction | undefined {
  const trimmed = line.trim();
  if (!trimmed.startsWith(MARKER_PREFIX)) return undefined;
  if (!trimmed.endsWith(MARKER_SUFFIX)) throw new Error(`unterminated example marker: ${line}`);
  const body = trimmed.slice(MARKER_PREFIX.length, -MARKER_SUFFIX.length).trim();
  if (body === "run") return { kind: "run" };
  if (body === "stream") return { kind: "stream" };
  const notRun = "not run (";
  if (body.startsWith(notRun) && body.endsWith(")")) {
    const reason = body.slice(notRun.length, -1).trim();
    if (reason !== "") return { kind: "not-run", reason };
  }
  throw new Error(`example marker must be "run", "stream" or "not run (reason)": ${line}`);
}

/** The fenced blocks of a Markdown text, in order. */
export function codeBlocks(markdown: string): CodeBlock[] {
  const lines = markdown.split("\n");
  const blocks: CodeBlock[] = [];
  let i = 0;
  while (i < lines.length) {
    const open = lines[i] ?? "";
    if (!open.startsWith("```")) {
      i++;
      continue;
    }
    const lang = open.slice(3).trim();
    const start = i;
    i++;
    const body: string[] = [];
    while (i < lines.length && !(lines[i] ?? "").startsWith("```")) {
      body.push(lines[i] ?? "");
      i++;
    }
    if (i >= lines.length) throw new Error(`unclosed code fence at line ${start + 1}`);
    i++; // the closing fence
    const previous = start > 0 ? (lines[start - 1] ?? "") : "";
    blocks.push({
      lang,
      code: `${body.join("\n")}\n`,
      line: start + 1,
      action: parseMarker(previous),
    });
  }
  return blocks;
}

/**
 * Points an example at the test's server: the README's addresses are the
 * defaults of `npm start`; the test's server listens on free ports.
 */
export function retarget(code: string, grpcAddress: string, httpAddress: string): string {
  return code.replaceAll("127.0.0.1:50051", grpcAddress).replaceAll("127.0.0.1:8080", httpAddress);
}
