import { checkOption } from '../errors/simError.js'
import { KvGeometry } from '../granularity/kvGeometry.js'
import { PairKeySet } from '../hashing/pairKeySet.js'
import type { Workload } from './types.js'

/**
 * Mean, median, 99th percentile and maximum of a sample.
 *
 * @example
 * ```ts
 * import type { Summary } from '@kvc/sim'
 * const s: Summary = { mean: 2, p50: 2, p99: 3, max: 3 }
 * ```
 */
export interface Summary {
  readonly mean: number
  readonly p50: number
  readonly p99: number
  readonly max: number
}

/**
 * What `kvc-sim trace stats` prints: sizes, rates, length distributions, and the ideal prefix
 * hit ratio of an unlimited cache, computed from the workload alone (no cache involved), at page
 * granularity: a page counts as a hit when the same prefix page (same tokens, same prefix) was in
 * an earlier prompt. On a Mooncake trace with 512-token pages this is exactly "blocks that repeat
 * an earlier block" of `docs/design/traces.md#mooncake-statistics` (36.64% conversation, 63.96%
 * synthetic).
 *
 * @example
 * ```ts
 * import { computeTraceStats, generateAgenticWorkload } from '@kvc/sim'
 * const s = computeTraceStats(generateAgenticWorkload({ seed: 1, sessions: 4 }), 16)
 * s.sessions // 4
 * ```
 */
export interface TraceStats {
  readonly name: string
  readonly source: string
  readonly requests: number
  readonly sessions: number
  readonly turnsPerSession: Summary | undefined
  /** Arrival span, seconds (open-loop traces; closed-loop: the span of session starts). */
  readonly spanS: number
  /** Requests per second over the span (0 for a zero span). */
  readonly ratePerS: number
  readonly inputTokens: Summary
  readonly outputTokens: Summary
  /** Think times between turns, seconds (closed-loop workloads). */
  readonly thinkS: Summary | undefined
  readonly pageSize: number
  /** Full pages over all prompts. */
  readonly totalPages: number
  readonly distinctPages: number
  /** Pages whose prefix page was in an earlier prompt ÷ all pages. */
  readonly idealHitRatioPages: number
  /** Σ min(input, hit pages × page) ÷ Σ input tokens. */
  readonly idealHitRatioTokens: number
}

/**
 * Mean, p50, p99 and max of `xs` (nearest-rank percentiles).
 *
 * @example
 * ```ts
 * import { summarize } from '@kvc/sim'
 * summarize([1, 2, 3]).p50 // 2
 * ```
 */
export function summarize(xs: readonly number[]): Summary {
  if (xs.length === 0) return { mean: 0, p50: 0, p99: 0, max: 0 }
  const s = Float64Array.from(xs).sort()
  const q = (p: number) => s[Math.min(s.length - 1, Math.max(0, Math.ceil(p * s.length) - 1))]!
  let sum = 0
  for (const x of s) sum += x
  return { mean: sum / s.length, p50: q(0.5), p99: q(0.99), max: s[s.length - 1]! }
}

/** The chained page keys of the longest prompt walked so far over one token buffer. */
interface WalkedPrompt {
  readonly byteOffset: number
  pages: number
  h1: Int32Array
  h2: Int32Array
}

/**
 * Statistics of a workload (see {@link TraceStats}); `pageSize` defaults to the workload's
 * suggested page size, else 16.
 *
 * @example
 * ```ts
 * import { computeTraceStats, parseMooncakeTrace } from '@kvc/sim'
 * const w = parseMooncakeTrace(
 *   '{"timestamp":0,"input_length":1024,"output_length":1,"hash_ids":[0,1]}\n{"timestamp":1,"input_length":1024,"output_length":1,"hash_ids":[0,2]}\n',
 *   'x.jsonl',
 * )
 * computeTraceStats(w).idealHitRatioPages // 0.25: block 0 of the second request
 * ```
 */
export function computeTraceStats(w: Workload, pageSize?: number): TraceStats {
  const ps = pageSize ?? w.suggestedPageSize ?? 16
  checkOption(Number.isInteger(ps) && ps >= 1, `pageSize must be a positive integer, got ${ps}`, ps)
  // Entries of a page: its tokens, or its units for a block-granular workload (KvGeometry).
  const pe = new KvGeometry(ps, w.blockTokens ?? 1).pageUnits
  // Chained page keys: two independent 32-bit lanes, the second cut to 21 bits (a 53-bit key).
  // Sized for about every page being distinct (a hint: the set grows past it), so that it does
  // not grow while a long trace's pages arrive.
  let pagesHint = 0
  for (const t of w.turns) pagesHint += t.inputLength
  pagesHint = Math.min(1 << 19, Math.ceil(pagesHint / (ps * w.tokenScale)) + w.turns.length)
  const seen = new PairKeySet(Math.max(1 << 10, pagesHint))
  let total = 0
  let hits = 0
  let hitTokens = 0
  let inputTokens = 0
  // A prompt that is a view of the same buffer at the same offset as an earlier one (a session's
  // prompts over its token stream) shares its first pages' chained keys: those are taken from the
  // earlier walk, and each is a hit (every page walked is in `seen` afterwards, hit or added).
  // Only views into a larger buffer are remembered: a prompt that fills its own buffer (a trace's
  // request) is rarely seen again, and walking it again would give the same keys anyway.
  const walked = new WeakMap<ArrayBufferLike, WalkedPrompt>()
  for (let i = 0; i < w.turns.length; i++) {
    const t = w.turns[i]!
    const tok = w.promptTokens(i)
    const pages = Math.floor(tok.length / pe)
    let h1 = 0x811c9dc5
    let h2 = 0x01000193
    let hitPages = 0
    let prefix = true
    let from = 0
    let memo = walked.get(tok.buffer)
    if (memo !== undefined && memo.byteOffset === tok.byteOffset) {
      from = Math.min(memo.pages, pages)
      if (from > 0) {
        h1 = memo.h1[from - 1]!
        h2 = memo.h2[from - 1]!
        hitPages = from
      }
    } else if (tok.byteLength < tok.buffer.byteLength) {
      memo = { byteOffset: tok.byteOffset, pages: 0, h1: new Int32Array(pages), h2: new Int32Array(pages) }
      walked.set(tok.buffer, memo)
    } else memo = undefined
    if (memo !== undefined && memo.h1.length < pages) {
      const g1 = new Int32Array(Math.max(pages, memo.h1.length * 2))
      const g2 = new Int32Array(g1.length)
      g1.set(memo.h1.subarray(0, memo.pages))
      g2.set(memo.h2.subarray(0, memo.pages))
      memo.h1 = g1
      memo.h2 = g2
    }
    for (let p = from; p < pages; p++) {
      for (let j = p * pe, e = j + pe; j < e; j++) {
        const x = tok[j]!
        h1 = Math.imul(h1 ^ x, 0x01000193)
        h2 = Math.imul(h2 ^ x, 0x5bd1e995) ^ (h2 >>> 15)
      }
      if (memo !== undefined) {
        memo.h1[p] = h1
        memo.h2[p] = h2
      }
      const lo = h2 & 0x1fffff
      if (prefix && seen.has(h1, lo)) hitPages++
      else {
        prefix = false
        seen.add(h1, lo)
      }
    }
    if (memo !== undefined && pages > memo.pages) memo.pages = pages
    total += pages
    hits += hitPages
    hitTokens += Math.min(t.inputLength, hitPages * ps * w.tokenScale)
    inputTokens += t.inputLength
  }
  const perSession = new Map<number, number>()
  for (const t of w.turns) if (t.session >= 0) perSession.set(t.session, (perSession.get(t.session) ?? 0) + 1)
  const arrivals = w.turns
    .filter((t) => w.arrivalMode === 'open' || t.turnIndex === 0)
    .map((t) => t.arrivalMs)
  const spanS = arrivals.length === 0 ? 0 : (Math.max(...arrivals) - Math.min(...arrivals)) / 1000
  const think = w.turns.filter((t) => t.turnIndex > 0 && t.thinkMs > 0).map((t) => t.thinkMs / 1000)
  return {
    name: w.name,
    source: w.source,
    requests: w.turns.length,
    sessions: w.sessions,
    turnsPerSession: perSession.size === 0 ? undefined : summarize([...perSession.values()]),
    spanS,
    ratePerS: spanS > 0 ? w.turns.length / spanS : 0,
    inputTokens: summarize(w.turns.map((t) => t.inputLength)),
    outputTokens: summarize(w.turns.map((t) => t.outputLength)),
    thinkS: think.length === 0 ? undefined : summarize(think),
    pageSize: ps,
    totalPages: total,
    distinctPages: seen.size,
    idealHitRatioPages: total === 0 ? 0 : hits / total,
    idealHitRatioTokens: inputTokens === 0 ? 0 : hitTokens / inputTokens,
  }
}
