import type { AdmitResponse, BlockKeys, DispatchAction, DispatchOutcome } from '../adapters/router.js'
import type { PdPairAction } from '../gateway/gatewayTurn.js'
import type { SessionRequest } from '../adapters/sessionCache.js'
import type { ServePath, TurnRecord } from '../metrics/types.js'
import type { TurnSpec } from '../workload/types.js'
import type { SimWorker, Transfer } from './worker.js'

/**
 * Where a turn's physical work stands (`prealloc`: a classic P/D request waiting for its D to
 * preallocate its KV).
 */
export type Stage = 'idle' | 'prealloc' | 'queued' | 'prefill' | 'transferWait' | 'wire' | 'decode'

/** What the simulation executes for a turn: the router's actions, or a classic P/D pair. */
export type SimAction = DispatchAction | PdPairAction

/**
 * What drives a turn: the router's `TurnDispatch` (kvc policies) or a baseline's `GatewayTurn`;
 * both take the outcome of the last action and return the next.
 */
export interface TurnDriving {
  next(outcome?: DispatchOutcome): SimAction
  readonly record: { readonly attempts: number }
}

/** A turn in flight: its dispatch, what it holds on which workers, and what it measured. */
export interface Turn {
  readonly id: number
  readonly spec: TurnSpec
  readonly key: string
  /** Incremented at each physical attempt: events of an older attempt are stale. */
  seq: number
  stepSeq: number
  pending: DispatchOutcome | undefined
  dispatch: TurnDriving | undefined
  prompt: Uint32Array | undefined
  keys: BlockKeys | undefined
  arrivalMs: number
  firstTokenMs: number
  endMs: number
  ended: boolean
  stage: Stage
  w1: SimWorker | undefined
  w2: SimWorker | undefined
  req1: SessionRequest | undefined
  req2: SessionRequest | undefined
  /** Pages a D that keeps no prefix cache holds for the turn (its KV while it runs). */
  pages2: Int32Array | undefined
  transfer: Transfer | undefined
  kind: 'fast' | 'direct' | 'pfill' | undefined
  admitAction: Extract<DispatchAction, { type: 'admit' }> | undefined
  admitSentMs: number
  admitLatency: number
  /** A D's admitting answer to this turn's admission on arrival (`admitOnArrival`), on its way back. */
  arrivalAdmission: { readonly workerId: string; readonly response: AdmitResponse } | undefined
  cached: number
  matched: number
  /** Prompt tokens the D already held when it preallocated a classic P/D request (not transferred). */
  preallocCached: number
  computed: number
  transferred: number
  /** Tokens the D's admission planned to load back from its host tier for this fast-path turn. */
  plannedLoadBack: number
  lastError: string | undefined
  migratedFrom: string | undefined
  /** Waiting out a backoff: a pending-seed slot it is first in line for wakes it early. */
  waiting: boolean
}

/** A turn of the workload, not arrived yet. */
export function newTurn(spec: TurnSpec): Turn {
  const turn: Turn = {
    id: spec.id,
    spec,
    key: spec.session >= 0 ? `s${spec.session}` : `r${spec.id}`,
    seq: 0,
    stepSeq: 0,
    pending: undefined,
    dispatch: undefined,
    prompt: undefined,
    keys: undefined,
    arrivalMs: Number.NaN,
    firstTokenMs: Number.NaN,
    endMs: Number.NaN,
    ended: false,
    stage: 'idle',
    w1: undefined,
    w2: undefined,
    req1: undefined,
    req2: undefined,
    pages2: undefined,
    transfer: undefined,
    kind: undefined,
    admitAction: undefined,
    // Set before they are read.
    admitSentMs: Number.NaN,
    admitLatency: Number.NaN,
    arrivalAdmission: undefined,
    cached: 0,
    matched: Number.NaN,
    preallocCached: 0,
    computed: 0,
    transferred: Number.NaN,
    plannedLoadBack: 0,
    lastError: undefined,
    migratedFrom: undefined,
    waiting: false,
  }
  // The admission times and these token counts (through the KV geometry) are doubles: created as
  // NaN, their fields hold doubles from the start. Initialised with 0 they held small integers,
  // and V8 gave every turn object a new shape at its first admission (12k migrations on the
  // conversation trace, each at the turn's arrival).
  turn.matched = 0
  turn.transferred = 0
  return turn
}

/** TurnRecord with its fields writable, for the constructor that fills them in. */
type WritableRecord = { -readonly [K in keyof TurnRecord]: TurnRecord[K] }

/**
 * The record of an ended turn, built by a constructor rather than an object literal: a run keeps
 * every record to its end, V8 then pretenures the literal's allocation site into old space, and
 * creating each record cost about a microsecond and a half (measured: `#finalize` ≈ 50 ms of the
 * conversation trace run, ≈ 20 ms with this class). The own enumerable properties and their order
 * are those of `TurnRecord`, so JSON output and structured clones are the same as a literal's.
 */
// The class's fields are TurnRecord's, written once by the constructor (no field declarations: a
// declared field would be defined before the constructor runs, in declaration order, with the same
// result but a second list to keep in step with the interface).
// biome-ignore lint/correctness/noUnusedVariables: merged with the class below
interface TurnRow extends WritableRecord {}
// biome-ignore lint/suspicious/noUnsafeDeclarationMerging: the interface only names the fields the constructor sets
class TurnRow {
  constructor(
    turn: Turn,
    status: 'completed' | 'failed',
    cause: string | undefined,
    path: ServePath | undefined,
    workerId: string | undefined,
    prefillId: string | undefined,
  ) {
    const s = turn.spec
    const completed = status === 'completed'
    this.id = turn.id
    this.session = s.session
    this.turnIndex = s.turnIndex
    this.inputLength = s.inputLength
    this.outputLength = s.outputLength
    this.appendTokens = s.appendTokens
    this.reuseFraction = s.reuseFraction
    this.arrivalMs = turn.arrivalMs
    this.firstTokenMs = completed ? turn.firstTokenMs : Number.NaN
    this.endMs = turn.endMs
    this.status = status
    this.cause = completed ? undefined : cause
    this.lastError = turn.lastError
    this.path = completed ? path : undefined
    this.workerId = completed ? workerId : undefined
    this.prefillId = completed ? prefillId : undefined
    this.migrated = completed && turn.migratedFrom !== undefined
    this.cachedTokens = turn.cached
    this.matchedTokens = turn.matched
    this.computedTokens = turn.computed
    this.transferredTokens = turn.transferred
    this.attempts = turn.dispatch?.record.attempts ?? 0
  }
}

/** The record of an ended turn (its fields for the path taken only when it completed). */
export function turnRecord(
  turn: Turn,
  status: 'completed' | 'failed',
  cause: string | undefined,
  path: ServePath | undefined,
  workerId: string | undefined,
  prefillId: string | undefined,
): TurnRecord {
  return new TurnRow(turn, status, cause, path, workerId, prefillId)
}
