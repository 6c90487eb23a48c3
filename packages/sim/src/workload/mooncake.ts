import { checkOption, traceError } from '../errors/simError.js'
import type { SimGranularity } from '../granularity/kvGeometry.js'
import { sessionlessTurn, sessionlessWorkload } from './sessionless.js'
import { forEachJsonObjectLine, readTraceText } from './traceFiles.js'
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
  // Per request, in file order: timestamp, lengths, and its ids' span in `ids` (typed columns:
  // a trace has a record per request).
  let ts = new Float64Array(1 << 12)
  let lens = new Float64Array(2 << 12)
  let spans = new Int32Array(2 << 12)
  let rowCount = 0
  let ids = new Int32Array(1 << 16)
  let nIds = 0
  let maxId = -1
  forEachJsonObjectLine(text, file, (line, r) => {
    const t = r.timestamp
    if (typeof t !== 'number' || !Number.isFinite(t) || t < 0) {
      throw traceError(file, line, 'timestamp', 'must be a non-negative number of milliseconds', t)
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
      if (id > maxId) maxId = id
      ids[nIds++] = id
    }
    if (rowCount === ts.length) {
      ts = grow(ts, rowCount * 2)
      lens = grow(lens, rowCount * 4)
      spans = grow(spans, rowCount * 4)
    }
    ts[rowCount] = t
    lens[2 * rowCount] = input
    lens[2 * rowCount + 1] = output
    spans[2 * rowCount] = from
    spans[2 * rowCount + 1] = nIds
    rowCount++
  })
  if (rowCount === 0) throw traceError(file, 1, '(file)', 'the trace has no requests')
  // Replay in time order (stable: file order among equal timestamps).
  const order = Array.from({ length: rowCount }, (_, i) => i).sort((a, b) => ts[a]! - ts[b]! || a - b)
  const t0 = ts[order[0]!]!
  const seen = new IdSet(maxId)
  const turns: TurnSpec[] = []
  // Each turn's ids span, in replay order.
  const turnSpans = new Int32Array(2 * rowCount)
  for (let k = 0; k < rowCount; k++) {
    const ri = order[k]!
    const from = spans[2 * ri]!
    const to = spans[2 * ri + 1]!
    const input = lens[2 * ri]!
    let repeated = 0
    for (let i = from; i < to; i++) if (!seen.add(ids[i]!)) repeated++
    turns.push(
      sessionlessTurn(k, ts[ri]! - t0, input, lens[2 * ri + 1]!, Math.min(input, repeated * block) / input),
    )
    turnSpans[2 * k] = from
    turnSpans[2 * k + 1] = to
  }
  return sessionlessWorkload({
    name: `mooncake:${file.split('/').pop()}`,
    source: file,
    turns,
    tokenScale: block / pageTokens,
    suggestedPageSize: pageTokens,
    ...(blocks ? { blockTokens: block } : {}),
    promptTokens: (i) => {
      const from = turnSpans[2 * i]!
      const to = turnSpans[2 * i + 1]!
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

/** `a` in a new array of `length` entries (the columns' growth). */
function grow<T extends Float64Array | Int32Array>(a: T, length: number): T {
  const g = new (a.constructor as new (n: number) => T)(length)
  g.set(a)
  return g
}

/**
 * A set of block ids (non-negative integers): a bitmap up to {@link IdSet.BITMAP_LIMIT}, where
 * a trace's ids are dense (Mooncake numbers its blocks from 0), else a `Set`.
 */
class IdSet {
  static readonly BITMAP_LIMIT = 1 << 26
  readonly #bits: Uint8Array | undefined
  readonly #set: Set<number> | undefined

  constructor(maxId: number) {
    if (maxId < IdSet.BITMAP_LIMIT) this.#bits = new Uint8Array((maxId >>> 3) + 1)
    else this.#set = new Set()
  }

  /** Adds `id`; `true` when it was new. */
  add(id: number): boolean {
    const bits = this.#bits
    if (bits !== undefined) {
      const m = 1 << (id & 7)
      const at = id >>> 3
      if ((bits[at]! & m) !== 0) return false
      bits[at]! |= m
      return true
    }
    const set = this.#set!
    if (set.has(id)) return false
    set.add(id)
    return true
  }
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
