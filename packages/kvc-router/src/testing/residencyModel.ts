import type { KvEvent } from '@kvc/radix-cache'
import { RouterError } from '../errors/routerError.js'
import type { IngestStatus, OverlapMode, ResidencyIndex } from '../residency/residencyIndex.js'

/**
 * One worker of {@link ResidencyReferenceModel}: the (unsigned) hashes it holds, its last applied
 * event id and whether a gap flagged it.
 *
 * @example
 * ```ts
 * import { ResidencyReferenceModel } from '@kvc/kvc-router/testing'
 * const m = new ResidencyReferenceModel()
 * m.addWorker('d0')
 * m.workers.get('d0')?.last // -1
 * ```
 */
export interface ResidencyModelWorker {
  blocks: Set<bigint>
  last: number
  needsResync: boolean
}

const u64 = (h: bigint): bigint => BigInt.asUintN(64, h)

/**
 * The naive reference of `ResidencyIndex`: per worker a `Set` of the (unsigned) block hashes it
 * holds and its last event id; overlap by walking the prompt per worker. Same documented rules
 * (gap policy, dedupe, unknown parents stored as is), none of the speed.
 *
 * @example
 * ```ts
 * import { ResidencyReferenceModel } from '@kvc/kvc-router/testing'
 * const m = new ResidencyReferenceModel()
 * m.addWorker('d0')
 * m.ingest('d0', { type: 'BlockStored', eventId: 0, blockHashes: [1n, 2n], parentBlockHash: null, tokenIds: [], blockSize: 4, extraKey: null })
 * m.overlap([1n, 2n, 3n], 'plain').get('d0') // 2
 * ```
 */
export class ResidencyReferenceModel {
  readonly workers = new Map<string, ResidencyModelWorker>()
  readonly #theta: number
  readonly #gapPolicy: 'apply' | 'hold'
  readonly #dedupe: boolean

  constructor(options: { thetaShared?: number; gapPolicy?: 'apply' | 'hold'; dedupe?: boolean } = {}) {
    this.#theta = options.thetaShared ?? 0.5
    this.#gapPolicy = options.gapPolicy ?? 'apply'
    this.#dedupe = options.dedupe ?? false
  }

  addWorker(id: string, lastEventId = -1): void {
    if (this.workers.has(id)) throw new RouterError('DUPLICATE_WORKER', id, id)
    this.workers.set(id, { blocks: new Set(), last: lastEventId, needsResync: false })
  }

  removeWorker(id: string): void {
    if (!this.workers.delete(id)) throw new RouterError('UNKNOWN_WORKER', id, id)
  }

  #w(id: string): ResidencyModelWorker {
    const w = this.workers.get(id)
    if (w === undefined) throw new RouterError('UNKNOWN_WORKER', id, id)
    return w
  }

  ingest(id: string, e: KvEvent): IngestStatus {
    const w = this.#w(id)
    if (e.eventId <= w.last) {
      if (this.#dedupe) return 'duplicate'
      throw new RouterError('EVENT_OUT_OF_ORDER', String(e.eventId), e.eventId)
    }
    let status: IngestStatus = 'applied'
    if (e.eventId > w.last + 1) {
      w.needsResync = true
      if (this.#gapPolicy === 'hold') return 'gap-held'
      status = 'gap-applied'
    } else if (this.#gapPolicy === 'hold') w.needsResync = false
    w.last = e.eventId
    if (e.type === 'BlockStored') for (const h of e.blockHashes) w.blocks.add(u64(h))
    else if (e.type === 'BlockRemoved') for (const h of e.blockHashes) w.blocks.delete(u64(h))
    else {
      w.blocks.clear()
      w.needsResync = false
    }
    return status
  }

  recordStored(id: string, hashes: readonly bigint[]): void {
    const w = this.#w(id)
    for (const h of hashes) w.blocks.add(u64(h))
  }

  recordRemoved(id: string, hashes: readonly bigint[]): void {
    const w = this.#w(id)
    for (const h of hashes) w.blocks.delete(u64(h))
  }

  resync(id: string, hashes: readonly bigint[], lastEventId: number): void {
    const w = this.#w(id)
    w.blocks = new Set(hashes.map(u64))
    w.last = lastEventId
    w.needsResync = false
  }

  clearWorker(id: string): void {
    this.#w(id).blocks.clear()
  }

  /** Distinct blocks held by anyone. */
  blockCount(): number {
    const all = new Set<bigint>()
    for (const w of this.workers.values()) for (const b of w.blocks) all.add(b)
    return all.size
  }

  holders(h: bigint): number {
    let n = 0
    for (const w of this.workers.values()) if (w.blocks.has(u64(h))) n++
    return n
  }

  overlap(hashes: readonly bigint[], mode: OverlapMode): Map<string, number> {
    const threshold = mode === 'sole' ? 2 : Math.max(2, Math.ceil(this.#theta * this.workers.size - 1e-9))
    const out = new Map<string, number>()
    for (const [id, w] of this.workers) {
      let depth = 0
      let excl = 0
      while (depth < hashes.length && w.blocks.has(u64(hashes[depth]!))) {
        if (this.holders(hashes[depth]!) < threshold) excl++
        depth++
      }
      out.set(id, mode === 'plain' ? depth : excl)
    }
    return out
  }
}

/**
 * Compares a `ResidencyIndex` with the reference model: same workers, same blocks per worker,
 * same distinct-block count, same event-stream state. Throws an `Error` describing the first
 * difference.
 *
 * @example
 * ```ts
 * import { ResidencyIndex } from '@kvc/kvc-router'
 * import { ResidencyReferenceModel, checkResidencyAgainstModel } from '@kvc/kvc-router/testing'
 * checkResidencyAgainstModel(new ResidencyIndex(), new ResidencyReferenceModel()) // ok
 * ```
 */
export function checkResidencyAgainstModel(index: ResidencyIndex, model: ResidencyReferenceModel): void {
  if (index.workerCount !== model.workers.size) {
    throw new Error(`workers: index ${index.workerCount}, model ${model.workers.size}`)
  }
  for (const [id, w] of model.workers) {
    const got = new Set(index.workerBlocks(id))
    if (got.size !== w.blocks.size)
      throw new Error(`${id}: index holds ${got.size} blocks, model ${w.blocks.size}`)
    for (const b of w.blocks) if (!got.has(b)) throw new Error(`${id}: index misses block ${b}`)
    const st = index.workerStatus(id)
    if (st.blocks !== w.blocks.size) throw new Error(`${id}: status.blocks ${st.blocks} != ${w.blocks.size}`)
    if (st.lastEventId !== w.last) throw new Error(`${id}: lastEventId ${st.lastEventId} != ${w.last}`)
    if (st.needsResync !== w.needsResync)
      throw new Error(`${id}: needsResync ${st.needsResync} != ${w.needsResync}`)
  }
  if (index.blockCount !== model.blockCount()) {
    throw new Error(`blockCount: index ${index.blockCount}, model ${model.blockCount()}`)
  }
}
