import fc from 'fast-check'
import { PagedAllocator } from '../allocator/pagedAllocator.js'
import { RadixCacheError } from '../errors/radixCacheError.js'
import { RadixCache } from '../tree/radixCache.js'
import type { EvictGranularity, EvictionPolicy, NodeHandle } from '../tree/types.js'
import { checkEvictCount, checkLockDelta, commandInputs, describeCall, fail } from './commandKit.js'
import { cachedPages, checkRadixInvariants } from './invariants.js'
import { RadixReferenceModel } from './referenceModel.js'

/** One held lock, mirrored on both sides of a model run. */
export interface HeldLock {
  readonly tokens: readonly number[]
  readonly ns: string
  readonly length: number
}

/** The model side of a radix-cache model run. */
export interface RadixModelState {
  readonly model: RadixReferenceModel
  readonly locks: HeldLock[]
}

/** The real side: a cache over a paged KV pool, and the handles of held locks. */
export interface RadixRealState {
  readonly cache: RadixCache
  readonly pool: PagedAllocator
  readonly handles: NodeHandle[]
  /**
   * Token streams lent to the cache (`lendTokens`; the 32 most recent) with a copy of each: never
   * written. Inserts of odd length and matches read their tokens as views of them.
   */
  readonly frozen: [Uint32Array, Uint32Array][]
}

/**
 * `tokens` as a view of a frozen stream that holds them anywhere (so one stream is lent from
 * several places), or of a new stream when none does.
 */
function frozenView(r: RadixRealState, tokens: readonly number[], create: boolean): Uint32Array | undefined {
  const n = tokens.length
  for (const [a] of r.frozen) {
    for (let at = 0; at + n <= a.length; at++) {
      let i = 0
      while (i < n && a[at + i] === tokens[i]) i++
      if (i === n) return a.subarray(at, at + n)
    }
  }
  if (!create) return undefined
  // Room after the tokens, as a stream has: a view never reaches past its own length.
  const a = new Uint32Array(n + 3)
  a.set(tokens)
  a.fill(7, n)
  r.frozen.push([a, a.slice()])
  if (r.frozen.length > 32) r.frozen.shift()
  return a.subarray(0, n)
}

/** Configuration of {@link radixModelSetup}. */
export interface RadixModelConfig {
  readonly pageSize: number
  readonly evictionPolicy?: EvictionPolicy
  readonly evictGranularity?: EvictGranularity
  /** KV pool size in pages (default 48): small enough that inserts must evict. */
  readonly poolPages?: number
}

/** A command of a radix-cache model run. */
export type RadixCommand = fc.Command<RadixModelState, RadixRealState>
type Cmd = RadixCommand

/** Check everything that must hold after any command. */
function checkAll(m: RadixModelState, r: RadixRealState): void {
  checkRadixInvariants(r.cache)
  const want = m.model.sizes()
  if (r.cache.totalSize() !== want.total) fail(`totalSize ${r.cache.totalSize()} != model ${want.total}`)
  if (r.cache.protectedSize() !== want.protected) {
    fail(`protectedSize ${r.cache.protectedSize()} != model ${want.protected}`)
  }
  const got = cachedPages(r.cache)
  const exp = m.model.pages()
  if (got.size !== exp.size) fail(`real has ${got.size} pages, model ${exp.size}`)
  for (const [k, c] of exp) {
    if (got.get(k) !== c) fail(`page ${k}: real lock ${String(got.get(k))}, model ${c}`)
  }
  // Pool accounting: every slot is either free or owned by exactly one cached token's page.
  if (r.pool.availableSize() + r.cache.totalSize() !== r.pool.size) {
    fail(`pool leak: free ${r.pool.availableSize()} + cached ${r.cache.totalSize()} != pool ${r.pool.size}`)
  }
  for (const [a, copy] of r.frozen) {
    for (let i = 0; i < a.length; i++) if (a[i] !== copy[i]) fail('the cache wrote to a lent token stream')
  }
}

function syncEviction(m: RadixModelState, r: RadixRealState, evicted: number): void {
  const removed = m.model.applyEviction(new Set(cachedPages(r.cache).keys()))
  if (removed !== evicted) fail(`evict reported ${evicted} tokens, ${removed} disappeared`)
}

class InsertCommand implements Cmd {
  constructor(
    readonly tokens: readonly number[],
    readonly ns: string,
  ) {}
  check(): boolean {
    return true
  }
  run(m: RadixModelState, r: RadixRealState): void {
    const n = this.tokens.length
    const ps = r.cache.pageSize
    // Like a serving engine: evict the shortfall before allocating.
    const needPages = Math.ceil(n / ps)
    if (needPages > r.pool.freePageCount()) {
      const short = (needPages - r.pool.freePageCount()) * ps
      const before = r.cache.evictableSize()
      const ev = r.cache.evict(short)
      if (ev.evictedTokens < Math.min(short, before)) fail(`evict(${short}) freed only ${ev.evictedTokens}`)
      syncEviction(m, r, ev.evictedTokens)
      if (needPages > r.pool.freePageCount()) {
        if (r.cache.evictableSize() > 0) fail('out of pages while evictable tokens remain')
        checkAll(m, r)
        return
      }
    }
    const slots = r.pool.alloc(n)
    // Odd lengths lend a frozen stream's view (`lendTokens`): new nodes keep views of it.
    const lent = n % 2 === 1 ? frozenView(r, this.tokens, true) : undefined
    const res = r.cache.insert(
      lent ?? this.tokens,
      slots,
      lent === undefined ? { extraKey: this.ns } : { extraKey: this.ns, lendTokens: true },
    )
    const expected = m.model.insert(this.tokens, this.ns)
    if (res.prefixLen !== expected) fail(`insert prefixLen ${res.prefixLen} != model ${expected}`)
    if (res.alignedLen !== n - (n % ps)) fail(`alignedLen ${res.alignedLen}`)
    if (r.cache.tokensUnder(res.lastNode) !== res.alignedLen) fail('lastNode is not the end of the key')
    // Ownership rule: the caller frees its duplicates [0, prefixLen) and its unaligned tail.
    if (res.prefixLen > 0) r.pool.free(slots.subarray(0, res.prefixLen))
    if (res.alignedLen < n) r.pool.free(slots.subarray(res.alignedLen))
    checkAll(m, r)
  }
  toString(): string {
    return describeCall('insert', this.tokens, this.ns)
  }
}

class MatchCommand implements Cmd {
  constructor(
    readonly tokens: readonly number[],
    readonly ns: string,
    readonly readOnly: boolean,
  ) {}
  check(): boolean {
    return true
  }
  run(m: RadixModelState, r: RadixRealState): void {
    const nodesBefore = r.cache.stats().nodeCount
    // Through a frozen stream when one starts with these tokens: nodes lent from it match by identity.
    const tokens = frozenView(r, this.tokens, false) ?? this.tokens
    const res = r.cache.matchPrefix(tokens, { extraKey: this.ns, readOnly: this.readOnly })
    const expected = m.model.match(this.tokens, this.ns)
    if (res.length !== expected) fail(`match length ${res.length} != model ${expected}`)
    if (res.indices.length !== res.length) fail(`indices length ${res.indices.length} != ${res.length}`)
    for (let i = 0; i < res.indices.length; i++) {
      if (r.pool.isFree(res.indices[i]!)) fail(`match returned a free slot ${res.indices[i]}`)
    }
    if (this.readOnly && r.cache.stats().nodeCount !== nodesBefore) fail('readOnly match changed the tree')
    if (!this.readOnly && r.cache.tokensUnder(res.lastNode) !== res.length) fail('lastNode not at match end')
    checkAll(m, r)
  }
  toString(): string {
    return describeCall('match', this.tokens, this.ns, this.readOnly ? ', readOnly' : '')
  }
}

class LockCommand implements Cmd {
  constructor(
    readonly tokens: readonly number[],
    readonly ns: string,
  ) {}
  check(): boolean {
    return true
  }
  run(m: RadixModelState, r: RadixRealState): void {
    const res = r.cache.matchPrefix(this.tokens, { extraKey: this.ns })
    const evictableBefore = m.model.sizes().evictable
    const delta = r.cache.incLockRef(res.lastNode)
    m.model.lock(this.tokens, res.length, this.ns, 1)
    checkLockDelta('incLockRef', evictableBefore - m.model.sizes().evictable, delta)
    r.handles.push(res.lastNode)
    m.locks.push({ tokens: this.tokens, ns: this.ns, length: res.length })
    checkAll(m, r)
  }
  toString(): string {
    return describeCall('lock', this.tokens, this.ns)
  }
}

class UnlockCommand implements Cmd {
  constructor(readonly pick: number) {}
  check(m: Readonly<RadixModelState>): boolean {
    return m.locks.length > 0
  }
  run(m: RadixModelState, r: RadixRealState): void {
    const i = this.pick % m.locks.length
    const lock = m.locks[i]!
    const handle = r.handles[i]!
    const evictableBefore = m.model.sizes().evictable
    const delta = r.cache.decLockRef(handle)
    m.model.lock(lock.tokens, lock.length, lock.ns, -1)
    checkLockDelta('decLockRef', m.model.sizes().evictable - evictableBefore, delta)
    m.locks.splice(i, 1)
    r.handles.splice(i, 1)
    checkAll(m, r)
  }
  toString(): string {
    return `unlock(#${this.pick})`
  }
}

class BadUnlockCommand implements Cmd {
  constructor(
    readonly tokens: readonly number[],
    readonly ns: string,
  ) {}
  check(): boolean {
    return true
  }
  run(m: RadixModelState, r: RadixRealState): void {
    const res = r.cache.matchPrefix(this.tokens, { extraKey: this.ns, readOnly: true })
    const info = r.cache.nodeInfo(res.lastNode)
    if (info.isRoot || info.lockRef > 0) return
    try {
      r.cache.decLockRef(res.lastNode)
    } catch (e) {
      if (!(e instanceof RadixCacheError) || e.code !== 'LOCK_UNDERFLOW') throw e
      checkAll(m, r)
      return
    }
    fail('decLockRef on an unlocked node did not throw')
  }
  toString(): string {
    return `badUnlock([${this.tokens.join(',')}])`
  }
}

class EvictCommand implements Cmd {
  constructor(readonly numTokens: number) {}
  check(): boolean {
    return true
  }
  run(m: RadixModelState, r: RadixRealState): void {
    const evictable = r.cache.evictableSize()
    const res = r.cache.evict(this.numTokens)
    syncEviction(m, r, res.evictedTokens)
    checkEvictCount(r.cache, this.numTokens, evictable, res.evictedTokens)
    checkAll(m, r)
  }
  toString(): string {
    return `evict(${this.numTokens})`
  }
}

class ResetCommand implements Cmd {
  check(): boolean {
    return true
  }
  run(m: RadixModelState, r: RadixRealState): void {
    if (m.locks.some((l) => l.length > 0)) {
      try {
        r.cache.reset()
      } catch (e) {
        if (!(e instanceof RadixCacheError) || e.code !== 'RESET_WHILE_LOCKED') throw e
        checkAll(m, r)
        return
      }
      fail('reset() with held locks did not throw')
    }
    r.cache.reset()
    m.model.reset()
    checkAll(m, r)
  }
  toString(): string {
    return 'reset()'
  }
}

/** Options of {@link radixCommands}. */
export interface RadixCommandsOptions {
  /** Namespaces to use (default `['', 'lora-a']`). */
  readonly namespaces?: readonly string[]
  /** Token alphabet; small alphabets share prefixes often (default `[0, 1, 2, 2^32 - 1]`). */
  readonly alphabet?: readonly number[]
  /** Longest token sequence (default 20). */
  readonly maxTokens?: number
  /** Longest command list (default 60). */
  readonly maxCommands?: number
}

/**
 * fast-check arbitrary of command lists (insert, match, read-only match, lock, unlock, bad unlock,
 * evict, reset) for a model-based test of a {@link RadixCache} against
 * {@link RadixReferenceModel}. Run them with {@link radixModelSetup}.
 *
 * @example
 * ```ts
 * import fc from 'fast-check'
 * import { radixCommands, radixModelSetup } from '@kvc/radix-cache/testing'
 * fc.assert(fc.property(radixCommands(), (cmds) => {
 *   fc.modelRun(radixModelSetup({ pageSize: 2 }), cmds)
 * }), { numRuns: 50 })
 * ```
 */
export function radixCommands(options: RadixCommandsOptions = {}): fc.Arbitrary<Iterable<Cmd>> {
  const { tokens, ns } = commandInputs(options, [0, 1, 2, 0xffffffff])
  return fc.commands(
    [
      fc.tuple(tokens, ns).map(([t, n]) => new InsertCommand(t, n)),
      fc.tuple(tokens, ns, fc.boolean()).map(([t, n, ro]) => new MatchCommand(t, n, ro)),
      fc.tuple(tokens, ns).map(([t, n]) => new LockCommand(t, n)),
      fc.nat().map((k) => new UnlockCommand(k)),
      fc.tuple(tokens, ns).map(([t, n]) => new BadUnlockCommand(t, n)),
      fc.integer({ min: 0, max: 40 }).map((n) => new EvictCommand(n)),
      fc.constant(new ResetCommand()),
    ],
    { maxCommands: options.maxCommands ?? 60 },
  )
}

/**
 * Setup function for `fc.modelRun`: a fresh {@link RadixCache} over a small {@link PagedAllocator}
 * and a fresh {@link RadixReferenceModel}, with a logical clock.
 */
export function radixModelSetup(
  config: RadixModelConfig,
): () => { model: RadixModelState; real: RadixRealState } {
  return () => {
    let t = 0
    const pool = new PagedAllocator({
      size: (config.poolPages ?? 48) * config.pageSize,
      pageSize: config.pageSize,
    })
    const cache = new RadixCache({
      pageSize: config.pageSize,
      evictionPolicy: config.evictionPolicy ?? 'lru',
      evictGranularity: config.evictGranularity ?? 'leaf',
      allocator: pool,
      now: () => t++,
      initialNodeCapacity: 4,
    })
    return {
      model: { model: new RadixReferenceModel(config.pageSize), locks: [] },
      real: { cache, pool, handles: [], frozen: [] },
    }
  }
}
