import fc from 'fast-check'

/**
 * One step of a random multi-session, multi-turn script (pure data, so it can be printed,
 * stored and replayed). Indices (`session`, `pick`) are resolved against the state when the step
 * runs: `session` names `s<session>`, `pick` is taken modulo the requests in flight.
 *
 * | kind | what the engine does |
 * |---|---|
 * | `open` | open session `s<session>` (namespace `ns` when `namespaced`, a fresh `extra` when `withExtra`) |
 * | `turn` | a whole turn of `s<session>` (opened first if needed): admit its history plus `append`, prefill in `chunk`-sized chunks, decode `output`, and finish unless `finish` is false |
 * | `begin` | admit a new request: a turn of `s<session>` (its history plus `append`) or, with `session: null`, a request without a session (a shared prefix chosen by `base`, plus `append`) |
 * | `prefill` | prefill the next `tokens` prompt tokens of a running request, then `cacheUnfinishedReq` (chunked while the prompt is not done) |
 * | `decode` | one decode step producing `token` |
 * | `retry` | `matchPrefix` again, twice (chunked-prefill retry) |
 * | `finish` | `cacheFinishedReq` (a session turn may hand over a fresh `extra`) |
 * | `abort` | `abortReq` |
 * | `release` | `releaseSession` |
 * | `evictIdle` | `evictIdleSessions({ idleMs, needTokens })` |
 * | `evict` | `evict(tokens)` |
 * | `tick` | advance the clock |
 * | `misuse` | a call that must be refused with a typed error and change nothing |
 *
 * @example
 * ```ts
 * const steps: SessionStep[] = [
 *   { kind: 'turn', session: 0, append: [1, 2, 3], chunk: 2, output: [4], finish: true },
 *   { kind: 'release', session: 0 },
 * ]
 * runSessionScript({ granularity: 'block', pageSize: 1 }, steps)
 * ```
 */
export type SessionStep =
  | {
      readonly kind: 'open'
      readonly session: number
      readonly namespaced: boolean
      readonly withExtra: boolean
    }
  | {
      readonly kind: 'turn'
      readonly session: number
      readonly append: readonly number[]
      readonly chunk: number
      readonly output: readonly number[]
      readonly finish: boolean
    }
  | {
      readonly kind: 'begin'
      readonly session: number | null
      readonly base: number
      readonly append: readonly number[]
      readonly namespaced: boolean
    }
  | { readonly kind: 'prefill'; readonly pick: number; readonly tokens: number }
  | { readonly kind: 'decode'; readonly pick: number; readonly token: number }
  | { readonly kind: 'retry'; readonly pick: number }
  | { readonly kind: 'finish'; readonly pick: number; readonly newExtra: boolean }
  | { readonly kind: 'abort'; readonly pick: number }
  | { readonly kind: 'release'; readonly session: number }
  | { readonly kind: 'evictIdle'; readonly idleMs: number | null; readonly needTokens: number | null }
  | { readonly kind: 'evict'; readonly tokens: number }
  | { readonly kind: 'tick'; readonly ms: number }
  | { readonly kind: 'misuse'; readonly what: MisuseKind; readonly pick: number }

/**
 * The refused calls a `misuse` step can make.
 *
 * @example
 * ```ts
 * const step: SessionStep = { kind: 'misuse', what: 'finishTwice' satisfies MisuseKind, pick: 0 }
 * ```
 */
export type MisuseKind =
  | 'finishTwice'
  | 'releaseTwice'
  | 'releaseUnknown'
  | 'releaseBusy'
  | 'openTwice'
  | 'unknownSession'
  | 'busySession'
  | 'badPrefix'
  | 'namespace'
  | 'duplicateRid'
  | 'foreignRequest'
  | 'notAdmitted'
  | 'prefillPast'
  | 'decodeEarly'

/**
 * All {@link MisuseKind}s.
 *
 * @example
 * ```ts
 * for (const what of MISUSE_KINDS) runSessionScript({ granularity: 'block', pageSize: 4 }, [{ kind: 'misuse', what, pick: 0 }])
 * ```
 */
export const MISUSE_KINDS: readonly MisuseKind[] = [
  'finishTwice',
  'releaseTwice',
  'releaseUnknown',
  'releaseBusy',
  'openTwice',
  'unknownSession',
  'busySession',
  'badPrefix',
  'namespace',
  'duplicateRid',
  'foreignRequest',
  'notAdmitted',
  'prefillPast',
  'decodeEarly',
]

/**
 * Options of {@link sessionStep} and {@link sessionScript}.
 *
 * @example
 * ```ts
 * fc.sample(sessionScript({ sessions: 2, maxAppend: 4, maxSteps: 20 }), 3)
 * ```
 */
export interface SessionScriptOptions {
  /** Session ids `s0 .. s<sessions-1>` (default 4). */
  readonly sessions?: number
  /** Longest append per turn (default 12). */
  readonly maxAppend?: number
  /** Longest prefill chunk (default 16). */
  readonly maxChunk?: number
  /** Tokens of appends; small alphabets make sessions share prefixes (default `[0, 1, 2, 3]`). */
  readonly alphabet?: readonly number[]
  /** Largest `evict` / `needTokens` argument (default 64). */
  readonly maxEvict?: number
  /** Longest script (default 80). */
  readonly maxSteps?: number
}

/**
 * fast-check arbitrary of one {@link SessionStep}, weighted toward the turn lifecycle (begin,
 * prefill, decode, finish) so that sessions reach several turns and the pool fills up.
 *
 * @example
 * ```ts
 * import fc from 'fast-check'
 * import { sessionStep } from '@kvc/session-cache/testing'
 * console.log(fc.sample(sessionStep({ sessions: 3 }), 5))
 * ```
 */
export function sessionStep(options: SessionScriptOptions = {}): fc.Arbitrary<SessionStep> {
  const sessions = options.sessions ?? 4
  const maxAppend = options.maxAppend ?? 12
  const maxChunk = options.maxChunk ?? 16
  const alphabet = options.alphabet ?? [0, 1, 2, 3]
  const maxEvict = options.maxEvict ?? 64
  const session = fc.integer({ min: 0, max: sessions - 1 })
  const pick = fc.nat({ max: 1000 })
  const token = fc.constantFrom(...alphabet)
  const step = <T extends SessionStep>(arb: fc.Arbitrary<T>, weight: number) => ({ arbitrary: arb, weight })
  return fc.oneof(
    step(
      fc.record({
        kind: fc.constant('open' as const),
        session,
        namespaced: fc.boolean(),
        withExtra: fc.boolean(),
      }),
      3,
    ),
    step(
      fc.record({
        kind: fc.constant('turn' as const),
        session,
        append: fc.array(token, { minLength: 1, maxLength: maxAppend }),
        chunk: fc.integer({ min: 1, max: maxChunk }),
        output: fc.array(token, { maxLength: maxAppend }),
        finish: fc.nat({ max: 4 }).map((x) => x > 0),
      }),
      8,
    ),
    step(
      fc.record({
        kind: fc.constant('begin' as const),
        session: fc.option(session, { nil: null, freq: 4 }),
        base: fc.nat({ max: sessions + 1 }),
        append: fc.array(token, { minLength: 1, maxLength: maxAppend }),
        namespaced: fc.boolean(),
      }),
      6,
    ),
    step(
      fc.record({
        kind: fc.constant('prefill' as const),
        pick,
        tokens: fc.integer({ min: 1, max: maxChunk }),
      }),
      8,
    ),
    step(fc.record({ kind: fc.constant('decode' as const), pick, token }), 5),
    step(fc.record({ kind: fc.constant('retry' as const), pick }), 2),
    step(fc.record({ kind: fc.constant('finish' as const), pick, newExtra: fc.boolean() }), 5),
    step(fc.record({ kind: fc.constant('abort' as const), pick }), 1),
    step(fc.record({ kind: fc.constant('release' as const), session }), 2),
    step(
      fc.record({
        kind: fc.constant('evictIdle' as const),
        idleMs: fc.option(fc.nat({ max: 6 }), { nil: null }),
        needTokens: fc.option(fc.nat({ max: maxEvict * 2 }), { nil: null }),
      }),
      1,
    ),
    step(fc.record({ kind: fc.constant('evict' as const), tokens: fc.nat({ max: maxEvict }) }), 1),
    step(fc.record({ kind: fc.constant('tick' as const), ms: fc.integer({ min: 1, max: 3 }) }), 2),
    step(
      fc.record({ kind: fc.constant('misuse' as const), what: fc.constantFrom(...MISUSE_KINDS), pick }),
      2,
    ),
  )
}

/**
 * fast-check arbitrary of a whole random multi-session, multi-turn script: a list of
 * {@link SessionStep}s (chunked prefill, decode, retries, aborts, releases, evictions, clock
 * ticks and misuse). Replay one with {@link runSessionScript}.
 *
 * @example
 * ```ts
 * import fc from 'fast-check'
 * import { runSessionScript, sessionScript } from '@kvc/session-cache/testing'
 * fc.assert(fc.property(sessionScript(), (steps) => {
 *   runSessionScript({ granularity: 'block', pageSize: 1 }, steps)
 * }))
 * ```
 */
export function sessionScript(options: SessionScriptOptions = {}): fc.Arbitrary<SessionStep[]> {
  return fc.array(sessionStep(options), { maxLength: options.maxSteps ?? 80, size: 'max' })
}
