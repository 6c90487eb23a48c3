/** The resources that stay open when a socket, a server or a timer is forgotten. */
const LEAKABLE = new Set(['TCPSocketWrap', 'TCPServerWrap', 'Timeout', 'Immediate'])

/**
 * Counts of the open resources that leak when a socket, a server or a timer is forgotten
 * (`TCPSocketWrap`, `TCPServerWrap`, `Timeout`, `Immediate`, from
 * `process.getActiveResourcesInfo()`). Take one before a test starts its servers and clients, and
 * give it to {@link leakedSince} after it closed them.
 *
 * @example
 * ```ts
 * import { handleCounts, leakedSince } from '@kvc/worker-bindings/testing'
 * const baseline = handleCounts()
 * // ... start an emulator, talk to it, close it ...
 * const leaked = await leakedSince(baseline) // {} when everything was closed
 * ```
 */
export function handleCounts(): Record<string, number> {
  const out: Record<string, number> = {}
  for (const r of process.getActiveResourcesInfo()) {
    if (LEAKABLE.has(r)) out[r] = (out[r] ?? 0) + 1
  }
  return out
}

/**
 * Waits (up to `ms`, polling) until no more sockets, servers, timers or immediates are open than
 * in `baseline` (from {@link handleCounts}); returns the excess that remains, by resource type
 * (empty when nothing leaked). The wait lets connections that are closing finish closing.
 *
 * @example
 * ```ts
 * import { expect } from 'vitest'
 * import { handleCounts, leakedSince } from '@kvc/worker-bindings/testing'
 * const baseline = handleCounts()
 * const timer = setTimeout(() => {}, 10_000)
 * clearTimeout(timer) // without this line: { Timeout: 1 }
 * expect(await leakedSince(baseline)).toEqual({})
 * ```
 */
export async function leakedSince(
  baseline: Readonly<Record<string, number>>,
  ms = 3_000,
): Promise<Record<string, number>> {
  const deadline = Date.now() + ms
  for (;;) {
    const now = handleCounts()
    const excess: Record<string, number> = {}
    for (const [k, v] of Object.entries(now)) {
      // (The polling timer below has fired by the time this runs: it is not counted.)
      const allowed = baseline[k] ?? 0
      if (v > allowed) excess[k] = v - allowed
    }
    if (Object.keys(excess).length === 0 || Date.now() > deadline) return excess
    await new Promise((r) => setTimeout(r, 20))
  }
}
