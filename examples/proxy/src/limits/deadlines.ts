import { ProxyError } from '../errors.js'

/** The `deadlines` section: how long each phase of a request may take, ms. */
export interface DeadlinesConfig {
  /** A turn, from its body read to the end of its answer (queued, routed, streamed); 504 past it. */
  readonly turnMs: number
  /** A request's body, from its headers to its last byte; 408 past it. */
  readonly bodyReadMs: number
  /** A request's headers, from the connection or the previous request; the connection is closed past it. */
  readonly headersMs: number
}

/** Defaults of `deadlines`. */
export const DEFAULT_DEADLINES: DeadlinesConfig = Object.freeze({
  turnMs: 600_000,
  bodyReadMs: 30_000,
  headersMs: 10_000,
})

/** Resolves `deadlines` (integers >= 1, ms). */
export function resolveDeadlines(v: unknown): DeadlinesConfig {
  if (v === undefined) return DEFAULT_DEADLINES
  if (typeof v !== 'object' || v === null || Array.isArray(v))
    throw new ProxyError('INVALID_CONFIG', 'config deadlines: must be an object', v)
  const o = v as Record<string, unknown>
  const out: Record<string, number> = {}
  for (const k of Object.keys(o))
    if (!(k in DEFAULT_DEADLINES))
      throw new ProxyError(
        'INVALID_CONFIG',
        `config deadlines.${k}: unknown key (expected one of ${Object.keys(DEFAULT_DEADLINES).join(', ')})`,
        k,
      )
  for (const k of Object.keys(DEFAULT_DEADLINES) as (keyof DeadlinesConfig)[]) {
    const x = o[k] ?? DEFAULT_DEADLINES[k]
    if (typeof x !== 'number' || !Number.isInteger(x) || x < 1)
      throw new ProxyError(
        'INVALID_CONFIG',
        `config deadlines.${k}: must be an integer >= 1, got ${JSON.stringify(x)}`,
        x,
      )
    out[k] = x
  }
  return out as unknown as DeadlinesConfig
}

/** The error a turn's signal is aborted with when its deadline passes. */
export function deadlineExceeded(ms: number): ProxyError {
  return new ProxyError(
    'DEADLINE_EXCEEDED',
    `the turn did not end within its deadline of ${ms} ms`,
    { cause: 'deadline_exceeded' },
    504,
  )
}

/** Whether an abort reason is a passed deadline. */
export function isDeadline(reason: unknown): boolean {
  return reason instanceof ProxyError && reason.code === 'DEADLINE_EXCEEDED'
}

/**
 * Arms a turn's deadline: after `ms`, `controller` is aborted with a `DEADLINE_EXCEEDED`
 * `ProxyError` (unless it was aborted before). Returns the function that disarms it.
 */
export function armDeadline(controller: AbortController, ms: number): () => void {
  const t = setTimeout(() => {
    if (!controller.signal.aborted) controller.abort(deadlineExceeded(ms))
  }, ms)
  t.unref?.()
  return () => clearTimeout(t)
}
