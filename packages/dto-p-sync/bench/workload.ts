/**
 * A multi-session agentic workload with periodic evictions on D, replayed with D→P sync off and
 * on. Shared by the benchmark (bench/sync.bench.ts) and a smaller test (test/workload.test.ts).
 *
 * Model (one D worker, one P worker, virtual time):
 * - sessions share a system prompt; every turn appends tokens, decodes an output and commits;
 *   inter-turn gaps follow the research prototype's SWE-bench quantiles (p10/p50/p90/p99 =
 *   1.6/2.5/7.8/25.1 s; docs/design/prototype.md#time-scale);
 * - D holds committed KV in a real RadixCache of bounded capacity (page eviction, LRU) and
 *   evicts down to a target fraction every `evictPeriodMs` (idle sessions shed pages);
 * - a turn takes the fast path when D still holds its whole committed prefix, else it reseeds:
 *   P prefills the prompt minus what its own RadixCache holds (that is the cost we count), then
 *   the prompt's KV goes to D;
 * - with sync on, a SyncSource on D plans a round every `roundMs` over an in-memory link with the
 *   sync bandwidth budget; a SyncSink ingests into P's cache (no pins: synced pages are plain
 *   LRU-evictable cached pages, D trusts P's in-process KV events).
 *
 * At every reseed of a session the sync reported within budget, Theorem 4 is checked:
 * re-prefill ≤ β + append.
 */
import { PagedAllocator, RadixCache, sglangBlockHasher } from '@kvc/radix-cache'
import {
  InMemoryNetwork,
  KvEventIndex,
  type SyncReply,
  SyncSink,
  SyncSource,
  type TransferMessage,
  wireSync,
} from '../src/index.js'
import { seededRandom } from '../src/testing/index.js'

export interface WorkloadOptions {
  readonly sessions: number
  readonly turns: readonly [number, number]
  readonly pageSize: number
  readonly systemTokens: number
  readonly firstPromptTokens: readonly [number, number]
  readonly appendTokens: readonly [number, number]
  readonly outputTokens: readonly [number, number]
  /** Sessions start uniformly within this window (ms). */
  readonly startWindowMs: number
  readonly decodeCapacityTokens: number
  readonly prefillCapacityTokens: number
  readonly evictPeriodMs: number
  /** Periodic eviction brings D down to this fraction of its capacity. */
  readonly evictTarget: number
  readonly seed: number
}

export interface SyncConfig {
  readonly enabled: boolean
  readonly beta: number
  readonly bytesPerSecond: number
  readonly kvBytesPerToken: number
  readonly roundMs: number
  readonly latencyMs: number
  /** Room on P the source plans for (`SyncSourceOptions.maxHeldTokens`; default unlimited). */
  readonly maxHeldTokens?: number
}

export interface WorkloadResult {
  readonly turns: number
  readonly reseeds: number
  /** Tokens P prefilled on reseeds (cold first turns excluded). */
  readonly reseedPrefillTokens: number
  /** The appends of those reseeds (the part no sync can save). */
  readonly reseedAppendTokens: number
  /** History tokens of the reseeded sessions (what a P with no cache would re-prefill). */
  readonly reseedHistoryTokens: number
  readonly reseedsWithinBudget: number
  readonly theoremViolations: number
  readonly bytesSynced: number
  readonly kvTokensSynced: number
  readonly dedupBlocks: number
  readonly skippedOnP: number
  readonly budgetViolations: number
  readonly decodeEvictedTokens: number
  /** Session-rounds reported over β, by reason. */
  readonly overBudget: {
    readonly bandwidth: number
    readonly unavailable: number
    readonly unreachable: number
    readonly capacity: number
  }
}

export const AGENTIC: WorkloadOptions = {
  sessions: 32,
  turns: [20, 40],
  pageSize: 64,
  systemTokens: 4096,
  firstPromptTokens: [2000, 6000],
  appendTokens: [200, 3000],
  outputTokens: [100, 800],
  startWindowMs: 60_000,
  decodeCapacityTokens: 1_000_000,
  prefillCapacityTokens: 2_097_152,
  evictPeriodMs: 5_000,
  evictTarget: 0.8,
  seed: 7,
}

const GAP_Q: readonly [number, number][] = [
  [0, 1000],
  [0.1, 1600],
  [0.5, 2500],
  [0.9, 7800],
  [0.99, 25_100],
  [1, 40_000],
]

function gapMs(u: number): number {
  for (let i = 1; i < GAP_Q.length; i++) {
    const [q1, v1] = GAP_Q[i]!
    const [q0, v0] = GAP_Q[i - 1]!
    if (u <= q1) return Math.exp(Math.log(v0) + ((u - q0) / (q1 - q0)) * (Math.log(v1) - Math.log(v0)))
  }
  return GAP_Q[GAP_Q.length - 1]![1]
}

interface Turn {
  readonly append: Uint32Array
  readonly output: Uint32Array
  readonly gapMs: number
}

interface Session {
  readonly id: string
  readonly start: number
  readonly turns: Turn[]
}

export function generate(o: WorkloadOptions): { system: Uint32Array; sessions: Session[] } {
  const rnd = seededRandom(o.seed)
  const between = (r: readonly [number, number]) => r[0] + Math.floor(rnd() * (r[1] - r[0] + 1))
  const fresh = (n: number) => Uint32Array.from({ length: n }, () => 1 + Math.floor(rnd() * 150_000))
  const system = fresh(o.systemTokens)
  const sessions: Session[] = []
  for (let s = 0; s < o.sessions; s++) {
    const n = between(o.turns)
    const turns: Turn[] = []
    for (let t = 0; t < n; t++) {
      turns.push({
        append: fresh(t === 0 ? between(o.firstPromptTokens) : between(o.appendTokens)),
        output: fresh(between(o.outputTokens)),
        gapMs: gapMs(rnd()),
      })
    }
    sessions.push({ id: `s${s}`, start: rnd() * o.startWindowMs, turns })
  }
  return { system, sessions }
}

export function runWorkload(o: WorkloadOptions, sync: SyncConfig): WorkloadResult {
  const { system, sessions } = generate(o)
  const ps = o.pageSize
  const hasher = sglangBlockHasher()
  const net = new InMemoryNetwork()
  const now = () => net.now()

  // D: committed KV, bounded; its events tell the sync which pages D still has.
  const decodeView = new KvEventIndex()
  const decode = new RadixCache({
    pageSize: ps,
    trackValues: false,
    evictGranularity: 'page',
    blockHasher: hasher,
    now,
    ...(sync.enabled ? { onEvent: (e) => decodeView.apply(e) } : {}),
  })
  // P: a real cache over a KV pool.
  const pool = new PagedAllocator({ size: Math.ceil(o.prefillCapacityTokens / ps) * ps, pageSize: ps })
  let sink: SyncSink | undefined
  let source: SyncSource | undefined
  const prefill = new RadixCache({
    pageSize: ps,
    allocator: pool,
    blockHasher: hasher,
    now,
    ...(sync.enabled
      ? {
          onEvent: (e) => {
            sink!.observe(e)
            source!.observePrefillEvent(e)
          },
        }
      : {}),
  })
  let wiring: ReturnType<typeof wireSync> | undefined
  if (sync.enabled) {
    sink = new SyncSink({ cache: prefill, allocator: pool, blockHasher: hasher, now })
    source = new SyncSource({
      pageSize: ps,
      beta: sync.beta,
      now,
      blockHasher: hasher,
      bandwidth: { bytesPerSecond: sync.bytesPerSecond, kvBytesPerToken: sync.kvBytesPerToken },
      decodeHolds: decodeView,
      ...(sync.maxHeldTokens === undefined ? {} : { maxHeldTokens: sync.maxHeldTokens }),
    })
    const forward = net.link<TransferMessage>({
      bytesPerSecond: sync.bytesPerSecond,
      latencyMs: sync.latencyMs,
      units: (m) => m.blocks.length,
    })
    const backward = net.link<SyncReply>({ bytesPerSecond: 1e9, latencyMs: sync.latencyMs })
    wiring = wireSync({ source, sink, forward, backward })
  }

  // P prefills `prompt` (its cache serves what it holds); returns the tokens computed.
  const prefillOnP = (prompt: Uint32Array): number => {
    const hit = prefill.matchPrefix(prompt)
    const computed = prompt.length - hit.length
    const aligned = prompt.length - (prompt.length % ps)
    const fresh = aligned - hit.length
    if (fresh > 0) {
      prefill.incLockRef(hit.lastNode)
      if (pool.availableSize() < fresh) prefill.evict(fresh - pool.availableSize())
      if (pool.availableSize() >= fresh) {
        const values = new Int32Array(aligned)
        values.set(hit.indices)
        const slots = pool.alloc(fresh)
        values.set(slots, hit.length)
        const res = prefill.insert(prompt.subarray(0, aligned), values)
        if (res.prefixLen > hit.length) pool.free(slots.subarray(0, res.prefixLen - hit.length))
      }
      prefill.decLockRef(hit.lastNode)
    }
    return computed
  }
  const decodeInsert = (tokens: Uint32Array): void => {
    decode.insert(tokens)
    if (decode.totalSize() > o.decodeCapacityTokens) decode.evict(decode.totalSize() - o.decodeCapacityTokens)
  }

  // Event queue of turn arrivals (a tiny sorted array is enough at this scale).
  const queue: { t: number; s: number; k: number }[] = sessions.map((s, i) => ({ t: s.start, s: i, k: 0 }))
  const histories: Uint32Array[] = sessions.map(() => new Uint32Array(0))
  let nextRound = 0
  let nextEvict = o.evictPeriodMs
  let decodeEvicted = 0
  const reasons = { bandwidth: 0, unavailable: 0, unreachable: 0, capacity: 0 }
  const r = {
    turns: 0,
    reseeds: 0,
    reseedPrefillTokens: 0,
    reseedAppendTokens: 0,
    reseedHistoryTokens: 0,
    reseedsWithinBudget: 0,
    theoremViolations: 0,
  }
  const advance = (t: number): void => {
    for (;;) {
      const step = Math.min(nextRound, nextEvict)
      if (step > t) break
      net.advanceTo(Math.max(net.now(), step))
      if (step === nextEvict) {
        const target = o.evictTarget * o.decodeCapacityTokens
        if (decode.totalSize() > target)
          decodeEvicted += decode.evict(decode.totalSize() - target).evictedTokens
        nextEvict += o.evictPeriodMs
      } else {
        if (wiring !== undefined) {
          wiring.expire()
          source!.setDecodePressure(Math.min(1, decode.totalSize() / o.decodeCapacityTokens))
          const plan = wiring.round(sync.roundMs)
          for (const sp of plan.sessions) if (sp.reason !== null) reasons[sp.reason]++
        }
        nextRound += sync.roundMs
      }
    }
    net.advanceTo(Math.max(net.now(), t))
  }

  while (queue.length > 0) {
    let best = 0
    for (let i = 1; i < queue.length; i++) if (queue[i]!.t < queue[best]!.t) best = i
    const ev = queue.splice(best, 1)[0]!
    advance(ev.t)
    const sess = sessions[ev.s]!
    const turn = sess.turns[ev.k]!
    const history = histories[ev.s]!
    const head = ev.k === 0 ? concat(system, turn.append) : concat(history, turn.append)
    r.turns++
    if (ev.k === 0) {
      const computed = prefillOnP(head)
      void computed
      decodeInsert(head.subarray(0, head.length - (head.length % ps)))
    } else {
      const committed = history.length - 1
      const need = committed - (committed % ps)
      const fast = decode.matchPrefix(history, { readOnly: true }).length >= need
      if (!fast) {
        const within = source?.status(sess.id).withinBudget ?? false
        const computed = prefillOnP(head)
        r.reseeds++
        r.reseedPrefillTokens += computed
        r.reseedAppendTokens += turn.append.length
        r.reseedHistoryTokens += history.length
        if (within) {
          r.reseedsWithinBudget++
          if (computed > sync.beta + turn.append.length) r.theoremViolations++
        }
        decodeInsert(head.subarray(0, head.length - (head.length % ps)))
      }
    }
    // Decode the output, then commit: D holds KV of everything but the newest sampled token.
    const full = concat(head, turn.output)
    histories[ev.s] = full
    const kv = full.length - 1
    decodeInsert(full.subarray(0, kv - (kv % ps)))
    source?.commitTurn(sess.id, full)
    if (ev.k + 1 < sess.turns.length) queue.push({ t: ev.t + turn.gapMs, s: ev.s, k: ev.k + 1 })
  }
  const m = source?.metrics()
  return {
    ...r,
    bytesSynced: m?.bytesSent ?? 0,
    kvTokensSynced: (m?.kvBlocksSent ?? 0) * ps,
    dedupBlocks: m?.dedupBlocks ?? 0,
    skippedOnP: sink?.metrics().skippedBlocks ?? 0,
    budgetViolations: m?.budgetViolations ?? 0,
    decodeEvictedTokens: decodeEvicted,
    overBudget: reasons,
  }
}

function concat(a: Uint32Array, b: Uint32Array): Uint32Array {
  const out = new Uint32Array(a.length + b.length)
  out.set(a)
  out.set(b, a.length)
  return out
}
