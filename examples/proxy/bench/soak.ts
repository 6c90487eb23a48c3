/**
 * Soak benchmark: 20,000 turns through the proxy in front of emulated workers, with faults
 * injected throughout, reporting RSS and heap after every 1,000 turns (after a full GC) and the
 * growth per 1,000 turns after a warm-up (a least-squares slope), and the turns' latency
 * percentiles. Bounded: the session table is capped (`session.maxSessions`), so sessions come and
 * go as in production. The emulated workers run in the same process, so the figures include their
 * state, bounded by their KV capacity and their KV-event replay buffers (1,000 batches each here).
 *
 * Then an overload phase: `burst` requests sent at once (one-shot sessions, no client-side limit)
 * while `/health` is polled every 50 ms; it reports the burst's outcomes, its latency percentiles,
 * `/health`'s latency during the burst, and whether any worker was marked unhealthy, an admission
 * timed out or a session migrated (load alone must do none of these).
 *
 *   pnpm --filter @kvc/example-proxy soak [turns] [concurrency] [burst] [--json]
 *
 * Defaults: 20,000 turns, 32 concurrent, a burst of 500. Prints one line per 1,000 turns and a
 * JSON summary (`--json` for the summary only). Latencies are wall-clock and depend on the
 * machine: compare runs on the same machine.
 */
import { ADMIT_HTTP_PATH, DEFAULT_PAUSE_HINT } from '@kvc/kvc-router'
import { createSglangEmulator } from '@kvc/sglang-emulator'
import { resolveConfig } from '../src/config.js'
import { createProxy } from '../src/server.js'

const args = process.argv.slice(2).filter((a) => !a.startsWith('--'))
const TURNS = Number(args[0] ?? 20_000)
const CONCURRENCY = Number(args[1] ?? 32)
const BURST = Number(args[2] ?? 500)
const WINDOW = 1_000
const WARMUP = Math.min(5_000, Math.floor(TURNS / 4))
const jsonOnly = process.argv.includes('--json')
const gc = (globalThis as { gc?: () => void }).gc
if (gc === undefined) throw new Error('run with node --expose-gc')

const timing = { scale: 0.0005 }
const prefill = await createSglangEmulator({
  role: 'prefill',
  capacityTokens: 131_072,
  pageSize: 16,
  timing,
  kvEvents: false,
})
const decode = await Promise.all(
  [0, 1].map(() =>
    createSglangEmulator({
      role: 'decode',
      capacityTokens: 65_536,
      pageSize: 16,
      timing,
      transferTimeoutMs: 5_000,
      // The workers' KV-event replay buffers (10,000 batches each by default, as SGLang's) fill
      // during the warm-up instead of growing through the whole run: what grows after it is the proxy.
      kvEvents: { bufferSteps: 1_000 },
      admission: { pause: { ...DEFAULT_PAUSE_HINT, minPauseMs: 5, maxPauseMs: 20, retractedPauseMs: 10 } },
    }),
  ),
)
const proxy = await createProxy(
  resolveConfig({
    listen: { port: 0 },
    workers: [
      { id: 'p0', role: 'prefill', url: prefill.url },
      ...decode.map((d, i) => ({ id: `d${i}`, role: 'decode' as const, url: d.url })),
    ],
    tokenizer: 'emulator',
    decisionLog: 'off',
    health: { intervalMs: 200, timeoutMs: 500, failureThreshold: 3 },
    loads: { intervalMs: 200 },
    router: { backoffBaseMs: 5, backoffCapMs: 50 },
    session: { maxSessions: 400, idleTimeoutMs: 60_000 },
  }),
  { onWarning: () => {} },
)

/** Faults, one kind per 250 turns in turn. */
function inject(turn: number): void {
  switch ((turn / 250) % 6) {
    case 0:
      decode[0]!.faults.inject({ path: '/v1/chat/completions', status: 500, times: 2 })
      break
    case 1:
      decode[1]!.faults.inject({ path: ADMIT_HTTP_PATH, delayMs: 300, times: 2 })
      break
    case 2:
      prefill.faults.inject({ path: '/v1/chat/completions', status: 503, times: 2 })
      break
    case 3:
      prefill.faults.partialTransfers(2, 0.5)
      break
    case 4:
      decode[0]!.faults.dropKvEvents(3)
      break
    case 5:
      decode[1]!.faults.inject({ path: '/v1/chat/completions', delayMs: 200, times: 3 })
      break
  }
}

interface Sample {
  readonly turns: number
  readonly rssMb: number
  readonly heapMb: number
  readonly externalMb: number
}
const samples: Sample[] = []
const outcomes = new Map<string, number>()
let started = 0
let done = 0
/** Client-observed latency of every soak turn, ms. */
const latencies = new Float64Array(TURNS)
const histories = new Map<number, { role: string; content: string }[]>()

async function oneTurn(n: number): Promise<void> {
  // Conversations of 5 turns: session c lives for turns 5c..5c+4 (4,000 sessions in 20,000 turns).
  const c = Math.floor(n / 5)
  let h = histories.get(c)
  if (h === undefined) {
    h = [
      {
        role: 'system',
        content: `Agent ${c % 50}. ${'Context of the repository. '.repeat(20 + (c % 7) * 30)}`,
      },
    ]
    histories.set(c, h)
  }
  h.push({ role: 'user', content: `step ${n % 5}: ${'tool output line '.repeat(5 + (n % 13))}` })
  let key: string
  const t = performance.now()
  try {
    const res = await fetch(`${proxy.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-session-id': `soak-${c}` },
      body: JSON.stringify({ model: 'm', messages: h, max_tokens: 8, stream: n % 4 === 0 }),
    })
    const text = await res.text()
    key = String(res.status)
    if (res.status === 200) {
      let content = ''
      if (n % 4 === 0) {
        for (const block of text.split('\n\n')) {
          const line = block.trim()
          if (!line.startsWith('data: ') || line === 'data: [DONE]') continue
          const ev = JSON.parse(line.slice(6)) as {
            choices?: { delta?: { content?: string } }[]
            error?: unknown
          }
          if (ev.error !== undefined) key = 'stream_error'
          content += ev.choices?.[0]?.delta?.content ?? ''
        }
      } else
        content = (JSON.parse(text) as { choices: { message: { content: string } }[] }).choices[0]!.message
          .content
      h.push({ role: 'assistant', content })
    } else {
      h.pop()
      key = `${res.status}:${(JSON.parse(text) as { error?: { kvc?: { cause?: string } } }).error?.kvc?.cause ?? ''}`
    }
  } catch (err) {
    key = `client:${(err as Error).message}`
  }
  latencies[n] = performance.now() - t
  if (n % 5 === 4) histories.delete(c)
  outcomes.set(key, (outcomes.get(key) ?? 0) + 1)
}

function sample(): void {
  gc!()
  gc!()
  const m = process.memoryUsage()
  samples.push({
    turns: done,
    rssMb: m.rss / 2 ** 20,
    heapMb: m.heapUsed / 2 ** 20,
    externalMb: m.external / 2 ** 20,
  })
  if (!jsonOnly) {
    const r = proxy.gateway.router
    const mb = (x: number) => (x / 2 ** 20).toFixed(1).padStart(7)
    console.log(
      `${String(done).padStart(6)} turns  rss ${mb(m.rss)} MB  heap ${mb(m.heapUsed)} MB  external ${mb(m.external)} MB  sessions ${proxy.sessions.size} (evicted ${proxy.sessions.evictions})  bindings ${r.cluster.store.bindingCount()}  index blocks ${r.cluster.residency.blockCount}  D sessions ${decode.map((d) => d.sessionCache.listSessionStatuses().length).join('/')}`,
    )
  }
}

/** Least-squares slope of `y` over `x`, per 1,000 turns. */
function slopePer1k(points: readonly Sample[], f: (s: Sample) => number): number {
  const n = points.length
  const mx = points.reduce((a, s) => a + s.turns, 0) / n
  const my = points.reduce((a, s) => a + f(s), 0) / n
  let num = 0
  let den = 0
  for (const s of points) {
    num += (s.turns - mx) * (f(s) - my)
    den += (s.turns - mx) ** 2
  }
  return den === 0 ? 0 : (num / den) * 1_000
}

/** The `q` quantile (nearest rank) of `xs`, rounded to 0.1 ms. */
function quantile(xs: Float64Array, q: number): number {
  if (xs.length === 0) return Number.NaN
  const sorted = Float64Array.from(xs).sort()
  return Number(sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)]!.toFixed(1))
}

const percentiles = (xs: Float64Array) => ({
  p50: quantile(xs, 0.5),
  p99: quantile(xs, 0.99),
  max: quantile(xs, 1),
})

function metricSum(text: string, re: RegExp): number {
  return [...text.matchAll(re)].reduce((a, x) => a + Number(x[1]), 0)
}

async function proxyCounters(): Promise<{ admissionTimeouts: number; migrations: number }> {
  const text = await (await fetch(`${proxy.url}/metrics`)).text()
  return {
    admissionTimeouts: metricSum(text, /^kvc_proxy_admissions_total\{[^}]*result="timeout"\} (\d+)$/gm),
    migrations: metricSum(text, /^kvc_proxy_migrations_total (\d+)$/gm),
  }
}

/**
 * `BURST` one-shot requests at once, `/health` polled every 50 ms meanwhile, worker health
 * watched every 5 ms.
 */
async function overload() {
  const before = await proxyCounters()
  const health = proxy.gateway.workers.health
  const markedUnhealthy = new Set<string>()
  const watch = setInterval(() => {
    for (const w of proxy.gateway.workers.all()) if (!health.isHealthy(w.url)) markedUnhealthy.add(w.id)
  }, 5)
  const healthMs: number[] = []
  let bursting = true
  const prober = (async () => {
    while (bursting) {
      const t = performance.now()
      await (await fetch(`${proxy.url}/health`)).text()
      healthMs.push(performance.now() - t)
      await new Promise((r) => setTimeout(r, 50))
    }
  })()
  const burstMs = new Float64Array(BURST)
  const burstOutcomes = new Map<string, number>()
  const t0 = performance.now()
  await Promise.all(
    Array.from({ length: BURST }, async (_, i) => {
      const t = performance.now()
      let key: string
      try {
        const res = await fetch(`${proxy.url}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'x-session-id': `burst-${i}` },
          body: JSON.stringify({
            model: 'm',
            messages: [
              {
                role: 'system',
                content: `Agent ${i % 50}. ${'Context of the task. '.repeat(20 + (i % 5) * 20)}`,
              },
              { role: 'user', content: `request ${i}` },
            ],
            max_tokens: 8,
          }),
        })
        const text = await res.text()
        key =
          res.status === 200
            ? '200'
            : `${res.status}:${(JSON.parse(text) as { error?: { kvc?: { cause?: string } } }).error?.kvc?.cause ?? ''}`
      } catch (err) {
        key = `client:${(err as Error).message}`
      }
      burstMs[i] = performance.now() - t
      burstOutcomes.set(key, (burstOutcomes.get(key) ?? 0) + 1)
    }),
  )
  const seconds = (performance.now() - t0) / 1000
  bursting = false
  await prober
  clearInterval(watch)
  const after = await proxyCounters()
  return {
    requests: BURST,
    seconds: Number(seconds.toFixed(1)),
    outcomes: Object.fromEntries([...burstOutcomes].sort()),
    latencyMs: percentiles(burstMs),
    healthLatencyMs: { probes: healthMs.length, ...percentiles(Float64Array.from(healthMs)) },
    workersMarkedUnhealthy: [...markedUnhealthy].sort(),
    admissionTimeouts: after.admissionTimeouts - before.admissionTimeouts,
    migrations: after.migrations - before.migrations,
  }
}

const t0 = performance.now()
sample()
let nextSample = WINDOW
await new Promise<void>((resolve) => {
  let running = 0
  const pump = (): void => {
    while (running < CONCURRENCY && started < TURNS) {
      const n = started++
      if (n % 250 === 0) inject(n)
      running++
      void oneTurn(n).then(() => {
        running--
        done++
        if (done >= nextSample) {
          nextSample += WINDOW
          sample()
        }
        if (done === TURNS) resolve()
        else pump()
      })
    }
  }
  pump()
})
const seconds = (performance.now() - t0) / 1000
const soakCounters = await proxyCounters()
const after = samples.filter((s) => s.turns >= WARMUP)
const summary = {
  turns: TURNS,
  concurrency: CONCURRENCY,
  seconds: Number(seconds.toFixed(1)),
  outcomes: Object.fromEntries([...outcomes].sort()),
  latencyMs: percentiles(latencies),
  admissionTimeouts: soakCounters.admissionTimeouts,
  migrations: soakCounters.migrations,
  warmupTurns: WARMUP,
  rssMbAtStart: Number(samples[0]!.rssMb.toFixed(1)),
  heapMbAtStart: Number(samples[0]!.heapMb.toFixed(1)),
  rssMbAtWarmup: Number(after[0]!.rssMb.toFixed(1)),
  rssMbAtEnd: Number(samples.at(-1)!.rssMb.toFixed(1)),
  heapMbAtWarmup: Number(after[0]!.heapMb.toFixed(1)),
  heapMbAtEnd: Number(samples.at(-1)!.heapMb.toFixed(1)),
  rssGrowthMbPer1kTurns: Number(slopePer1k(after, (s) => s.rssMb).toFixed(3)),
  heapGrowthMbPer1kTurns: Number(slopePer1k(after, (s) => s.heapMb).toFixed(3)),
  externalGrowthMbPer1kTurns: Number(slopePer1k(after, (s) => s.externalMb).toFixed(3)),
  sessionsTracked: proxy.sessions.size,
  sessionsEvicted: proxy.sessions.evictions,
  decodePoolsBalanced: decode.every((d) => d.stats().balanced),
  overload: BURST > 0 ? await overload() : null,
  rssMbAfterOverload: 0,
  heapMbAfterOverload: 0,
}
gc()
gc()
summary.rssMbAfterOverload = Number((process.memoryUsage().rss / 2 ** 20).toFixed(1))
summary.heapMbAfterOverload = Number((process.memoryUsage().heapUsed / 2 ** 20).toFixed(1))
console.log(JSON.stringify(summary, null, 2))
await proxy.close()
await Promise.all([prefill, ...decode].map((e) => e.close()))
