import {
  type CostModel,
  DEFAULT_COST_MODEL,
  DEFAULT_TOPOLOGY_PARAMS,
  type Router,
  type TopologyAdvice,
  type TopologyParams,
  type WorkerTopologySignal,
  adviseTopology,
} from '@kvc/kvc-router'

/**
 * What `GET /topology/advice` answers: the router's elastic topology advice (`adviseTopology` of
 * `@kvc/kvc-router`) over the last window of samples, and the per-worker signals it rests on. The
 * proxy only advises: an operator (or an autoscaler) drains a worker and restarts it in its new
 * role.
 */
export interface TopologyAdviceReport extends TopologyAdvice {
  /** Samples in the window the utilisations are averaged over. */
  readonly samples: number
  readonly workers: readonly WorkerTopologySignal[]
}

/**
 * Samples the router's view of every worker (is it prefilling, how much prefill is queued, how
 * full is a D's KV) at the caller's pace and turns the last `windowSamples` samples into topology
 * advice. No timer of its own: the gateway calls {@link TopologySampler.sample} on its interval,
 * tests call it directly.
 */
export class TopologySampler {
  readonly #router: () => Router | undefined
  readonly #now: () => number
  readonly #window: number
  readonly #params: TopologyParams
  readonly #cost: CostModel
  /** Per worker: a ring of 0/1 busy samples and their sum. */
  readonly #busy = new Map<string, { ring: Uint8Array; sum: number }>()
  #pos = 0
  #samples = 0

  constructor(options: {
    readonly router: () => Router | undefined
    readonly now: () => number
    readonly windowSamples: number
    readonly params?: TopologyParams
    readonly cost?: CostModel
  }) {
    this.#router = options.router
    this.#now = options.now
    this.#window = Math.max(1, Math.floor(options.windowSamples))
    this.#params = options.params ?? DEFAULT_TOPOLOGY_PARAMS
    this.#cost = options.cost ?? DEFAULT_COST_MODEL
  }

  /** Samples in the current window. */
  get samples(): number {
    return Math.min(this.#samples, this.#window)
  }

  /** One sample: each worker counts as busy when the router has prefill work in flight there. */
  sample(): void {
    const r = this.#router()
    if (r === undefined) return
    const c = r.cluster
    const slot = this.#pos
    for (const id of [...c.prefillIds(), ...c.decodeIds()]) {
      let b = this.#busy.get(id)
      if (b === undefined) {
        b = { ring: new Uint8Array(this.#window), sum: 0 }
        this.#busy.set(id, b)
      }
      const v = c.worker(id).load.prefillTokens > 0 ? 1 : 0
      b.sum += v - b.ring[slot]!
      b.ring[slot] = v
    }
    this.#pos = (slot + 1) % this.#window
    this.#samples++
  }

  /** The signals of every registered worker now (utilisation over the window). */
  signals(): WorkerTopologySignal[] {
    const r = this.#router()
    if (r === undefined) return []
    const c = r.cluster
    const n = this.samples
    const out: WorkerTopologySignal[] = []
    for (const id of [...c.prefillIds(), ...c.decodeIds()]) {
      const w = c.worker(id)
      const busy = n === 0 ? 0 : (this.#busy.get(id)?.sum ?? 0) / n
      const q = c.queue(id)
      const queueS =
        q?.prefillQueueS ??
        (w.load.prefillTokens > 0
          ? w.load.prefillTokens / this.#cost.prefillTokensPerS + this.#cost.prefillFixedS
          : 0)
      const cap = w.capacityTokens
      // What its admission counts as used: idle sessions' tokens are free on demand.
      const pressure =
        w.role === 'decode' && cap > 0
          ? Math.min(1, Math.max(0, 1 - (w.availableTokens + w.releasableTokens) / cap))
          : 0
      out.push({
        id,
        role: w.role,
        prefillBusy: Math.min(1, busy),
        prefillQueueS: queueS,
        kvPressure: pressure,
        transferQueueDepth: w.transferQueueDepth,
      })
    }
    return out
  }

  /**
   * The advice now, with its signals; `undefined` before the router exists or while no worker of
   * either role is registered (a colocated cluster has no topology to advise on).
   */
  advice(): TopologyAdviceReport | undefined {
    const workers = this.signals()
    if (!workers.some((w) => w.role === 'decode') || !workers.some((w) => w.role === 'prefill'))
      return undefined
    const a = adviseTopology({ now: this.#now(), workers }, this.#params)
    return { ...a, samples: this.samples, workers }
  }
}
