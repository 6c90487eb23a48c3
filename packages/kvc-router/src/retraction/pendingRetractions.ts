/**
 * The router's side of hot-session retraction: which sessions a D retracted while a turn of
 * theirs was running here, so that the exclusion outlives that turn's success. Bounded by the
 * sessions with turns in flight: an entry goes when the session's last running turn ends.
 *
 * @module
 */

/**
 * Retractions waiting for the session's running turn to end (`ClusterView.retractions`).
 * Dispatch counts each turn from its start to its end (`turnStarted` / `turnEnded`); a retraction
 * is recorded only while the session has a turn running, and forgotten when its last one ends,
 * whatever the outcome, so a session that ends without another turn leaves nothing behind. A
 * session with no turn running needs no entry: the D's exclusion, which Dispatch sets when the
 * answer arrives, is lifted only by a later success, which then lands on another D.
 *
 * @example
 * ```ts
 * import { PendingRetractions } from '@kvc/kvc-router'
 * const p = new PendingRetractions()
 * p.record('s', 'd0') // false: no turn of s is running
 * p.turnStarted('s')
 * p.record('s', 'd0') // true
 * p.get('s') // 'd0'
 * p.turnEnded('s')
 * p.size // 0
 * ```
 */
export class PendingRetractions {
  readonly #by = new Map<string, string>()
  readonly #running = new Map<string, number>()

  /** A turn of `sessionId` started on this router. */
  turnStarted(sessionId: string): void {
    this.#running.set(sessionId, (this.#running.get(sessionId) ?? 0) + 1)
  }

  /** A turn of `sessionId` ended (done, failed or aborted); its last one drops the session's retraction. */
  turnEnded(sessionId: string): void {
    const n = this.#running.get(sessionId)
    if (n === undefined) return
    if (n > 1) {
      this.#running.set(sessionId, n - 1)
      return
    }
    this.#running.delete(sessionId)
    this.#by.delete(sessionId)
  }

  /** D `workerId` retracted `sessionId`: recorded (true) only while a turn of the session runs here. */
  record(sessionId: string, workerId: string): boolean {
    if (!this.#running.has(sessionId)) return false
    this.#by.set(sessionId, workerId)
    return true
  }

  /** The D that retracted `sessionId` while its turn ran, if any. */
  get(sessionId: string): string | undefined {
    return this.#by.get(sessionId)
  }

  has(sessionId: string): boolean {
    return this.#by.has(sessionId)
  }

  /** Drops the session's pending retraction (applied, or the session is forgotten); true if there was one. */
  delete(sessionId: string): boolean {
    return this.#by.delete(sessionId)
  }

  /** Pending retractions. */
  get size(): number {
    return this.#by.size
  }

  /** Sessions with turns running on this router. */
  get runningSessions(): number {
    return this.#running.size
  }
}
