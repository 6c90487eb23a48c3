import { checkOption, traceError } from '../errors/simError.js'
import type { SimGranularity } from '../granularity/kvGeometry.js'
import { sessionlessTurn, sessionlessWorkload } from './sessionless.js'
import { jsonObjectLines, readTraceText } from './traceFiles.js'
import type { TurnSpec, Workload } from './types.js'

/** Page tokens stay below this; each prompt ends with one token above it (see {@link parseMooncakeTrace}). */
const PAGE_TOKEN_LIMIT = 0xf0000000

/**
 * Options of the Mooncake FAST'25 trace loader.
 *
 * @example
 * ```ts
 * import type { MooncakeTraceOptions } from '@kvc/sim'
 * const o: MooncakeTraceOptions = { pageTokens: 16 } // small pages for a quick test
 * ```
 */
export interface MooncakeTraceOptions {
  /** Tokens per block in the trace (Mooncake: 512); `hash_ids.length` must be `ceil(input_length / traceBlockTokens)`. */
  readonly traceBlockTokens?: number
  /**
   * Tokens each block id expands to (default: `traceBlockTokens`). The block-level hit ratio does
   * not depend on it (every block is one full page); smaller pages make validation runs cheaper.
   * The cost model always charges `input_length`.
   */
  readonly pageTokens?: number
  /**
   * `token` (default): every block expands to `pageTokens` tokens. `block`: every block is two
   * cache units (see `KvGeometry`), hundreds of times fewer than its tokens, with the same pages,
   * matches and memory as at token level; needs `pageTokens` unset (or the block size).
   */
  readonly granularity?: SimGranularity
}

/**
 * Parse a Mooncake FAST'25 trace (JSONL, one request per line:
 * `{"timestamp": ms, "input_length": tokens, "output_length": tokens, "hash_ids": [...]}`).
 * Each `hash_ids` entry is a prefix hash of one 512-token block; each is expanded into a
 * deterministic page of tokens (see {@link expandBlockIds}), so equal ids share KV exactly, and
 * the prompt ends with one request-specific token (the generation prompt), so that an engine,
 * which computes at least the last prompt token, can still reuse every block of a full hit. Bad
 * data fails with a `SimError` (`INVALID_TRACE`) naming the file, the line and the field.
 * Requests carry no session (the trace has none).
 *
 * @example
 * ```ts
 * import { parseMooncakeTrace } from '@kvc/sim'
 * const w = parseMooncakeTrace('{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}\n', 'inline.jsonl')
 * w.turns[0].inputLength // 600
 * w.promptTokens(0).length // 1025: two full 512-token pages and the generation token
 * ```
 */
export function parseMooncakeTrace(text: string, file: string, options: MooncakeTraceOptions = {}): Workload {
  const block = options.traceBlockTokens ?? 512
  const pageTokens = options.pageTokens ?? block
  checkOption(
    Number.isInteger(block) && block >= 1,
    `traceBlockTokens must be a positive integer, got ${block}`,
    block,
  )
  checkOption(
    Number.isInteger(pageTokens) && pageTokens >= 1,
    `pageTokens must be a positive integer, got ${pageTokens}`,
    pageTokens,
  )
  const granularity = options.granularity ?? 'token'
  checkOption(
    granularity === 'token' || granularity === 'block',
    `granularity must be 'token' or 'block', got ${String(granularity)}`,
    granularity,
  )
  const blocks = granularity === 'block'
  checkOption(
    !blocks || (pageTokens === block && block % 2 === 0),
    `block granularity needs an even block size and no pageTokens other than it (block ${block}, pageTokens ${pageTokens})`,
    pageTokens,
  )
  // Entries per block: its tokens, or two units.
  const perBlock = blocks ? 2 : pageTokens
  const rows: { ts: number; input: number; output: number; from: number; to: number; line: number }[] = []
  let ids = new Int32Array(1 << 16)
  let nIds = 0
  for (const [line, r] of jsonObjectLines(text, file)) {
    const ts = r.timestamp
    if (typeof ts !== 'number' || !Number.isFinite(ts) || ts < 0) {
      throw traceError(file, line, 'timestamp', 'must be a non-negative number of milliseconds', ts)
    }
    const input = r.input_length
    if (typeof input !== 'number' || !Number.isInteger(input) || input < 1) {
      throw traceError(file, line, 'input_length', 'must be a positive integer (tokens)', input)
    }
    const output = r.output_length
    if (typeof output !== 'number' || !Number.isInteger(output) || output < 0) {
      throw traceError(file, line, 'output_length', 'must be a non-negative integer (tokens)', output)
    }
    const h = r.hash_ids
    if (!Array.isArray(h)) throw traceError(file, line, 'hash_ids', 'must be an array of block ids', h)
    const want = Math.ceil(input / block)
    if (h.length !== want) {
      throw traceError(
        file,
        line,
        'hash_ids',
        `has ${h.length} ids but input_length ${input} needs ceil(${input}/${block}) = ${want}`,
        h.length,
      )
    }
    if (nIds + h.length > ids.length) {
      const grown = new Int32Array(Math.max(ids.length * 2, nIds + h.length))
      grown.set(ids.subarray(0, nIds))
      ids = grown
    }
    const from = nIds
    for (let i = 0; i < h.length; i++) {
      const id = h[i]
      if (
        typeof id !== 'number' ||
        !Number.isInteger(id) ||
        id < 0 ||
        (id + 1) * perBlock > PAGE_TOKEN_LIMIT
      ) {
        throw traceError(
          file,
          line,
          `hash_ids[${i}]`,
          `must be a non-negative integer below ${Math.floor(PAGE_TOKEN_LIMIT / perBlock)}`,
          id,
        )
      }
      ids[nIds++] = id
    }
    rows.push({ ts, input, output, from, to: nIds, line })
  }
  if (rows.length === 0) throw traceError(file, 1, '(file)', 'the trace has no requests')
  // Replay in time order (stable: file order among equal timestamps).
  const order = rows.map((_, i) => i).sort((a, b) => rows[a]!.ts - rows[b]!.ts || a - b)
  const t0 = rows[order[0]!]!.ts
  const seen = new Set<number>()
  const turns: TurnSpec[] = []
  const spans: number[] = []
  for (const ri of order) {
    const r = rows[ri]!
    let repeated = 0
    for (let i = r.from; i < r.to; i++) {
      const id = ids[i]!
      if (seen.has(id)) repeated++
      else seen.add(id)
    }
    turns.push(
      sessionlessTurn(
        turns.length,
        r.ts - t0,
        r.input,
        r.output,
        Math.min(r.input, repeated * block) / r.input,
      ),
    )
    spans.push(r.from, r.to)
  }
  return sessionlessWorkload({
    name: `mooncake:${file.split('/').pop()}`,
    source: file,
    turns,
    tokenScale: block / pageTokens,
    suggestedPageSize: pageTokens,
    ...(blocks ? { blockTokens: block } : {}),
    promptTokens: (i) => {
      const from = spans[2 * i]!
      const to = spans[2 * i + 1]!
      // Block b becomes the entries b·perBlock … b·perBlock + perBlock − 1 (expandBlockIds),
      // written in place.
      const out = new Uint32Array((to - from) * perBlock + 1)
      let k = 0
      for (let j = from; j < to; j++) {
        const base = ids[j]! * perBlock
        for (let t = 0; t < perBlock; t++) out[k++] = base + t
      }
      out[k] = PAGE_TOKEN_LIMIT + (i % 0x0fffffff)
      return out
    },
  })
}

/**
 * Load a Mooncake FAST'25 JSONL trace from a file (see {@link parseMooncakeTrace}).
 *
 * @example
 * ```ts
 * import { loadMooncakeTrace } from '@kvc/sim'
 * // a trace fetched as docs/design/traces.md says
 * const w = loadMooncakeTrace('traces/conversation_trace.jsonl')
 * w.turns.length // 12031
 * ```
 */
export function loadMooncakeTrace(file: string, options: MooncakeTraceOptions = {}): Workload {
  return parseMooncakeTrace(readTraceText(file), file, options)
}
