import { basename } from 'node:path'
import { SimError, SimErrorCode, checkOption, traceError } from '../errors/simError.js'
import { type TextTokenizer, tokenizeText } from './tokens.js'
import { forEachJsonObjectLine, isDirectory, listFiles, readTraceText } from './traceFiles.js'
import type { TurnSpec, Workload } from './types.js'

/**
 * Options of the LMCache agent-trace loader.
 *
 * @example
 * ```ts
 * import type { LmcacheTraceOptions } from '@kvc/sim'
 * const o: LmcacheTraceOptions = { tokenizer: 'bytes', sessionSpacingS: 2 }
 * ```
 */
export interface LmcacheTraceOptions {
  /** How text becomes token ids (default `pieces`, about 4 characters per token). */
  readonly tokenizer?: TextTokenizer
  /**
   * Sessions were recorded at unrelated times; session `k` (in order of first call) is replayed
   * from `k × sessionSpacingS` seconds, keeping its calls' recorded spacing (default 5).
   */
  readonly sessionSpacingS?: number
}

interface Call {
  ts: number
  input: Uint32Array
  output: Uint32Array
  line: number
}

/**
 * Parse one LMCache agent-trace session file (JSONL, one LLM call per line:
 * `{"timestamp": µs, "input": str, "output": str, "session_id": str}`) into its calls, sorted by
 * timestamp (the files are not always in order). Bad data fails with `INVALID_TRACE` naming the
 * file, the line and the field.
 */
function parseSessionFile(
  text: string,
  file: string,
  tokenizer: TextTokenizer,
): { id: string; calls: Call[]; emptyInputs: number } {
  const calls: Call[] = []
  let emptyInputs = 0
  let id: string | undefined
  forEachJsonObjectLine(text, file, (line, r) => {
    if (typeof r.timestamp !== 'number' || !Number.isFinite(r.timestamp) || r.timestamp < 0) {
      throw traceError(file, line, 'timestamp', 'must be a non-negative number of microseconds', r.timestamp)
    }
    if (typeof r.input !== 'string')
      throw traceError(file, line, 'input', 'must be a string (the prompt)', r.input)
    if (typeof r.output !== 'string') throw traceError(file, line, 'output', 'must be a string', r.output)
    if (typeof r.session_id !== 'string' || r.session_id === '') {
      throw traceError(file, line, 'session_id', 'must be a non-empty string', r.session_id)
    }
    if (id !== undefined && r.session_id !== id) {
      throw traceError(
        file,
        line,
        'session_id',
        `differs from the file's first session id ${JSON.stringify(id)}`,
        r.session_id,
      )
    }
    id = r.session_id
    if (r.input.length === 0) {
      // The published data has calls whose flattened prompt is empty: nothing to serve.
      emptyInputs++
      return
    }
    calls.push({
      ts: r.timestamp,
      input: tokenizeText(r.input, tokenizer),
      output: tokenizeText(r.output, tokenizer),
      line,
    })
  })
  calls.sort((a, b) => a.ts - b.ts || a.line - b.line)
  return { id: id ?? basename(file), calls, emptyInputs }
}

function commonPrefix(a: Uint32Array, b: Uint32Array): number {
  const n = Math.min(a.length, b.length)
  let i = 0
  while (i < n && a[i] === b[i]) i++
  return i
}

/**
 * Parse LMCache agent-trace session files (`[file, text]` pairs; one file is one session). Empty
 * files are skipped. See {@link loadLmcacheTrace}.
 *
 * @example
 * ```ts
 * import { parseLmcacheTrace } from '@kvc/sim'
 * const line = (ts: number, input: string) => JSON.stringify({ timestamp: ts, input, output: 'ok', session_id: 'a' })
 * const w = parseLmcacheTrace([['a.jsonl', `${line(0, 'hello')}\n${line(2_000_000, 'hello ok again')}\n`]])
 * w.turns.length // 2
 * w.turns[1].thinkMs // 0: arrivals are open-loop at the recorded times, in order
 * ```
 */
export function parseLmcacheTrace(
  files: readonly (readonly [string, string])[],
  options: LmcacheTraceOptions = {},
): Workload {
  const tokenizer = options.tokenizer ?? 'pieces'
  checkOption(
    tokenizer === 'pieces' || tokenizer === 'bytes',
    `tokenizer must be pieces or bytes, got ${tokenizer}`,
    tokenizer,
  )
  const spacing = options.sessionSpacingS ?? 5
  checkOption(
    Number.isFinite(spacing) && spacing >= 0,
    `sessionSpacingS must be >= 0, got ${spacing}`,
    spacing,
  )
  const parsed = files.map(([file, text]) => parseSessionFile(text, file, tokenizer))
  const sessions = parsed.filter((s) => s.calls.length > 0)
  const emptyInputs = parsed.reduce((n, s) => n + s.emptyInputs, 0)
  const emptyFiles = parsed.filter((s) => s.calls.length === 0 && s.emptyInputs === 0).length
  if (sessions.length === 0) {
    throw new SimError(
      SimErrorCode.InvalidTrace,
      'the LMCache trace has no calls (all files empty)',
      files.length,
    )
  }
  sessions.sort((a, b) => a.calls[0]!.ts - b.calls[0]!.ts || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))
  const turns: TurnSpec[] = []
  const prompts: Uint32Array[] = []
  const outputs: Uint32Array[] = []
  sessions.forEach((s, k) => {
    const t0 = s.calls[0]!.ts
    let prev: Uint32Array | undefined
    s.calls.forEach((c, t) => {
      const reuse = prev === undefined ? 0 : commonPrefix(prev, c.input)
      turns.push({
        id: turns.length,
        session: k,
        turnIndex: t,
        arrivalMs: k * spacing * 1000 + (c.ts - t0) / 1000,
        thinkMs: 0,
        inputLength: c.input.length,
        outputLength: Math.max(1, c.output.length),
        appendTokens: c.input.length - reuse,
        reuseFraction: reuse / c.input.length,
      })
      prompts.push(c.input)
      outputs.push(c.output)
      // What the session holds after this call: its prompt followed by its output.
      const held = new Uint32Array(c.input.length + c.output.length)
      held.set(c.input)
      held.set(c.output, c.input.length)
      prev = held
    })
  })
  return {
    name: 'lmcache-agent',
    source: files.length === 1 ? files[0]![0] : `${files.length} session files`,
    arrivalMode: 'open',
    sessions: sessions.length,
    sessionLabels: sessions.map((s) => s.id),
    turns,
    notes: [
      ...(emptyInputs > 0 ? [`${emptyInputs} calls with an empty input were skipped`] : []),
      ...(emptyFiles > 0 ? [`${emptyFiles} empty session files were skipped`] : []),
    ],
    tokenScale: 1,
    suggestedPageSize: undefined,
    promptTokens: (i) => prompts[i]!,
    outputTokens: (i) => (outputs[i]!.length > 0 ? outputs[i]! : undefined),
  }
}

/**
 * Load LMCache agent traces (LMCache/lmcache-agent-trace): a directory of `*.jsonl` session files
 * (searched recursively), or one file. Calls are sorted by timestamp within a session; text is
 * tokenized deterministically ({@link TextTokenizer}).
 *
 * @example
 * ```ts
 * import { loadLmcacheTrace } from '@kvc/sim'
 * // a trace fetched as docs/design/traces.md says
 * const w = loadLmcacheTrace('traces/lmcache-agent-trace/miniswe')
 * w.sessions // 20
 * ```
 */
export function loadLmcacheTrace(path: string, options: LmcacheTraceOptions = {}): Workload {
  const files = isDirectory(path) ? listFiles(path, '.jsonl') : [path]
  if (files.length === 0)
    throw new SimError(SimErrorCode.TraceNotFound, `no .jsonl files under ${path}`, path)
  const w = parseLmcacheTrace(
    files.map((f) => [f, readTraceText(f)] as const),
    options,
  )
  return { ...w, source: path }
}
