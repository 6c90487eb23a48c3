import fc from 'fast-check'
import { SyncHarness, type SyncHarnessOptions } from './harness.js'

/**
 * The model side of a sync scenario: which sessions exist (D's truth lives in the harness).
 *
 * @example
 * ```ts
 * import type { SyncModel } from '@kvc/dto-p-sync/testing'
 * const model: SyncModel = { sessions: new Set() }
 * ```
 */
export interface SyncModel {
  readonly sessions: Set<string>
}

/**
 * One step of a sync scenario, for `fc.modelRun` ({@link syncCommands}).
 *
 * @example
 * ```ts
 * import type { SyncCommand } from '@kvc/dto-p-sync/testing'
 * const describeAll = (cmds: Iterable<SyncCommand>) => [...cmds].map(String).join('; ')
 * ```
 */
export type SyncCommand = fc.Command<SyncModel, SyncHarness>

type Cmd = SyncCommand

abstract class Step implements Cmd {
  constructor(readonly probe: readonly number[]) {}
  check(_m: Readonly<SyncModel>): boolean {
    return true
  }
  abstract apply(m: SyncModel, h: SyncHarness): void
  run(m: SyncModel, h: SyncHarness): void {
    this.apply(m, h)
    h.check(this.probe)
  }
  abstract toString(): string
}

class CommitStep extends Step {
  constructor(
    readonly session: string,
    readonly append: readonly number[],
    readonly output: readonly number[],
    probe: readonly number[],
  ) {
    super(probe)
  }
  apply(m: SyncModel, h: SyncHarness): void {
    m.sessions.add(this.session)
    h.commit(this.session, this.append, this.output)
  }
  toString(): string {
    return `commit(${this.session}, +[${this.append}], out [${this.output}])`
  }
}

class RewriteStep extends Step {
  constructor(
    readonly session: string,
    readonly keep: number,
    readonly tokens: readonly number[],
    probe: readonly number[],
  ) {
    super(probe)
  }
  override check(m: Readonly<SyncModel>): boolean {
    return m.sessions.has(this.session)
  }
  apply(_m: SyncModel, h: SyncHarness): void {
    h.rewrite(this.session, this.keep, this.tokens)
  }
  toString(): string {
    return `rewrite(${this.session}, keep ${this.keep}, [${this.tokens}])`
  }
}

class RoundStep extends Step {
  constructor(
    readonly horizonMs: number,
    probe: readonly number[],
  ) {
    super(probe)
  }
  apply(_m: SyncModel, h: SyncHarness): void {
    h.round(this.horizonMs)
  }
  toString(): string {
    return `round(${this.horizonMs})`
  }
}

class AdvanceStep extends Step {
  constructor(
    readonly ms: number,
    probe: readonly number[],
  ) {
    super(probe)
  }
  apply(_m: SyncModel, h: SyncHarness): void {
    h.advance(this.ms)
  }
  toString(): string {
    return `advance(${this.ms})`
  }
}

class EvictPrefillStep extends Step {
  constructor(
    readonly tokens: number,
    probe: readonly number[],
  ) {
    super(probe)
  }
  apply(_m: SyncModel, h: SyncHarness): void {
    h.evictPrefill(this.tokens)
  }
  toString(): string {
    return `evictP(${this.tokens})`
  }
}

class PrefillStep extends Step {
  constructor(
    readonly session: string,
    readonly append: readonly number[],
    probe: readonly number[],
  ) {
    super(probe)
  }
  override check(m: Readonly<SyncModel>): boolean {
    return m.sessions.has(this.session)
  }
  apply(_m: SyncModel, h: SyncHarness): void {
    h.prefillOnP(this.session, this.append)
  }
  toString(): string {
    return `prefillOnP(${this.session}, +[${this.append}])`
  }
}

class LoseOnDecodeStep extends Step {
  constructor(
    readonly session: string,
    readonly pages: number,
    probe: readonly number[],
  ) {
    super(probe)
  }
  override check(m: Readonly<SyncModel>): boolean {
    return m.sessions.has(this.session)
  }
  apply(_m: SyncModel, h: SyncHarness): void {
    h.loseOnDecode(this.session, this.pages)
  }
  toString(): string {
    return `loseOnD(${this.session}, ${this.pages} pages)`
  }
}

/**
 * Options of {@link syncCommands}.
 *
 * @example
 * ```ts
 * import { syncCommands } from '@kvc/dto-p-sync/testing'
 * const cmds = syncCommands({ sessions: ['a', 'b'], alphabet: [0, 1], maxCommands: 30 })
 * ```
 */
export interface SyncCommandsOptions {
  /** Session ids to use (default `['a', 'b', 'c']`). */
  readonly sessions?: readonly string[]
  /** Token alphabet; a small one makes sessions share pages (default 0..3). */
  readonly alphabet?: readonly number[]
  /** Longest command list (default 50). */
  readonly maxCommands?: number
}

/**
 * fast-check arbitrary of sync scenarios: interleavings of D commits (history grows by an append
 * and decoded output), history rewrites, planning rounds, clock advances (deliveries, losses,
 * duplicates, reorderings, timeouts happen as the network's model draws them), P evictions, P's
 * own prefills (reseeds), and D losing pages before they were synced. Every step checks the
 * invariants and Theorem 4 with a random probe append ({@link SyncHarness.check}). Run with
 * {@link syncScenarioSetup}.
 *
 * @example
 * ```ts
 * import fc from 'fast-check'
 * import { syncCommands, syncScenarioSetup } from '@kvc/dto-p-sync/testing'
 * fc.assert(fc.property(syncCommands(), (cmds) => {
 *   const setup = syncScenarioSetup({ beta: 8 })
 *   fc.modelRun(setup, cmds)
 *   setup.harness?.drain()
 * }), { numRuns: 20 })
 * ```
 */
export function syncCommands(options: SyncCommandsOptions = {}): fc.Arbitrary<Iterable<SyncCommand>> {
  const sessions = options.sessions ?? ['a', 'b', 'c']
  const alphabet = options.alphabet ?? [0, 1, 2, 3]
  const tok = fc.constantFrom(...alphabet)
  const tokens = (max: number) => fc.array(tok, { maxLength: max })
  const sess = fc.constantFrom(...sessions)
  const probe = tokens(6)
  return fc.commands(
    [
      fc
        .tuple(sess, tokens(14), fc.array(tok, { minLength: 1, maxLength: 10 }), probe)
        .map(([s, a, o, p]) => new CommitStep(s, a, o, p)),
      fc
        .tuple(sess, fc.nat({ max: 40 }), tokens(10), probe)
        .map(([s, k, t, p]) => new RewriteStep(s, k, t, p)),
      fc.tuple(fc.integer({ min: 1, max: 300 }), probe).map(([ms, p]) => new RoundStep(ms, p)),
      fc.tuple(fc.integer({ min: 0, max: 400 }), probe).map(([ms, p]) => new AdvanceStep(ms, p)),
      fc.tuple(fc.integer({ min: 1, max: 40 }), probe).map(([n, p]) => new EvictPrefillStep(n, p)),
      fc.tuple(sess, tokens(6), probe).map(([s, a, p]) => new PrefillStep(s, a, p)),
      fc.tuple(sess, fc.integer({ min: 1, max: 4 }), probe).map(([s, n, p]) => new LoseOnDecodeStep(s, n, p)),
    ],
    { maxCommands: options.maxCommands ?? 50, size: 'max' },
  )
}

/**
 * Setup function for `fc.modelRun` over {@link syncCommands}: a fresh {@link SyncHarness}. The
 * harness of the latest run is kept in `.harness` (to `drain()` it afterwards).
 *
 * @example
 * ```ts
 * import { syncScenarioSetup } from '@kvc/dto-p-sync/testing'
 * const setup = syncScenarioSetup({ pinTtlMs: 0 }) // no pins: D trusts P's KV events
 * ```
 */
export function syncScenarioSetup(
  options: SyncHarnessOptions = {},
): (() => { model: SyncModel; real: SyncHarness }) & { harness: SyncHarness | undefined } {
  const setup = (() => {
    const harness = new SyncHarness(options)
    setup.harness = harness
    return { model: { sessions: new Set<string>() }, real: harness }
  }) as (() => { model: SyncModel; real: SyncHarness }) & { harness: SyncHarness | undefined }
  setup.harness = undefined
  return setup
}

/**
 * fast-check arbitrary of harness configurations: β, pins or events, eviction granularity, and a
 * D→P link whose bandwidth, latency, jitter (reordering), loss, partial, hung and duplicated
 * transfers vary; the reply link loses, duplicates and reorders too.
 *
 * @example
 * ```ts
 * import fc from 'fast-check'
 * import { syncHarnessOptions } from '@kvc/dto-p-sync/testing'
 * fc.sample(syncHarnessOptions(), 1)[0]?.beta // 4, 8 or 16
 * ```
 */
export function syncHarnessOptions(): fc.Arbitrary<SyncHarnessOptions> {
  const rate = (max: number) => fc.double({ min: 0, max, noNaN: true })
  return fc.record({
    beta: fc.constantFrom(4, 8, 16),
    pinTtlMs: fc.constantFrom(0, 300, 2000),
    evictGranularity: fc.constantFrom('leaf' as const, 'page' as const),
    poolPages: fc.integer({ min: 12, max: 64 }),
    seed: fc.nat(),
    maxBlocksPerTransfer: fc.integer({ min: 1, max: 8 }),
    reservationTimeoutMs: fc.constantFrom(200, 5000),
    forward: fc.record({
      bytesPerSecond: fc.constantFrom(2e4, 1e5, 1e6),
      latencyMs: fc.integer({ min: 0, max: 20 }),
      jitterMs: fc.integer({ min: 0, max: 50 }),
      lossRate: rate(0.3),
      partialRate: rate(0.2),
      hangRate: rate(0.1),
      duplicateRate: rate(0.3),
      timeoutMs: fc.constantFrom(500, 32_000),
    }),
    backward: fc.record({
      bytesPerSecond: fc.constant(1e7),
      latencyMs: fc.integer({ min: 0, max: 20 }),
      jitterMs: fc.integer({ min: 0, max: 50 }),
      lossRate: rate(0.3),
      duplicateRate: rate(0.3),
    }),
  })
}
