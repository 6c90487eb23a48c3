import type { SyncFabric } from '../adapters/dtoPSync.js'
import { type DispatchOutcome, Router } from '../adapters/router.js'
import type { RunConfig } from '../config/runConfig.js'
import { EventQueue } from '../engine/eventQueue.js'
import { Prng } from '../engine/prng.js'
import { simQueueReport } from '../adaptive/queueReport.js'
import { simBlockHasher } from '../hashing/simBlockHasher.js'
import { type Turn, newTurn } from './turn.js'
import type { SimWorker } from './worker.js'

/** The run's machinery counters, as they count (see `RunCounters`). */
export interface SimCounters {
  admissions: number
  admissionRejects: number
  admissionTimeouts: number
  transfers: number
  transferTimeouts: number
  transferErrors: number
  kvEvents: number
  kvEventsLost: number
  workerDeaths: number
  routerPauses: number
  memoryWaitFailures: number
  sessionsReaped: number
  admissionReleases: number
  /** Hot sessions a D retracted under memory pressure (`retract=on`). */
  retractions: number
  seedWakes: number
  /** Prefills that loaded part of their prompt back from the host tier, and the tokens loaded. */
  loadBacks: number
  loadedBackTokens: number
  /** Seeds whose P read part of the prompt from the session's old D (peer fetch), and the tokens read. */
  peerFetches: number
  peerFetchedTokens: number
  preallocTimeouts: number
  retries: number
}

/** Why a physical step of a turn failed (what its dispatch is told). */
export type PhysicalFailure = 'transfer_timeout' | 'transfer_error' | 'worker_error' | 'worker_unreachable'

/** What the servers ask of the simulation that drives them. */
export interface SimHost {
  /** Memory was freed (or made evictable) on `w`: retry what waits for it. */
  kick(w: SimWorker): void
  /** A physical step failed: release what the turn holds, tell the dispatch. */
  failPhysical(turn: Turn, cause: PhysicalFailure, detail: string): void
  /** Hand the turn's dispatch an outcome now. */
  step(turn: Turn, outcome: DispatchOutcome | undefined): void
}

/**
 * The state every part of one run shares: the configuration, the simulated clock and event
 * queue, the router, the workers, the turns and the counters.
 */
export class SimContext {
  readonly config: RunConfig
  readonly q = new EventQueue(4096)
  readonly router: Router
  /** Simulated time, ms. */
  now = 0
  /** Turns ended (completed or failed). */
  ended = 0
  routerPausedUntil = 0
  readonly counters: SimCounters = {
    admissions: 0,
    admissionRejects: 0,
    admissionTimeouts: 0,
    transfers: 0,
    transferTimeouts: 0,
    transferErrors: 0,
    kvEvents: 0,
    kvEventsLost: 0,
    workerDeaths: 0,
    routerPauses: 0,
    memoryWaitFailures: 0,
    sessionsReaped: 0,
    admissionReleases: 0,
    retractions: 0,
    seedWakes: 0,
    loadBacks: 0,
    loadedBackTokens: 0,
    peerFetches: 0,
    peerFetchedTokens: 0,
    preallocTimeouts: 0,
    retries: 0,
  }
  readonly workers: SimWorker[] = []
  readonly byId = new Map<string, SimWorker>()
  readonly decodeWorkers: SimWorker[] = []
  readonly prefillWorkers: SimWorker[] = []
  readonly turns: Turn[]
  /** The D→P sync (`sync=on` with P workers). */
  sync: SyncFabric | undefined = undefined
  /** Workers whose capacity report to the router is out of date. */
  readonly dirty: SimWorker[] = []

  constructor(config: RunConfig) {
    this.config = config
    const spec = config.spec
    this.router = new Router({
      now: () => this.now,
      random: new Prng(config.options.seed, 'router').asRandom(),
      // The simulated engines publish KV events synchronously, so the router's prediction of a
      // successful turn's blocks (which covers event lag) is off unless the spec turns it on;
      // except with legacy session retention (`granularity=session`), where a session's tail
      // lives outside the tree and no event ever tells the router it is there: the router then
      // learns where a session lives from its successful turns, as the research prototype's v5
      // (`docs/design/prototype.md#version-history`) did from its session binding (its default, `predictOnSuccess: true`).
      params: {
        pageSize: config.pageSize,
        predictOnSuccess: spec.granularity === 'session',
        ...spec.routerParams,
      },
      policy: config.policy,
      // Block granularity: the caches' events carry pages of units, not of `pageSize` tokens
      // (the router counts a block key as a page of tokens all the same).
      residency: config.geometry.tokenLevel
        ? { hasher: simBlockHasher, pageSize: config.pageSize }
        : { hasher: simBlockHasher },
      // The adaptive path choice (and, with a host tier, load-back against reseed) estimates with
      // the run's cost model; the path choice reads the workers' queues.
      costModel: config.cost,
      queueSource: (id) => simQueueReport(this, id),
    })
    this.turns = config.workload.turns.map(newTurn)
  }

  /** Some turn has not ended yet. */
  unfinished(): boolean {
    return this.ended < this.turns.length
  }

  /** `w`'s capacity changed: report it to the router at the end of this event. */
  touch(w: SimWorker): void {
    if (!w.dirty && w.role !== 'prefill') {
      w.dirty = true
      this.dirty.push(w)
    }
  }
}
