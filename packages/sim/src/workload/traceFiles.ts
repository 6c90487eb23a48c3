import { readFileSync, readdirSync, statSync } from 'node:fs'
import { SimError, SimErrorCode, traceError } from '../errors/simError.js'

/** Read a text file or throw `TRACE_NOT_FOUND` naming it. */
export function readTraceText(file: string): string {
  try {
    return readFileSync(file, 'utf8')
  } catch (err) {
    const why = (err as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file' : (err as Error).message
    throw new SimError(SimErrorCode.TraceNotFound, `cannot read trace ${file}: ${why}`, file)
  }
}

/** Whether `path` is a directory; `TRACE_NOT_FOUND` when it does not exist. */
export function isDirectory(path: string): boolean {
  try {
    return statSync(path).isDirectory()
  } catch {
    throw new SimError(
      SimErrorCode.TraceNotFound,
      `cannot read trace ${path}: no such file or directory`,
      path,
    )
  }
}

/** Files under `dir` (recursively) whose name ends with `ext`, sorted for determinism. */
export function listFiles(dir: string, ext: string): string[] {
  const out: string[] = []
  const walk = (d: string) => {
    for (const name of readdirSync(d).sort()) {
      const p = `${d}/${name}`
      if (statSync(p).isDirectory()) walk(p)
      else if (name.endsWith(ext)) out.push(p)
    }
  }
  walk(dir.replace(/\/+$/, ''))
  return out
}

/**
 * The records of a JSONL trace: each non-blank line parsed as a JSON object, with its 1-based
 * line number. A line that is not valid JSON, or not an object, fails with `INVALID_TRACE`.
 */
export function* jsonObjectLines(text: string, file: string): Generator<[number, Record<string, unknown>]> {
  for (const [line, s] of nonBlankLines(text)) {
    let o: unknown
    try {
      o = JSON.parse(s)
    } catch (err) {
      throw traceError(file, line, '(json)', `not valid JSON: ${(err as Error).message}`)
    }
    if (typeof o !== 'object' || o === null || Array.isArray(o)) {
      throw traceError(file, line, '(json)', 'each line must be a JSON object', o)
    }
    yield [line, o as Record<string, unknown>]
  }
}

/** Split text into lines, keeping 1-based line numbers, skipping blank lines. */
export function* nonBlankLines(text: string): Generator<[number, string]> {
  let line = 0
  let start = 0
  const n = text.length
  while (start <= n) {
    let end = text.indexOf('\n', start)
    if (end === -1) end = n
    line++
    let s = text.slice(start, end)
    if (s.endsWith('\r')) s = s.slice(0, -1)
    if (s.trim() !== '') yield [line, s]
    start = end + 1
  }
}
