import { closeSync, fstatSync, openSync, readSync, readdirSync, statSync } from 'node:fs'
import { RawText, SimError, SimErrorCode, traceError } from '../errors/simError.js'

/**
 * Largest trace file read (bytes): 512 MiB, about the longest string a JavaScript engine holds.
 * A larger file, or an endless one (`/dev/zero`, a pipe that never closes its end), fails with
 * `INVALID_TRACE` once this much was read instead of exhausting memory.
 */
export const MAX_TRACE_BYTES = 512 * 1024 * 1024

const CHUNK_BYTES = 1 << 20

/**
 * Reads a text file in chunks, at most `maxBytes` of it: `TRACE_NOT_FOUND` when it cannot be
 * opened, `INVALID_TRACE` when it is larger than `maxBytes` (checked up front for a regular
 * file, while reading for a device or a pipe) or holds a NUL byte (binary data, not a text
 * trace). `what` names the file in messages (`trace`, `fault file`).
 */
export function readTextCapped(file: string, maxBytes: number = MAX_TRACE_BYTES, what = 'trace'): string {
  let fd: number
  try {
    fd = openSync(file, 'r')
  } catch (err) {
    const why = (err as NodeJS.ErrnoException).code === 'ENOENT' ? 'no such file' : (err as Error).message
    throw new SimError(SimErrorCode.TraceNotFound, `cannot read ${what} ${file}: ${why}`, file)
  }
  const tooLarge = (size: string): SimError =>
    traceError(file, 1, '(file)', `the ${what} is larger than ${maxBytes} bytes (${size})`, maxBytes)
  try {
    const st = fstatSync(fd)
    if (st.isDirectory())
      throw new SimError(SimErrorCode.TraceNotFound, `cannot read ${what} ${file}: it is a directory`, file)
    if (st.isFile() && st.size > maxBytes) throw tooLarge(`${st.size} bytes`)
    // Chunks are kept as bytes and decoded once at the end (one UTF-8 decode of the whole file
    // instead of one per chunk through a StringDecoder).
    const chunks: Buffer[] = []
    let buf = Buffer.allocUnsafe(CHUNK_BYTES)
    let total = 0
    for (;;) {
      let n: number
      try {
        n = readSync(fd, buf, 0, CHUNK_BYTES, null)
      } catch (err) {
        throw new SimError(
          SimErrorCode.TraceNotFound,
          `cannot read ${what} ${file}: ${(err as Error).message}`,
          file,
        )
      }
      if (n === 0) break
      const nul = buf.subarray(0, n).indexOf(0)
      if (nul >= 0)
        throw traceError(
          file,
          1,
          '(file)',
          `holds binary data (a NUL byte at offset ${total + nul}), not text`,
        )
      total += n
      if (total > maxBytes) throw tooLarge(`more than ${maxBytes} bytes read`)
      chunks.push(buf.subarray(0, n))
      buf = Buffer.allocUnsafe(CHUNK_BYTES)
    }
    return (chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, total)).toString('utf8')
  } finally {
    closeSync(fd)
  }
}

/** Read a trace file (at most {@link MAX_TRACE_BYTES}) or throw `TRACE_NOT_FOUND` naming it. */
export function readTraceText(file: string): string {
  return readTextCapped(file, MAX_TRACE_BYTES, 'trace')
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
 * Each non-blank line of `text` (a trailing `\r` removed) handed to `visit` with its 1-based line
 * number, in file order. A plain loop rather than a generator: a trace has a line per request,
 * and walking them is a good part of loading one.
 */
export function forEachNonBlankLine(text: string, visit: (line: number, s: string) => void): void {
  let line = 0
  let start = 0
  const n = text.length
  while (start <= n) {
    let end = text.indexOf('\n', start)
    if (end === -1) end = n
    line++
    let s = text.slice(start, end)
    start = end + 1
    if (s.endsWith('\r')) s = s.slice(0, -1)
    if (s.trim() !== '') visit(line, s)
  }
}

/**
 * The records of a JSONL trace: each non-blank line parsed as a JSON object and handed to `visit`
 * with its 1-based line number, in file order. A line that is not valid JSON, or not an object,
 * fails with `INVALID_TRACE`.
 */
export function forEachJsonObjectLine(
  text: string,
  file: string,
  visit: (line: number, record: Record<string, unknown>) => void,
): void {
  forEachNonBlankLine(text, (line, s) => {
    let o: unknown
    try {
      o = JSON.parse(s)
    } catch (err) {
      throw traceError(file, line, '(json)', `not valid JSON: ${(err as Error).message}`)
    }
    if (typeof o !== 'object' || o === null || Array.isArray(o)) {
      throw traceError(file, line, '(json)', 'each line must be a JSON object', o)
    }
    const r = o as Record<string, unknown>
    for (const k in r) {
      const v = r[k]
      // JSON.parse reads 1e400 as Infinity, which every later message would show as null.
      if (typeof v === 'number' && !Number.isFinite(v))
        throw traceError(file, line, k, 'is a number too large for a double', new RawText(rawValue(s, k)))
    }
    visit(line, r)
  })
}

/** The source text of top-level field `key`'s value on a JSONL line (for messages). */
function rawValue(line: string, key: string): string {
  const at = line.indexOf(JSON.stringify(key))
  if (at < 0) return '?'
  const m = /^\s*:\s*([^,}\]\s]+)/.exec(line.slice(at + JSON.stringify(key).length))
  return m?.[1] ?? '?'
}
