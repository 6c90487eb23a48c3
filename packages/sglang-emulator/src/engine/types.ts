/**
 * What the engine runs and what it answers: one request, already parsed and validated.
 *
 * @internal
 * @module
 */

/** Sampling parameters the fake model honours. @internal */
export interface SamplingSpec {
  readonly maxNewTokens: number
  readonly stop: readonly string[]
  readonly stopTokenIds: ReadonlySet<number>
  readonly noStopTrim: boolean
}

/** A classic session's turn parameters (`session_params` of SGLang). @internal */
export interface SessionParams {
  readonly id: string
  readonly rid?: unknown
  readonly offset?: unknown
  readonly drop_previous_output?: unknown
}

/** One request for the engine. @internal */
export interface EngineRequest {
  readonly rid: string
  readonly tokens: number[]
  readonly sampling: SamplingSpec
  readonly extraKey: string | undefined
  readonly priority: number
  /** SessionCache session of the turn (tried; falls back to a plain request on prefix mismatch). */
  readonly sessionId: string | undefined
  /** Classic session whose history this turn extends (`session_params.id`). */
  readonly historySession: string | undefined
  readonly bootstrap:
    | { readonly host: string; readonly port: number | null; readonly room: string }
    | undefined
}

/** The progress of a request: what a streamed chunk or the final answer reports. @internal */
export interface Progress {
  readonly outputIds: number[]
  readonly text: string
  readonly promptTokens: number
  readonly cachedTokens: number
  readonly finishReason: Record<string, unknown> | null
  /** End-to-end latency, seconds (the final answer only). */
  readonly e2e?: number
}

/** A finished request. @internal */
export interface EngineOutput extends Progress {
  readonly finishReason: Record<string, unknown>
  readonly e2e: number
}

/** Receives every intermediate progress of a request. @internal */
export type ProgressSink = (partial: Progress) => void

/** A request the engine refused or could not finish. @internal */
export class EngineError extends Error {
  constructor(
    /** `invalid_request`: SGLang answers 400; `kv_transfer`: the prefill's KV never came (500). */
    readonly kind: 'invalid_request' | 'kv_transfer',
    message: string,
  ) {
    super(message)
  }
}
