import { SimError, SimErrorCode } from '../errors/simError.js'
import { readTextCapped } from '../workload/traceFiles.js'

/** Largest fault file read (bytes): a schedule is a short list. */
const MAX_FAULT_FILE_BYTES = 16 * 1024 * 1024

/**
 * Kinds of injectable faults (`docs/design/simulation.md#faults`):
 *
 * | kind | by time (`@t+d`) | by probability (`~p`) |
 * |---|---|---|
 * | `d-death` | the D (or colocated worker) `target` dies at `t` and restarts empty after `d` (never, without `+d`) | at each turn arrival, with probability `p`, a random D dies for `d` (default 30 s) |
 * | `p-death` | the P `target` dies at `t` (the seed-path turns it is prefilling or transferring fail) and restarts empty after `d` (never, without `+d`) | at each turn arrival, with probability `p`, a random P dies for `d` (default 30 s) |
 * | `link-flap` | the link `target` (`p0-d2`) is down from `t` for `d` (default 5 s) | each KV transfer meets a flap with probability `p` (the link goes down for `d`, default 5 s) |
 * | `admit-timeout` | every admission RPC sent in `[t, t+d)` times out | each admission RPC times out with probability `p` |
 * | `router-pause` | the router stops deciding from `t` for `d` (a GC pause; default 0.5 s) | at each turn arrival, with probability `p`, the router pauses for `d` (default 0.2 s) |
 * | `lost-kv-events` | every KV event of `target` (all D workers without one) in `[t, t+d)` is lost | each KV event is lost with probability `p` |
 * | `corrupt-kv-events` | every KV event of `target` (all without one) in `[t, t+d)` arrives corrupted: a hash past 64 bits, a parent the worker does not hold, or an id already used (in turn); the router refuses the first and the last (counted as lost: its index flags the gap) and applies the second as an orphan | each KV event arrives corrupted with probability `p` |
 * | `partial-transfer` | every KV transfer to `target` (all D workers without one) ending in `[t, t+d)` delivers only part of its pages: the D refuses it (`transfer_error`) and the turn is reseeded | each KV transfer delivers part of its pages with probability `p` |
 *
 * @example
 * ```ts
 * import { FAULT_KINDS } from '@kvc/sim'
 * FAULT_KINDS.length // 6
 * ```
 */
export const FAULT_KINDS = [
  'd-death',
  'p-death',
  'link-flap',
  'admit-timeout',
  'router-pause',
  'lost-kv-events',
  'corrupt-kv-events',
  'partial-transfer',
] as const

/**
 * One of {@link FAULT_KINDS}.
 *
 * @example
 * ```ts
 * import type { FaultKind } from '@kvc/sim'
 * const k: FaultKind = 'link-flap'
 * ```
 */
export type FaultKind = (typeof FAULT_KINDS)[number]

/**
 * One fault: at a time (`atS`, with a duration `forS`) or with a probability per opportunity.
 * Times are simulated seconds from the start of the run.
 *
 * @example
 * ```ts
 * import type { FaultSpec } from '@kvc/sim'
 * const f: FaultSpec = { kind: 'd-death', target: 'd1', atS: 120, forS: 60 }
 * ```
 */
export interface FaultSpec {
  readonly kind: FaultKind
  /** A worker id (`d1`), a link (`p0-d2`), or undefined (any / all). */
  readonly target?: string
  readonly atS?: number
  readonly forS?: number
  readonly probability?: number
}

const DEFAULT_FOR_S: Record<FaultKind, number> = {
  'd-death': 30,
  'p-death': 30,
  'link-flap': 5,
  'admit-timeout': 10,
  'router-pause': 0.5,
  'lost-kv-events': 10,
  'corrupt-kv-events': 10,
  'partial-transfer': 10,
}

/**
 * Default duration of a fault kind, seconds (`d-death` by time without `+d` never restarts).
 *
 * @example
 * ```ts
 * import { defaultFaultDuration } from '@kvc/sim'
 * defaultFaultDuration('link-flap') // 5
 * ```
 */
export function defaultFaultDuration(kind: FaultKind): number {
  return DEFAULT_FOR_S[kind]
}

function parseSeconds(s: string, item: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|min|h)?$/.exec(s)
  if (m === null)
    throw new SimError(
      SimErrorCode.InvalidFault,
      `fault ${JSON.stringify(item)}: bad time ${JSON.stringify(s)} (use 120s, 500ms, 2m)`,
      s,
    )
  const v = Number(m[1])
  const unit = m[2] ?? 's'
  return unit === 'ms' ? v / 1000 : unit === 'm' || unit === 'min' ? v * 60 : unit === 'h' ? v * 3600 : v
}

function validate(f: FaultSpec, where: string): FaultSpec {
  if (!(FAULT_KINDS as readonly string[]).includes(f.kind)) {
    throw new SimError(
      SimErrorCode.InvalidFault,
      `${where}: unknown fault kind ${JSON.stringify(f.kind)} (${FAULT_KINDS.join(', ')})`,
      f.kind,
    )
  }
  const timed = f.atS !== undefined
  const prob = f.probability !== undefined
  if (timed === prob) {
    throw new SimError(
      SimErrorCode.InvalidFault,
      `${where}: give either a time (@120s) or a probability (~0.01)`,
      f,
    )
  }
  if (timed && (!Number.isFinite(f.atS) || f.atS! < 0)) {
    throw new SimError(SimErrorCode.InvalidFault, `${where}: time must be >= 0`, f.atS)
  }
  if (prob && (!(f.probability! >= 0) || f.probability! > 1)) {
    throw new SimError(SimErrorCode.InvalidFault, `${where}: probability must be in [0, 1]`, f.probability)
  }
  if (f.forS !== undefined && (!(f.forS >= 0) || Number.isNaN(f.forS))) {
    throw new SimError(SimErrorCode.InvalidFault, `${where}: duration must be >= 0`, f.forS)
  }
  if (f.kind === 'link-flap' && f.target !== undefined && !/^[^-\s]+-[^-\s]+$/.test(f.target)) {
    throw new SimError(SimErrorCode.InvalidFault, `${where}: a link target looks like p0-d2`, f.target)
  }
  if (f.kind === 'link-flap' && timed && f.target === undefined) {
    throw new SimError(
      SimErrorCode.InvalidFault,
      `${where}: a timed link flap needs a link target (link-flap:p0-d2@60s)`,
      f,
    )
  }
  return f
}

/**
 * Parse a fault schedule: `kind[:target][@time[+duration]][~probability[+duration]]` items
 * separated by commas or semicolons, for example
 * `d-death:d1@120s+60s, link-flap:p0-d2@200s+10s, admit-timeout~0.05, lost-kv-events~0.01`; or a
 * path to a JSON file holding an array of {@link FaultSpec}. `none` or an empty string is no
 * fault. Throws `INVALID_FAULT` naming the bad item.
 *
 * @example
 * ```ts
 * import { parseFaults } from '@kvc/sim'
 * parseFaults('d-death:d1@120s+60s') // [{ kind: 'd-death', target: 'd1', atS: 120, forS: 60 }]
 * parseFaults('admit-timeout~0.05')  // [{ kind: 'admit-timeout', probability: 0.05 }]
 * ```
 */
export function parseFaults(spec: string): FaultSpec[] {
  const s = spec.trim()
  if (s === '' || s === 'none') return []
  if (s.endsWith('.json')) {
    let data: unknown
    try {
      data = JSON.parse(readTextCapped(s, MAX_FAULT_FILE_BYTES, 'fault file'))
    } catch (err) {
      throw new SimError(
        SimErrorCode.InvalidFault,
        err instanceof SimError ? err.message : `cannot read fault file ${s}: ${(err as Error).message}`,
        s,
      )
    }
    if (!Array.isArray(data))
      throw new SimError(SimErrorCode.InvalidFault, `fault file ${s}: expected a JSON array`, data)
    return data.map((f, i) => validate(f as FaultSpec, `fault file ${s}[${i}]`))
  }
  const out: FaultSpec[] = []
  for (const raw of s.split(/[,;]/)) {
    const item = raw.trim()
    if (item === '') continue
    const m =
      /^([a-z-]+)(?::([^@~\s]+))?(?:@([^+~\s]+)(?:\+([^~\s]+))?)?(?:~([0-9.eE-]+)(?:\+([^\s]+))?)?$/.exec(
        item,
      )
    if (m === null) {
      throw new SimError(
        SimErrorCode.InvalidFault,
        `fault ${JSON.stringify(item)} not understood: use kind[:target]@time[+duration] or kind[:target]~probability[+duration]`,
        item,
      )
    }
    const [, kind, target, at, forAt, p, forP] = m
    const f: { -readonly [K in keyof FaultSpec]: FaultSpec[K] } = { kind: kind as FaultKind }
    if (target !== undefined) f.target = target
    if (at !== undefined) f.atS = parseSeconds(at, item)
    const dur = forAt ?? forP
    if (dur !== undefined) f.forS = parseSeconds(dur, item)
    if (p !== undefined) {
      const v = Number(p)
      if (Number.isNaN(v))
        throw new SimError(SimErrorCode.InvalidFault, `fault ${JSON.stringify(item)}: bad probability`, p)
      f.probability = v
    }
    out.push(validate(f, `fault ${JSON.stringify(item)}`))
  }
  return out
}

/**
 * A fault schedule in the `--faults` syntax (for reports).
 *
 * @example
 * ```ts
 * import { formatFaults } from '@kvc/sim'
 * formatFaults([{ kind: 'admit-timeout', probability: 0.05 }]) // 'admit-timeout~0.05'
 * ```
 */
export function formatFaults(faults: readonly FaultSpec[]): string {
  if (faults.length === 0) return 'none'
  return faults
    .map((f) => {
      let s: string = f.kind
      if (f.target !== undefined) s += `:${f.target}`
      if (f.atS !== undefined) s += `@${f.atS}s`
      if (f.probability !== undefined) s += `~${f.probability}`
      if (f.forS !== undefined) s += `+${f.forS}s`
      return s
    })
    .join(', ')
}
