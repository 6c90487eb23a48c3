import {
  type DispatchOutcome,
  type DispatchRecord,
  type DoneAction,
  type FailAction,
  type RouteContext,
  type RoutingPolicy,
  RouterError,
  type TurnFailureCause,
  type TurnRequest,
  type WaitAction,
} from '../adapters/router.js'
import type { GatewayRetry } from './retry.js'

/**
 * Classic P/D (SGLang's PD disaggregation): the router picks a P and a D and posts the request to
 * both at once; the D preallocates its KV (waiting in its prealloc queue), then the P prefills and
 * transfers. The simulator executes it (`docs/design/peers.md#sglang-pd-disaggregation`).
 */
export interface PdPairAction {
  readonly type: 'pdPair'
  readonly turnId: string
  readonly prefillId: string
  readonly decodeId: string
  readonly attempt: number
}

/** The direct send of a baseline on colocated workers (the worker prefills and decodes). */
export interface DirectAction {
  readonly type: 'sendFast'
  readonly turnId: string
  readonly workerId: string
  readonly path: 'direct'
  readonly leaseId: undefined
  readonly appendTokens: number
  readonly migratedFrom: undefined
  readonly attempt: number
}

/** What a baseline's gateway asks the simulator to do next. */
export type GatewayAction = PdPairAction | DirectAction | WaitAction | DoneAction | FailAction

/** Request failures a gateway does not retry (SGLang answers them 400: they would fail again). */
export const NOT_RETRYABLE = 'exceeds_kv_capacity'

type Gen = Generator<GatewayAction, DoneAction | FailAction, DispatchOutcome>

/**
 * One turn behind a baseline's router, as the real router handles a request: the policy picks
 * the worker (and, for classic P/D, the P), the request is sent at once — no admission RPC, no
 * pending-seed budget, no pause hint, lease, session slot or rejection count, which are kvc's
 * own — and a failed request is retried the way that router retries (the SGLang model gateway:
 * up to 5 retries with exponential backoff and jitter; Dynamo and llm-d: none by default), each
 * retry routed afresh. The loads the policies read (in-flight requests, active prefill tokens,
 * decode blocks) count the request from its send to its end, as the routers' own counters do.
 *
 * It answers the simulator with the same outcomes as the router's `TurnDispatch`, so the
 * simulation drives both alike.
 */
export class GatewayTurn {
  readonly turnId: string
  readonly record: DispatchRecord
  readonly #ctx: RouteContext
  readonly #policy: RoutingPolicy
  readonly #turn: TurnRequest
  readonly #retry: GatewayRetry
  readonly #reserve: number
  readonly #gen: Gen
  #started = false
  #finished = false

  constructor(ctx: RouteContext, policy: RoutingPolicy, turn: TurnRequest, retry: GatewayRetry) {
    this.#ctx = ctx
    this.#policy = policy
    this.#turn = turn
    this.#retry = retry
    this.turnId = turn.turnId ?? turn.sessionId
    this.#reserve = turn.expectedOutputTokens ?? ctx.params.defaultDecodeReserve
    this.record = {
      turnId: this.turnId,
      sessionId: turn.sessionId,
      sloClass: 'interactive',
      policy: policy.name,
      startedAt: ctx.cluster.now(),
      endedAt: undefined,
      outcome: 'running',
      path: undefined,
      workerId: undefined,
      cause: undefined,
      attempts: 0,
      walks: 0,
      routes: [],
      steps: [],
    }
    this.#gen = this.#run()
  }

  /** The first action (no argument), then the next one for the outcome of the previous. */
  next(outcome?: DispatchOutcome): GatewayAction {
    if (this.#finished) {
      throw new RouterError('TURN_FINISHED', `turn ${this.turnId} already ended`, outcome)
    }
    const r = this.#started ? this.#gen.next(outcome!) : this.#gen.next()
    this.#started = true
    if (r.done === true) this.#finished = true
    return r.value
  }

  *#run(): Gen {
    const { cluster } = this.#ctx
    const store = cluster.store
    const policy = this.#policy
    const prompt = this.#turn.promptTokens
    const blocks = Math.ceil((prompt + this.#reserve) / this.#ctx.params.pageSize)
    let cause: TurnFailureCause = 'no_decode_workers'
    for (let attempt = 0; ; attempt++) {
      this.record.walks++
      const decision = policy.rank(this.#ctx, this.#turn)
      const d = decision.candidates[0]?.workerId
      let out: DispatchOutcome | undefined
      if (d === undefined) {
        cause = cluster.decodeIds().length === 0 ? 'no_decode_workers' : 'all_unhealthy'
      } else if (policy.pathMode === 'direct') {
        this.record.attempts++
        store.addLoad(d, { turns: 1, prefillTokens: prompt, decodeBlocks: blocks })
        out = yield {
          type: 'sendFast',
          turnId: this.turnId,
          workerId: d,
          path: 'direct',
          leaseId: undefined,
          appendTokens: prompt,
          migratedFrom: undefined,
          attempt: this.record.attempts,
        }
        if (cluster.has(d)) store.addLoad(d, { turns: -1, prefillTokens: -prompt, decodeBlocks: -blocks })
        if (out.type === 'completed') return this.#done(d, undefined, 'direct', out)
      } else {
        const p = policy.pickPrefill?.(this.#ctx, this.#turn, d) ?? cluster.pickPrefill(d)
        if (p === undefined) cause = 'no_prefill'
        else {
          this.record.attempts++
          store.addLoad(d, { turns: 1, decodeBlocks: blocks })
          store.addLoad(p, { turns: 1, prefillTokens: prompt })
          out = yield {
            type: 'pdPair',
            turnId: this.turnId,
            prefillId: p,
            decodeId: d,
            attempt: this.record.attempts,
          }
          if (cluster.has(d)) store.addLoad(d, { turns: -1, decodeBlocks: -blocks })
          if (cluster.has(p)) store.addLoad(p, { turns: -1, prefillTokens: -prompt })
          if (out.type === 'completed') return this.#done(d, p, 'seed', out)
        }
      }
      if (out !== undefined) {
        if (out.type !== 'failed') throw new RouterError('UNEXPECTED_OUTCOME', `unexpected ${out.type}`, out)
        cause =
          out.cause === 'transfer_timeout' || out.cause === 'transfer_error'
            ? 'transfer_failed'
            : 'worker_failed'
        if (out.message === NOT_RETRYABLE) return this.#fail(cause)
      }
      if (attempt >= this.#retry.maxRetries) return this.#fail(cause)
      const r = this.#retry
      const base = Math.min(r.initialBackoffMs * r.multiplier ** attempt, r.maxBackoffMs)
      const delay = base * (1 + r.jitter * (2 * this.#ctx.random() - 1))
      yield {
        type: 'wait',
        turnId: this.turnId,
        untilMs: cluster.now() + Math.max(1, delay),
        reason: cause,
      }
    }
  }

  #done(
    d: string,
    p: string | undefined,
    path: 'seed' | 'direct',
    out: Extract<DispatchOutcome, { type: 'completed' }>,
  ): DoneAction {
    const { cluster } = this.#ctx
    const now = cluster.now()
    if (cluster.has(d)) {
      // The binding a sticky router keeps (no residency prediction: KV events tell where KV is).
      cluster.store.setBinding(this.#turn.sessionId, {
        workerId: d,
        committedTokens: out.committedTokens ?? this.#turn.promptTokens + (out.outputTokens ?? 0),
        verifiedBlocks: 0,
        updatedAt: now,
      })
    }
    this.#policy.onSuccess?.(this.#ctx, this.#turn, d, p)
    const r = this.record
    r.outcome = 'done'
    r.path = path
    r.workerId = d
    r.endedAt = now
    return {
      type: 'done',
      turnId: this.turnId,
      path,
      workerId: d,
      prefillId: p,
      migratedFrom: undefined,
      record: r,
    }
  }

  #fail(cause: TurnFailureCause): FailAction {
    const now = this.#ctx.cluster.now()
    const r = this.record
    r.outcome = 'fail'
    r.cause = cause
    r.endedAt = now
    const error = new RouterError(
      'ATTEMPTS_EXHAUSTED',
      `turn ${this.turnId} failed: ${cause} after ${r.attempts} attempts`,
      { cause, turnId: this.turnId, attempts: r.attempts },
    )
    return { type: 'fail', turnId: this.turnId, cause, error, record: r }
  }
}
