#!/usr/bin/env node
// Reports the size of the server's source: lines per file and the longest
// functions (a closure counts with everything nested in it, so a factory
// that holds a whole store in one closure shows as one long function).
//
//   node scripts/size-report.mjs [--check] [--top N] [dir …]   (default: src)
//
// With --check it exits 1 when a file passes MAX_FILE_LINES or a function
// MAX_FUNCTION_LINES, naming each. Parsed with oxc through rolldown's
// parseAst (a devDependency), which reads TypeScript as it is.
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { parseAst } from "rolldown/parseAst";

export const MAX_FILE_LINES = 400;
export const MAX_FUNCTION_LINES = 80;

const FUNCTION_TYPES = new Set([
  "FunctionDeclaration",
  "FunctionExpression",
  "ArrowFunctionExpression",
]);

function* sourceFiles(dir) {
  for (const name of readdirSync(dir).sort()) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) yield* sourceFiles(path);
    else if (name.endsWith(".ts") && !name.endsWith(".d.ts")) yield path;
  }
}

/** Line number (1-based) of each offset, by a table of line starts. */
function lineOf(starts, offset) {
  let lo = 0;
  let hi = starts.length - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (starts[mid] <= offset) lo = mid;
    else hi = mid - 1;
  }
  return lo + 1;
}

/** The functions of one file: name, first line, line count. */
export function functionsOf(path) {
  const text = readFileSync(path, "utf8");
  const starts = [0];
  for (let i = 0; i < text.length; i++) if (text[i] === "\n") starts.push(i + 1);
  const ast = parseAst(text, { lang: "ts" }, path);
  const found = [];
  const visit = (node, name) => {
    if (node === null || typeof node !== "object") return;
    if (Array.isArray(node)) {
      for (const child of node) visit(child, name);
      return;
    }
    let here = name;
    if (node.type === "VariableDeclarator" && node.id?.type === "Identifier") here = node.id.name;
    if ((node.type === "MethodDefinition" || node.type === "Property") && node.key?.name)
      here = node.key.name;
    if (FUNCTION_TYPES.has(node.type)) {
      const first = lineOf(starts, node.start);
      const last = lineOf(starts, node.end);
      found.push({
        name: node.id?.name ?? here ?? "(anonymous)",
        line: first,
        lines: last - first + 1,
      });
    }
    for (const [key, child] of Object.entries(node)) {
      if (key !== "type" && typeof child === "object") visit(child, here);
    }
  };
  visit(ast, undefined);
  return { lines: starts.length - (text.endsWith("\n") ? 1 : 0), functions: found };
}

/** Every file of `dirs` with its line count and longest function. */
export function sizeReport(dirs) {
  const files = [];
  for (const dir of dirs) {
    for (const path of sourceFiles(dir)) {
      const { lines, functions } = functionsOf(path);
      const longest = functions.reduce((a, b) => (b.lines > (a?.lines ?? 0) ? b : a), undefined);
      files.push({ path: relative(process.cwd(), path), lines, functions, longest });
    }
  }
  return files;
}

/** What passes the limits, as "path: …" lines. */
export function sizeViolations(files) {
  const out = [];
  for (const f of files) {
    if (f.lines > MAX_FILE_LINES) out.push(`${f.path}: ${f.lines} lines (limit ${MAX_FILE_LINES})`);
    for (const fn of f.functions) {
      if (fn.lines > MAX_FUNCTION_LINES)
        out.push(
          `${f.path}:${fn.line}: function ${fn.name} is ${fn.lines} lines (limit ${MAX_FUNCTION_LINES})`,
        );
    }
  }
  return out;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const args = process.argv.slice(2);
  const check = args.includes("--check");
  const topAt = args.indexOf("--top");
  const top = topAt >= 0 ? Number(args[topAt + 1]) : 15;
  const dirs = args.filter((a, i) => !a.startsWith("--") && (topAt < 0 || i !== topAt + 1));
  const files = sizeReport(dirs.length > 0 ? dirs : ["src"]);
  const total = files.reduce((n, f) => n + f.lines, 0);
  console.log(`${files.length} files, ${total} lines`);
  console.log("\nlongest files:");
  for (const f of [...files].sort((a, b) => b.lines - a.lines).slice(0, top))
    console.log(`  ${String(f.lines).padStart(5)}  ${f.path}`);
  console.log("\nlongest functions:");
  const fns = files.flatMap((f) => f.functions.map((fn) => ({ ...fn, path: f.path })));
  for (const fn of fns.sort((a, b) => b.lines - a.lines).slice(0, top))
    console.log(`  ${String(fn.lines).padStart(5)}  ${fn.path}:${fn.line} ${fn.name}`);
  if (check) {
    const bad = sizeViolations(files);
    if (bad.length > 0) {
      console.error(`\n${bad.length} over the limits:\n  ${bad.join("\n  ")}`);
      process.exit(1);
    }
  }
}
