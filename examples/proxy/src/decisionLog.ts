import { type WriteStream, createWriteStream } from 'node:fs'
import type { DispatchRecord, RouteDecision } from '@kvc/kvc-router'
import type { TurnResult } from './gateway.js'

/**
 * One routing decision as logged: the turn's outcome plus the router's explain record
 * (`DispatchRecord`: the route decisions with every candidate's ranking key, and the dispatch
 * steps). Times are milliseconds since the turn started.
 */
export interface DecisionLine {
  readonly ts: string
  readonly msg: 'turn'
  readonly turnId: string
  readonly sessionId: string
  readonly policy: string
  readonly sloClass: string
  readonly status: 'completed' | 'failed'
  readonly path: string | null
  readonly worker: string | null
  readonly prefill: string | null
  readonly migratedFrom: string | null
  readonly cause: string | null
  readonly attempts: number
  readonly walks: number
  readonly durationMs: number
  readonly promptTokens: number
  readonly blocks: number
  readonly outputTokens: number | null
  readonly cachedTokens: number | null
  readonly routes: readonly unknown[]
  readonly steps: readonly unknown[]
}

function route(r: RouteDecision, t0: number): unknown {
  return {
    at: Math.round(r.at - t0),
    bound: r.boundWorker ?? null,
    meanLoad: r.meanLoad,
    candidates: r.candidates.map((c) => ({
      worker: c.workerId,
      rank: c.rank,
      fast: c.fast,
      capOk: c.capOk,
      score: c.score,
      overlap: c.overlapBlocks,
      bonus: Math.round(c.bonus * 100) / 100,
      load: c.load,
      append: c.appendTokens,
      need: c.needTokens,
      avail: c.availableTokens,
      by: c.decidedBy,
      ...(c.note === undefined ? {} : { note: c.note }),
    })),
    ineligible: r.ineligible.map((w) => ({
      worker: w.workerId,
      reason: w.reason,
      ...(w.until === undefined ? {} : { untilMs: Math.round(w.until - t0) }),
    })),
    ...(r.exclusionsReleased ? { exclusionsReleased: true } : {}),
  }
}

/** The log line of a finished turn. */
export function decisionLine(result: TurnResult, promptTokens: number, blocks: number): DecisionLine {
  const rec: DispatchRecord = result.record
  const t0 = rec.startedAt
  return {
    ts: new Date().toISOString(),
    msg: 'turn',
    turnId: result.turnId,
    sessionId: result.sessionId,
    policy: rec.policy,
    sloClass: rec.sloClass,
    status: result.status,
    path: result.path ?? null,
    worker: result.workerId ?? null,
    prefill: result.prefillId ?? null,
    migratedFrom: result.migratedFrom ?? null,
    cause: result.cause ?? null,
    attempts: rec.attempts,
    walks: rec.walks,
    durationMs: Math.round(result.endedAt - result.startedAt),
    promptTokens,
    blocks,
    outputTokens: result.completion?.outputTokens ?? null,
    cachedTokens: result.completion?.cachedTokens ?? null,
    routes: rec.routes.map((r) => route(r, t0)),
    steps: rec.steps.map((s) => ({
      at: Math.round(s.at - t0),
      kind: s.kind,
      ...(s.workerId === undefined ? {} : { worker: s.workerId }),
      ...(s.prefillId === undefined ? {} : { prefill: s.prefillId }),
      detail: s.detail,
    })),
  }
}

/**
 * Where decision lines go: `stdout`, `stderr`, `off`, or a file (appended), one JSON object per
 * line; plus an optional callback (tests, embedding).
 */
export class DecisionLog {
  readonly #dest: string
  readonly #stream: WriteStream | undefined
  readonly #onDecision: ((line: DecisionLine) => void) | undefined

  constructor(dest: string, onDecision?: (line: DecisionLine) => void) {
    this.#dest = dest
    this.#onDecision = onDecision
    this.#stream =
      dest === 'stdout' || dest === 'stderr' || dest === 'off'
        ? undefined
        : createWriteStream(dest, { flags: 'a' })
  }

  write(line: DecisionLine): void {
    this.#onDecision?.(line)
    if (this.#dest === 'off') return
    const text = `${JSON.stringify(line)}\n`
    if (this.#dest === 'stdout') process.stdout.write(text)
    else if (this.#dest === 'stderr') process.stderr.write(text)
    else this.#stream?.write(text)
  }

  close(): Promise<void> {
    const s = this.#stream
    if (s === undefined) return Promise.resolve()
    return new Promise((resolve) => s.end(resolve))
  }
}
