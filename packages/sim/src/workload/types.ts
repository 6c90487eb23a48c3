/**
 * How turns arrive.
 *
 * - `closed`: agentic sessions. A session's first turn arrives at its `arrivalMs`; each later
 *   turn arrives `thinkMs` after the previous turn of the same session ended (completed or
 *   failed), as an agent waits for a reply and runs its tools before it speaks again.
 * - `open`: requests arrive at their recorded `arrivalMs`. Turns of one session still keep their
 *   order: a turn never starts before the previous one of its session ended.
 *
 * @example
 * ```ts
 * import type { ArrivalMode } from '@kvc/sim'
 * const mode: ArrivalMode = 'closed'
 * ```
 */
export type ArrivalMode = 'closed' | 'open'

/**
 * One request (one turn of a session, or a session-less request). Token counts are in tokens;
 * times are in milliseconds of trace time (before `timeScale`).
 *
 * @example
 * ```ts
 * import type { TurnSpec } from '@kvc/sim'
 * const t: TurnSpec = {
 *   id: 0, session: 0, turnIndex: 0, arrivalMs: 0, thinkMs: 0,
 *   inputLength: 6000, outputLength: 80, appendTokens: 6000, reuseFraction: 0.9,
 * }
 * ```
 */
export interface TurnSpec {
  /** Dense index in `Workload.turns` (0-based). */
  readonly id: number
  /** Session index (`-1`: a request without a session). */
  readonly session: number
  /** Position of the turn in its session (0-based; 0 for session-less requests). */
  readonly turnIndex: number
  /** `open`: arrival time; `closed`: the session's start (turn 0) — ignored for later turns. */
  readonly arrivalMs: number
  /** `closed`: think time after the previous turn of the session ended. */
  readonly thinkMs: number
  /** Prompt tokens (what the cost model charges). */
  readonly inputLength: number
  /** Tokens to generate. */
  readonly outputLength: number
  /** Prompt tokens beyond the session's previous prompt + output (the whole prompt for turn 0). */
  readonly appendTokens: number
  /**
   * Fraction of the prompt an ideal, unlimited cache would already hold when the turn arrives
   * (policy-independent; used to stratify results by "overlap").
   */
  readonly reuseFraction: number
}

/**
 * A replayable workload: the turns, plus their token ids (materialized lazily, so a trace of
 * millions of tokens costs only its compact form until a turn runs).
 *
 * @example
 * ```ts
 * import { generateAgenticWorkload } from '@kvc/sim'
 * const w = generateAgenticWorkload({ seed: 1, sessions: 2, maxTurnsPerSession: 3 })
 * const prompt = w.promptTokens(0) // Uint32Array of w.turns[0].inputLength... page-padded for traces
 * ```
 */
export interface Workload {
  /** Short name (`agentic`, `mooncake:conversation_trace.jsonl`, ...). */
  readonly name: string
  /** Where it came from (`built-in generator`, a file path as given). */
  readonly source: string
  /** Arrival semantics. */
  readonly arrivalMode: ArrivalMode
  /** Number of sessions (turns with `session >= 0` refer to `0..sessions-1`). */
  readonly sessions: number
  /** Session labels (ids from the trace, or generated), `sessions` entries. */
  readonly sessionLabels: readonly string[]
  /** All turns, ordered by `id`. */
  readonly turns: readonly TurnSpec[]
  /** What the loader had to adapt (skipped rows and why); shown by `trace stats` and in reports. */
  readonly notes: readonly string[]
  /**
   * Real tokens one prompt token stands for (1, except for hash-id traces expanded into pages
   * smaller than their blocks: a 512-token block expanded into 16 tokens stands for 32 each).
   */
  readonly tokenScale: number
  /** Page size that fits the data (Mooncake: the 512-token block), or undefined. */
  readonly suggestedPageSize: number | undefined
  /**
   * Block-granular workloads only: the tokens per block of the trace. `promptTokens` then gives
   * two entries per block and one last entry for the token after the prompt that the engine
   * computes (see `KvGeometry`); the simulator counts the caches in those units and converts to
   * tokens for the router, the cost model and the records. Undefined: entries are tokens.
   */
  readonly blockTokens?: number
  /**
   * The prompt's token ids as the caches see them. For hash-id traces every block is a full page
   * (a partial last block is padded to its page), so `length` may exceed `inputLength` by less
   * than a block; the cost model charges `inputLength`. Read-only: the simulated caches read it
   * in place (a session's prompts are usually views of one token stream).
   */
  promptTokens(turnId: number): Uint32Array
  /**
   * The generated tokens, when the workload knows them (sessions whose next prompt extends this
   * output); `undefined` when it does not (the output's KV is used while decoding and dropped).
   */
  outputTokens(turnId: number): Uint32Array | undefined
}
