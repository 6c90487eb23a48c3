import type { KvEvent } from '@kvc/radix-cache'
import fc from 'fast-check'
import { RouterError } from '../errors/routerError.js'
import { BlockKeys } from '../residency/blockKeys.js'
import { ResidencyIndex } from '../residency/residencyIndex.js'
import { ResidencyReferenceModel, checkResidencyAgainstModel } from './residencyModel.js'

/**
 * The real side of a residency model run.
 *
 * @example
 * ```ts
 * import { residencyModelSetup } from '@kvc/kvc-router/testing'
 * const { real } = residencyModelSetup()()
 * real.index.workerCount // 3
 * ```
 */
export interface ResidencyRealState {
  readonly index: ResidencyIndex
}

/**
 * A command of the residency model-based test.
 *
 * @example
 * ```ts
 * import type { ResidencyCommand } from '@kvc/kvc-router/testing'
 * const run = (c: ResidencyCommand) => c.toString()
 * ```
 */
export type ResidencyCommand = fc.Command<ResidencyReferenceModel, ResidencyRealState>
type Cmd = ResidencyCommand

/**
 * Hashes used by {@link residencyCommands}: a few prefix chains that share heads (so overlaps are
 * deep and shared), signed/unsigned spellings of the same 64 bits, and keys sharing a 32-bit half.
 *
 * @example
 * ```ts
 * import { RESIDENCY_TEST_CHAINS } from '@kvc/kvc-router/testing'
 * RESIDENCY_TEST_CHAINS.length // 5
 * ```
 */
export const RESIDENCY_TEST_CHAINS: readonly (readonly bigint[])[] = [
  [1n, 2n, 3n, 4n, 5n, 6n],
  [1n, 2n, 13n, 14n],
  [-1n, 21n, 2n ** 63n, 23n],
  [2n ** 64n - 1n, 21n, 31n],
  // Keys whose low 32-bit halves equal other keys' (2n, 21n): the table compares both halves.
  [1n, 2n ** 32n + 2n, 2n ** 33n + 21n, 3n * 2n ** 32n + 2n],
]

const hashArb = fc.constantFrom(...new Set(RESIDENCY_TEST_CHAINS.flat()))
const hashesArb = fc.oneof(
  fc.array(hashArb, { maxLength: 5 }),
  fc
    .tuple(fc.constantFrom(...RESIDENCY_TEST_CHAINS), fc.nat(6), fc.nat(6))
    .map(([c, a, b]) => c.slice(Math.min(a, b), Math.max(a, b) + 1)),
)

function sameOutcome(run: () => unknown, model: () => unknown): void {
  let realErr: unknown
  let modelErr: unknown
  let realVal: unknown
  let modelVal: unknown
  try {
    modelVal = model()
  } catch (e) {
    modelErr = e
  }
  try {
    realVal = run()
  } catch (e) {
    realErr = e
  }
  if (modelErr !== undefined || realErr !== undefined) {
    const mc = modelErr instanceof RouterError ? modelErr.code : String(modelErr)
    const rc = realErr instanceof RouterError ? realErr.code : String(realErr)
    if (mc !== rc) throw new Error(`model threw ${mc}, index threw ${rc}`)
    return
  }
  if (realVal !== modelVal) throw new Error(`model returned ${String(modelVal)}, index ${String(realVal)}`)
}

class AddWorker implements Cmd {
  constructor(
    readonly id: string,
    readonly last: number,
  ) {}
  check(): boolean {
    return true
  }
  run(m: ResidencyReferenceModel, r: ResidencyRealState): void {
    sameOutcome(
      () => {
        r.index.addWorker(this.id, { lastEventId: this.last })
      },
      () => m.addWorker(this.id, this.last),
    )
    checkResidencyAgainstModel(r.index, m)
  }
  toString(): string {
    return `addWorker(${this.id}, last=${this.last})`
  }
}

class RemoveWorker implements Cmd {
  constructor(readonly id: string) {}
  check(): boolean {
    return true
  }
  run(m: ResidencyReferenceModel, r: ResidencyRealState): void {
    sameOutcome(
      () => r.index.removeWorker(this.id),
      () => m.removeWorker(this.id),
    )
    checkResidencyAgainstModel(r.index, m)
  }
  toString(): string {
    return `removeWorker(${this.id})`
  }
}

class Ingest implements Cmd {
  constructor(
    readonly id: string,
    readonly delta: number,
    readonly kind: 'BlockStored' | 'BlockRemoved' | 'AllBlocksCleared',
    readonly hashes: readonly bigint[],
    readonly parent: bigint | null,
  ) {}
  check(): boolean {
    return true
  }
  run(m: ResidencyReferenceModel, r: ResidencyRealState): void {
    const last = m.workers.get(this.id)?.last ?? -1
    const eventId = Math.max(0, last + this.delta)
    const e: KvEvent =
      this.kind === 'BlockStored'
        ? {
            type: 'BlockStored',
            eventId,
            blockHashes: this.hashes,
            parentBlockHash: this.parent,
            tokenIds: [],
            blockSize: 4,
            extraKey: null,
          }
        : this.kind === 'BlockRemoved'
          ? ({ type: 'BlockRemoved', eventId, blockHashes: this.hashes, extraKey: null } as KvEvent)
          : { type: 'AllBlocksCleared', eventId }
    sameOutcome(
      () => r.index.ingest(this.id, e),
      () => m.ingest(this.id, e),
    )
    checkResidencyAgainstModel(r.index, m)
  }
  toString(): string {
    return `ingest(${this.id}, +${this.delta}, ${this.kind} [${this.hashes.join(',')}])`
  }
}

/** Corrupt events a worker's stream may carry (each refused with `INVALID_MESSAGE`, nothing changed). */
const CORRUPTIONS = [
  'non-bigint hash',
  'hash past 64 bits',
  'hash below -2^63',
  'negative event id',
  'fractional event id',
  'zero block size',
  'unknown type',
  'non-bigint parent',
] as const

class Malformed implements Cmd {
  constructor(
    readonly id: string,
    readonly kind: (typeof CORRUPTIONS)[number] = 'non-bigint hash',
  ) {}
  check(m: ResidencyReferenceModel): boolean {
    return m.workers.has(this.id)
  }
  run(m: ResidencyReferenceModel, r: ResidencyRealState): void {
    const last = m.workers.get(this.id)!.last
    const stored = (over: { readonly [key: string]: unknown }) =>
      ({
        type: 'BlockStored',
        eventId: last + 1,
        blockHashes: [1n, 2n],
        parentBlockHash: null,
        tokenIds: [],
        blockSize: 4,
        extraKey: null,
        ...over,
      }) as unknown as KvEvent
    const bad =
      this.kind === 'non-bigint hash'
        ? stored({ blockHashes: [1n, 2 as unknown as bigint] })
        : this.kind === 'hash past 64 bits'
          ? stored({ blockHashes: [1n, 2n ** 64n + 1n] })
          : this.kind === 'hash below -2^63'
            ? stored({ blockHashes: [-(2n ** 63n) - 1n] })
            : this.kind === 'negative event id'
              ? stored({ eventId: -1 })
              : this.kind === 'fractional event id'
                ? stored({ eventId: last + 1.5 })
                : this.kind === 'zero block size'
                  ? stored({ blockSize: 0 })
                  : this.kind === 'unknown type'
                    ? stored({ type: 'BlockMoved' })
                    : stored({ parentBlockHash: 'parent' })
    try {
      r.index.ingest(this.id, bad)
      throw new Error(`malformed event accepted (${this.kind})`)
    } catch (e) {
      if (!(e instanceof RouterError) || e.code !== 'INVALID_MESSAGE') throw e
    }
    checkResidencyAgainstModel(r.index, m)
  }
  toString(): string {
    return `malformed(${this.id}, ${this.kind})`
  }
}

class Record implements Cmd {
  constructor(
    readonly id: string,
    readonly stored: boolean,
    readonly hashes: readonly bigint[],
  ) {}
  check(): boolean {
    return true
  }
  run(m: ResidencyReferenceModel, r: ResidencyRealState): void {
    sameOutcome(
      () =>
        this.stored
          ? r.index.recordStored(this.id, this.hashes)
          : r.index.recordRemoved(this.id, this.hashes),
      () => (this.stored ? m.recordStored(this.id, this.hashes) : m.recordRemoved(this.id, this.hashes)),
    )
    checkResidencyAgainstModel(r.index, m)
  }
  toString(): string {
    return `${this.stored ? 'recordStored' : 'recordRemoved'}(${this.id}, [${this.hashes.join(',')}])`
  }
}

class Resync implements Cmd {
  constructor(
    readonly id: string,
    readonly hashes: readonly bigint[],
    readonly last: number,
  ) {}
  check(): boolean {
    return true
  }
  run(m: ResidencyReferenceModel, r: ResidencyRealState): void {
    sameOutcome(
      () => r.index.resync(this.id, BlockKeys.fromHashes(this.hashes), this.last),
      () => m.resync(this.id, this.hashes, this.last),
    )
    checkResidencyAgainstModel(r.index, m)
  }
  toString(): string {
    return `resync(${this.id}, [${this.hashes.join(',')}], ${this.last})`
  }
}

class Query implements Cmd {
  constructor(readonly hashes: readonly bigint[]) {}
  check(): boolean {
    return true
  }
  run(m: ResidencyReferenceModel, r: ResidencyRealState): void {
    for (const mode of ['plain', 'exclusive', 'sole'] as const) {
      const want = m.overlap(this.hashes, mode)
      const got = r.index.overlap(BlockKeys.fromHashes(this.hashes), mode)
      for (const [id, n] of want) {
        if (got.get(id) !== n) throw new Error(`${mode} overlap of ${id}: index ${got.get(id)}, model ${n}`)
      }
    }
  }
  toString(): string {
    return `query([${this.hashes.join(',')}])`
  }
}

/**
 * Options of {@link residencyCommands}.
 *
 * @example
 * ```ts
 * import type { ResidencyCommandsOptions } from '@kvc/kvc-router/testing'
 * const o: ResidencyCommandsOptions = { workers: ['a', 'b'], maxCommands: 100 }
 * ```
 */
export interface ResidencyCommandsOptions {
  /** Worker ids to draw from (default d0..d3). */
  readonly workers?: readonly string[]
  readonly maxCommands?: number
}

/**
 * fast-check commands for a model-based test of `ResidencyIndex` against
 * {@link ResidencyReferenceModel}: workers come and go, events arrive in order, with gaps, out of
 * order and malformed, router-side updates and resyncs happen, and every query's plain and
 * exclusive overlap is compared. The full state is compared after every command.
 *
 * @example
 * ```ts
 * import fc from 'fast-check'
 * import { residencyCommands, residencyModelSetup } from '@kvc/kvc-router/testing'
 * fc.assert(fc.property(residencyCommands(), (cmds) => fc.modelRun(residencyModelSetup(), cmds)), { numRuns: 20 })
 * ```
 */
export function residencyCommands(options: ResidencyCommandsOptions = {}): fc.Arbitrary<Iterable<Cmd>> {
  const ids = options.workers ?? ['d0', 'd1', 'd2', 'd3']
  const id = fc.constantFrom(...ids)
  const delta = fc.oneof(
    { weight: 8, arbitrary: fc.constant(1) },
    { weight: 1, arbitrary: fc.integer({ min: 2, max: 4 }) },
    { weight: 1, arbitrary: fc.integer({ min: -1, max: 0 }) },
  )
  const ingest = fc
    .tuple(
      id,
      delta,
      fc.constantFrom(
        'BlockStored',
        'BlockStored',
        'BlockStored',
        'BlockRemoved',
        'AllBlocksCleared' as const,
      ),
      hashesArb,
      fc.option(hashArb, { nil: null }),
    )
    .map(([w, d, k, h, p]) => new Ingest(w, d, k as Ingest['kind'], h, p))
  const record = fc.tuple(id, fc.boolean(), hashesArb).map(([w, s, h]) => new Record(w, s, h))
  const query = hashesArb.map((h) => new Query(h))
  // Stores and queries dominate so that blocks end up shared by several workers.
  return fc.commands(
    [
      fc.tuple(id, fc.integer({ min: -1, max: 3 })).map(([w, l]) => new AddWorker(w, l)),
      id.map((w) => new RemoveWorker(w)),
      ingest,
      ingest,
      ingest,
      record,
      record,
      query,
      query,
      query,
      fc.tuple(id, hashesArb, fc.integer({ min: -1, max: 20 })).map(([w, h, l]) => new Resync(w, h, l)),
      fc.tuple(id, fc.constantFrom(...CORRUPTIONS)).map(([w, k]) => new Malformed(w, k)),
    ],
    { maxCommands: options.maxCommands ?? 80, size: 'large' },
  )
}

/**
 * The setup function for `fc.modelRun` with {@link residencyCommands}.
 *
 * @example
 * ```ts
 * import { residencyModelSetup } from '@kvc/kvc-router/testing'
 * const { model, real } = residencyModelSetup({ gapPolicy: 'hold' })()
 * real.index.workerCount // 3 (d0, d1, d2 are pre-registered)
 * ```
 */
export function residencyModelSetup(
  options: {
    readonly thetaShared?: number
    readonly gapPolicy?: 'apply' | 'hold'
    readonly dedupe?: boolean
    /**
     * Workers registered on both sides before the commands run (default d0..d2, so most commands
     * act on live workers; 33+ exercises multi-word holder masks).
     */
    readonly preAdded?: readonly string[]
  } = {},
): () => { model: ResidencyReferenceModel; real: ResidencyRealState } {
  const { preAdded, ...opts } = options
  return () => {
    const model = new ResidencyReferenceModel(opts)
    const index = new ResidencyIndex({ ...opts, initialBlocks: 4 })
    for (const w of preAdded ?? ['d0', 'd1', 'd2']) {
      model.addWorker(w)
      index.addWorker(w)
    }
    return { model, real: { index } }
  }
}
