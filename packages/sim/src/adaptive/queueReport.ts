import { type QueueReport, prefillSeconds } from '../adapters/router.js'
import type { SimContext } from '../cluster/context.js'

/**
 * A simulated worker's queues as its load endpoint would report them (the adaptive path choice's
 * `QueueReport`): the seconds of prefill work ahead of a new request (the running prefill's rest,
 * then every queued job at the cost model's price for what the worker's cache lacks of its
 * prompt, read without touching the cache) and the requests in its decode batch. Computed on
 * demand: the router asks only for the turns that cannot take the fast path.
 */
export function simQueueReport(ctx: SimContext, workerId: string): QueueReport | undefined {
  const w = ctx.byId.get(workerId)
  if (w === undefined || !w.alive) return undefined
  const cm = ctx.config.cost
  const scale = ctx.config.workload.tokenScale
  let s =
    w.running !== undefined && Number.isFinite(w.prefillEndsMs)
      ? Math.max(0, w.prefillEndsMs - ctx.now) / 1000
      : 0
  let requests = w.running === undefined ? 0 : 1
  const radix = w.cache?.cache
  for (let i = w.qHead; i < w.queue.length; i++) {
    const job = w.queue[i]!
    const turn = ctx.turns[job.turn.id]!
    if (job.seq !== turn.seq || turn.ended || turn.stage !== 'queued') continue
    const input = turn.spec.inputLength
    const matched =
      radix !== undefined && turn.prompt !== undefined
        ? ctx.config.geometry.tokens(radix.matchPrefix(turn.prompt, { readOnly: true }).length)
        : 0
    const cached = Math.min(Math.round(matched * scale), input)
    s += prefillSeconds(cm, Math.max(1, input - cached), cached)
    requests++
  }
  return { prefillQueueS: s, prefillQueueRequests: requests, runningRequests: w.decode.length }
}
