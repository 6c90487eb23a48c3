import { traceError } from '../errors/simError.js'
import { uniqueTokens } from './tokens.js'
import { sessionlessTurn, sessionlessWorkload } from './sessionless.js'
import { forEachNonBlankLine, readTraceText } from './traceFiles.js'
import type { TurnSpec, Workload } from './types.js'

const HEADER = ['TIMESTAMP', 'ContextTokens', 'GeneratedTokens']
const TS = /^(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?$/

/** Milliseconds since the epoch of an Azure trace timestamp (`2023-11-16 18:15:46.6805900`, UTC). */
function parseTimestamp(s: string): number | undefined {
  const m = TS.exec(s.trim())
  if (m === null) return undefined
  const [, y, mo, d, h, mi, se, frac] = m
  const base = Date.UTC(Number(y), Number(mo) - 1, Number(d), Number(h), Number(mi), Number(se))
  if (Number.isNaN(base)) return undefined
  return base + (frac === undefined ? 0 : Number(`0.${frac}`) * 1000)
}

/**
 * Parse an Azure LLM inference trace (CSV with the header `TIMESTAMP,ContextTokens,GeneratedTokens`,
 * Splitwise, ISCA'24). The trace has no prefix or session information: every request gets unique
 * filler tokens, so it exercises arrivals, lengths and capacity, never prefix reuse. Bad data
 * fails with `INVALID_TRACE` naming the file, the line and the column.
 *
 * @example
 * ```ts
 * import { parseAzureTrace } from '@kvc/sim'
 * const w = parseAzureTrace('TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,374,44\n', 'a.csv')
 * w.turns[0].inputLength // 374
 * ```
 */
export function parseAzureTrace(text: string, file: string): Workload {
  const rows: { ts: number; input: number; output: number; line: number }[] = []
  let header = true
  forEachNonBlankLine(text, (line, s) => {
    const cols = s.split(',')
    if (header) {
      header = false
      const got = cols.map((c) => c.trim())
      if (got.length !== 3 || got.some((c, i) => c !== HEADER[i])) {
        throw traceError(file, line, '(header)', `must be ${HEADER.join(',')}`, s)
      }
      return
    }
    if (cols.length !== 3) throw traceError(file, line, '(row)', `must have 3 columns, has ${cols.length}`, s)
    const ts = parseTimestamp(cols[0]!)
    if (ts === undefined)
      throw traceError(file, line, 'TIMESTAMP', 'must look like 2023-11-16 18:15:46.6805900', cols[0])
    const input = Number(cols[1]!.trim())
    if (!Number.isInteger(input) || input < 1) {
      throw traceError(file, line, 'ContextTokens', 'must be a positive integer', cols[1])
    }
    const output = Number(cols[2]!.trim())
    if (cols[2]!.trim() === '' || !Number.isInteger(output) || output < 0) {
      throw traceError(file, line, 'GeneratedTokens', 'must be a non-negative integer', cols[2])
    }
    rows.push({ ts, input, output, line })
  })
  if (header)
    throw traceError(file, 1, '(header)', `the file is empty; expected the header ${HEADER.join(',')}`)
  if (rows.length === 0) throw traceError(file, 2, '(file)', 'the trace has no requests')
  rows.sort((a, b) => a.ts - b.ts || a.line - b.line)
  const t0 = rows[0]!.ts
  const turns: TurnSpec[] = rows.map((r, id) => sessionlessTurn(id, r.ts - t0, r.input, r.output, 0))
  return sessionlessWorkload({
    name: `azure:${file.split('/').pop()}`,
    source: file,
    turns,
    tokenScale: 1,
    suggestedPageSize: undefined,
    promptTokens: (i) => uniqueTokens(i, turns[i]!.inputLength),
  })
}

/**
 * Load an Azure LLM inference CSV trace (see {@link parseAzureTrace}).
 *
 * @example
 * ```ts
 * import { loadAzureTrace } from '@kvc/sim'
 * // a trace fetched as docs/design/traces.md says
 * const w = loadAzureTrace('traces/AzureLLMInferenceTrace_conv.csv')
 * w.turns.length // 19366
 * ```
 */
export function loadAzureTrace(file: string): Workload {
  return parseAzureTrace(readTraceText(file), file)
}
