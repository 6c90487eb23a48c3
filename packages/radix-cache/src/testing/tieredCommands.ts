import fc from 'fast-check'
import { PagedAllocator } from '../allocator/pagedAllocator.js'
import { RadixCacheError, type RadixCacheErrorCode } from '../errors/radixCacheError.js'
import type { KvEvent } from '../events/kvEvents.js'
import type { HostWritePolicy } from '../tier/types.js'
import { RadixCache } from '../tree/radixCache.js'
import type { EvictGranularity, EvictionPolicy, NodeHandle } from '../tree/types.js'
import { checkEvictCount, checkLockDelta, commandInputs, describeCall, fail } from './commandKit.js'
import { checkRadixInvariants, tieredPages } from './invariants.js'
import { type TierChangeCounts, type TierChangeRules, TieredReferenceModel } from './tieredReferenceModel.js'

/**
 * Configuration of {@link tieredModelSetup}.
 *
 * @example
 * ```ts
 * import type { TieredModelConfig } from '@kvc/radix-cache/testing'
 * const config: TieredModelConfig = { pageSize: 2, writePolicy: 'write_through', hostPages: 8 }
 * ```
 */
export interface TieredModelConfig {
  readonly pageSize: number
  readonly evictionPolicy?: EvictionPolicy
  readonly evictGranularity?: EvictGranularity
  readonly hostEvictionPolicy?: EvictionPolicy
  readonly writePolicy?: HostWritePolicy
  /** Device pool in pages (default 16): small, so inserts must evict. */
  readonly poolPages?: number
  /** Host tier in pages (default 24). */
  readonly hostPages?: number
  /** Track KV slots (default `true`); `false` runs a length-only cache against a virtual pool. */
  readonly trackValues?: boolean
  /** `matchPrefix` load-back threshold (default 0: every host hit loads back). */
  readonly loadBackThreshold?: number
}

/**
 * A lock or host reference held during a two-tier model run.
 *
 * @example
 * ```ts
 * import type { TieredHold } from '@kvc/radix-cache/testing'
 * const h: TieredHold = { tokens: [1, 2], ns: '', length: 2 }
 * ```
 */
export interface TieredHold {
  readonly tokens: readonly number[]
  readonly ns: string
  readonly length: number
}

/**
 * The model side of a two-tier model run.
 *
 * @example
 * ```ts
 * import { tieredModelSetup } from '@kvc/radix-cache/testing'
 * const { model } = tieredModelSetup({ pageSize: 2 })()
 * model.model.sizes().host // 0
 * ```
 */
export interface TieredModelState {
  readonly model: TieredReferenceModel
  readonly locks: TieredHold[]
  readonly pins: TieredHold[]
}

/**
 * The real side: the cache, its device pool (absent for a length-only cache), held handles and
 * the per-medium block ledger its KV events built.
 *
 * @example
 * ```ts
 * import { tieredModelSetup } from '@kvc/radix-cache/testing'
 * const { real } = tieredModelSetup({ pageSize: 2 })()
 * real.cache.hostCapacity() // 48
 * ```
 */
export interface TieredRealState {
  readonly cache: RadixCache
  readonly pool: PagedAllocator | undefined
  readonly poolSize: number
  readonly lockHandles: NodeHandle[]
  readonly pinHandles: NodeHandle[]
  /** Block hash → count, per medium, as the event stream says. */
  readonly ledger: Map<string, Map<bigint, number>>
  /** First event-stream inconsistency seen, if any. */
  eventError: string | undefined
}

/**
 * A command of a two-tier model run.
 *
 * @example
 * ```ts
 * import type { TieredCommand } from '@kvc/radix-cache/testing'
 * const noop: TieredCommand = { check: () => true, run: () => {}, toString: () => 'noop' }
 * ```
 */
export type TieredCommand = fc.Command<TieredModelState, TieredRealState>
type Cmd = TieredCommand

function deviceFree(r: TieredRealState): number {
  return r.pool !== undefined ? r.pool.availableSize() : r.poolSize - r.cache.totalSize()
}

function ledgerOf(r: TieredRealState, medium: string): Map<bigint, number> {
  let m = r.ledger.get(medium)
  if (m === undefined) {
    m = new Map()
    r.ledger.set(medium, m)
  }
  return m
}

function onEvent(r: TieredRealState, e: KvEvent): void {
  if (e.type === 'AllBlocksCleared') {
    r.ledger.clear()
    return
  }
  if (e.medium === undefined) {
    r.eventError ??= `${e.type} without a medium in a tiered cache`
    return
  }
  const m = ledgerOf(r, e.medium)
  for (const h of e.blockHashes) {
    const c = m.get(h) ?? 0
    if (e.type === 'BlockStored') m.set(h, c + 1)
    else if (c === 0) r.eventError ??= `BlockRemoved(${e.medium}) of ${h}, never stored there`
    else if (c === 1) m.delete(h)
    else m.set(h, c - 1)
  }
}

function sameMultiset(ledger: Map<bigint, number> | undefined, dump: bigint[]): boolean {
  const counts = new Map<bigint, number>()
  for (const h of dump) counts.set(h, (counts.get(h) ?? 0) + 1)
  const l = ledger ?? new Map<bigint, number>()
  if (counts.size !== l.size) return false
  for (const [h, c] of counts) if (l.get(h) !== c) return false
  return true
}

/** Everything checked after every command. */
function checkAll(m: TieredModelState, r: TieredRealState): void {
  const cache = r.cache
  checkRadixInvariants(cache)
  const want = m.model.sizes()
  const got = {
    total: cache.totalSize(),
    protected: cache.protectedSize(),
    evictable: cache.evictableSize(),
    host: cache.hostSize(),
    hostOnly: cache.hostOnlySize(),
    hostEvictable: cache.hostEvictableSize(),
  }
  for (const k of Object.keys(want) as (keyof typeof want)[]) {
    if (got[k] !== want[k]) fail(`${k}: real ${got[k]}, model ${want[k]}`)
  }
  const real = tieredPages(cache)
  const exp = m.model.pages()
  if (real.size !== exp.size) fail(`real has ${real.size} pages, model ${exp.size}`)
  for (const [k, p] of exp) {
    const q = real.get(k)
    if (q === undefined || q.dev !== p.dev || q.host !== p.host || q.lock !== p.lock || q.pin !== p.pin) {
      fail(`page ${k}: real ${JSON.stringify(q)}, model ${JSON.stringify(p)}`)
    }
  }
  if (r.pool !== undefined && r.pool.availableSize() + cache.totalSize() !== r.pool.size) {
    fail(`device pool leak: free ${r.pool.availableSize()} + cached ${cache.totalSize()} != ${r.pool.size}`)
  }
  if (cache.hostAvailableSize() + cache.hostSize() !== cache.hostCapacity()) {
    fail(
      `host pool leak: free ${cache.hostAvailableSize()} + held ${cache.hostSize()} != ${cache.hostCapacity()}`,
    )
  }
  if (r.eventError !== undefined) fail(r.eventError)
  const tier = cache.hostTier!
  if (!sameMultiset(r.ledger.get(tier.deviceMedium), cache.blockHashDump('device').blockHashes))
    fail('device events do not add up to the device blocks')
  if (!sameMultiset(r.ledger.get(tier.hostMedium), cache.blockHashDump('host').blockHashes))
    fail('host events do not add up to the host blocks')
}

function sync(m: TieredModelState, r: TieredRealState, rules: TierChangeRules): TierChangeCounts {
  const observed = new Map<string, { dev: boolean; host: boolean }>()
  for (const [k, p] of tieredPages(r.cache)) observed.set(k, { dev: p.dev, host: p.host })
  return m.model.applyObserved(observed, rules)
}

/** Run `fn`, expecting a `RadixCacheError` with `code` and no observable change. */
function expectRefused(
  m: TieredModelState,
  r: TieredRealState,
  code: RadixCacheErrorCode,
  fn: () => unknown,
): void {
  const before = JSON.stringify([...tieredPages(r.cache)])
  const sizes = JSON.stringify([r.cache.totalSize(), r.cache.hostSize(), r.pool?.availableSize()])
  try {
    fn()
  } catch (e) {
    if (!(e instanceof RadixCacheError) || e.code !== code) throw e
    if (JSON.stringify([...tieredPages(r.cache)]) !== before)
      fail(`refused with ${code} but the tree changed`)
    if (JSON.stringify([r.cache.totalSize(), r.cache.hostSize(), r.pool?.availableSize()]) !== sizes)
      fail(`refused with ${code} but the sizes changed`)
    checkAll(m, r)
    return
  }
  fail(`expected ${code}, nothing was thrown`)
}

/** Device eviction checks shared by the commands that evict: write policies and counts. */
function checkEviction(
  r: TieredRealState,
  before: Map<string, { dev: boolean; host: boolean }>,
  hostRoomBefore: number,
  counts: TierChangeCounts,
  reported: number | undefined,
): void {
  if (reported !== undefined && reported !== counts.leftDevice)
    fail(`evict reported ${reported} tokens, ${counts.leftDevice} left the device`)
  const policy = r.cache.hostTier!.writePolicy
  if (policy === 'write_back') {
    // With room for everything that left, a demotion never needs to evict or discard anything.
    if (hostRoomBefore >= counts.leftDevice && (counts.discarded > 0 || counts.hostEvicted > 0))
      fail(`write_back discarded ${counts.discarded} / host-evicted ${counts.hostEvicted} with room for all`)
  } else {
    const after = tieredPages(r.cache)
    for (const [k, p] of before) {
      const q = after.get(k)
      if (p.dev && !p.host && q !== undefined && !q.dev)
        fail(`${policy}: page ${k} without a copy was demoted instead of discarded`)
    }
  }
}

function snapshotTiers(r: TieredRealState): Map<string, { dev: boolean; host: boolean }> {
  const out = new Map<string, { dev: boolean; host: boolean }>()
  for (const [k, p] of tieredPages(r.cache)) out.set(k, { dev: p.dev, host: p.host })
  return out
}

function hostRoom(r: TieredRealState): number {
  return r.cache.hostCapacity() - r.cache.hostSize()
}

/** Evict `short` device tokens before an allocation, checking it like any eviction. */
function evictShortfall(m: TieredModelState, r: TieredRealState, short: number): void {
  const before = snapshotTiers(r)
  const room = hostRoom(r)
  const evictable = r.cache.evictableSize()
  const ev = r.cache.evict(short)
  const counts = sync(m, r, { deviceEviction: true, hostWrites: 'demotion' })
  checkEviction(r, before, room, counts, ev.evictedTokens)
  if (ev.evictedTokens < Math.min(short, evictable)) fail(`evict(${short}) freed only ${ev.evictedTokens}`)
}

class InsertCommand implements Cmd {
  constructor(
    readonly tokens: readonly number[],
    readonly ns: string,
    readonly chunked: boolean,
  ) {}
  check(): boolean {
    return true
  }
  run(m: TieredModelState, r: TieredRealState): void {
    const n = this.tokens.length
    const ps = r.cache.pageSize
    const need = Math.ceil(n / ps) * ps
    if (need > deviceFree(r)) {
      evictShortfall(m, r, need - deviceFree(r))
      if (need > deviceFree(r)) {
        if (r.cache.evictableSize() > 0) fail('out of device pages while evictable tokens remain')
        checkAll(m, r)
        return
      }
    }
    const slots = r.pool?.alloc(n)
    const room = hostRoom(r)
    const res = r.cache.insert(this.tokens, slots, { extraKey: this.ns, chunked: this.chunked })
    const expected = m.model.insert(this.tokens, this.ns, !this.chunked)
    if (res.prefixLen !== expected) fail(`insert prefixLen ${res.prefixLen} != model ${expected}`)
    const aligned = n - (n % ps)
    if (res.alignedLen !== aligned) fail(`alignedLen ${res.alignedLen}`)
    // Ownership: the caller frees its duplicates [0, prefixLen) and its unaligned tail; the tree
    // took everything else, host-only pages it re-adopted included.
    if (slots !== undefined) {
      if (res.prefixLen > 0) r.pool!.free(slots.subarray(0, res.prefixLen))
      if (aligned < n) r.pool!.free(slots.subarray(aligned))
    }
    const tier = r.cache.hostTier!
    const path = m.model.pathKeys(this.tokens, aligned, this.ns)
    const writing = tier.writePolicy !== 'write_back' && !this.chunked
    const candidates: string[] = []
    if (writing) {
      const pages = m.model.pages()
      for (const k of path) {
        const p = pages.get(k)!
        if (!p.host && p.hits >= tier.writeThroughThreshold) candidates.push(k)
      }
    }
    sync(m, r, writing ? { hostWrites: path } : {})
    if (writing && room >= candidates.length * ps) {
      const pages = m.model.pages()
      for (const k of candidates)
        if (!pages.get(k)!.host) fail(`${tier.writePolicy}: ${k} not copied to host`)
    }
    checkAll(m, r)
  }
  toString(): string {
    return describeCall('insert', this.tokens, this.ns, this.chunked ? ', chunked' : '')
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
  run(m: TieredModelState, r: TieredRealState): void {
    const res = r.cache.matchPrefix(this.tokens, { extraKey: this.ns, readOnly: this.readOnly })
    const want = m.model.match(this.tokens, this.ns)
    if (res.length !== want.device || res.hostLength !== want.host) {
      fail(`match ${res.length}+${res.hostLength}, model ${want.device}+${want.host}`)
    }
    if (r.pool !== undefined) {
      if (res.indices.length !== res.length) fail('indices do not cover the device match')
      for (const i of res.indices) if (r.pool.isFree(i)) fail(`match returned a free slot ${i}`)
    }
    if (!this.readOnly) {
      if (r.cache.tokensUnder(res.lastNode) !== res.length) fail('lastNode not at the device match end')
      if (r.cache.tokensUnder(res.lastHostNode) !== res.length + res.hostLength)
        fail('lastHostNode not at the match end')
      const resid = r.cache.residencyOf(res.lastHostNode)
      if (resid.deviceTokens !== res.length || resid.hostTokens !== res.hostLength)
        fail(`residencyOf ${JSON.stringify(resid)} disagrees with the match`)
    }
    sync(m, r, {})
    checkAll(m, r)
  }
  toString(): string {
    return describeCall('match', this.tokens, this.ns, this.readOnly ? ', readOnly' : '')
  }
}

/** Device tokens that locking the first `length` tokens of `tokens` would take out of `evictable`. */
function evictableAfterLock(
  m: TieredModelState,
  tokens: readonly number[],
  length: number,
  ns: string,
): number {
  let onPath = 0
  const ps = m.model.pageSize
  for (let p = 1; p * ps <= length; p++) {
    const page = m.model.page(tokens, p, ns)!
    if (page.dev && page.lock === 0) onPath += ps
  }
  return m.model.sizes().evictable - onPath
}

class LoadBackCommand implements Cmd {
  constructor(
    readonly tokens: readonly number[],
    readonly ns: string,
    readonly viaMatch: boolean,
  ) {}
  check(): boolean {
    return true
  }
  run(m: TieredModelState, r: TieredRealState): void {
    const want = m.model.match(this.tokens, this.ns)
    const total = want.device + want.host
    const hostKeys = m.model.pathKeys(this.tokens, total, this.ns)
    for (const k of m.model.pathKeys(this.tokens, want.device, this.ns)) hostKeys.delete(k)
    const threshold = r.cache.hostTier!.loadBackThreshold
    let fits = true
    if (r.pool !== undefined) {
      fits = r.pool.availableSize() + evictableAfterLock(m, this.tokens, total, this.ns) >= want.host
    } else if (want.host > deviceFree(r)) {
      // A length-only cache has no pool to check: make room first, as a simulator would.
      const probe = r.cache.matchPrefix(this.tokens, { extraKey: this.ns })
      r.cache.incLockRef(probe.lastHostNode)
      m.model.lock(this.tokens, total, this.ns, 1)
      evictShortfall(m, r, want.host - deviceFree(r))
      r.cache.decLockRef(probe.lastHostNode)
      m.model.lock(this.tokens, total, this.ns, -1)
    }
    const before = snapshotTiers(r)
    const room = hostRoom(r)
    const evictedBefore = r.cache.stats().evictedTokens
    let loaded: number
    if (this.viaMatch) {
      const res = r.cache.matchPrefix(this.tokens, { extraKey: this.ns, loadBack: true })
      const expectLoad = want.host > threshold && fits
      loaded = res.loadedTokens
      if (loaded !== (expectLoad ? want.host : 0))
        fail(`matchPrefix loaded ${loaded}, expected ${expectLoad ? want.host : 0}`)
      if (res.length !== want.device + loaded || res.hostLength !== want.host - loaded)
        fail(`loadBack match ${res.length}+${res.hostLength} after loading ${loaded}`)
      if (r.pool !== undefined)
        for (const i of res.indices) if (r.pool.isFree(i)) fail(`free slot ${i} returned`)
    } else {
      const res = r.cache.matchPrefix(this.tokens, { extraKey: this.ns })
      if (!fits) {
        expectRefused(m, r, 'OUT_OF_MEMORY', () => r.cache.loadBack(res.lastHostNode))
        return
      }
      const lb = r.cache.loadBack(res.lastHostNode)
      loaded = lb.loadedTokens
      if (loaded !== want.host) fail(`loadBack loaded ${loaded}, model ${want.host}`)
      if (r.pool !== undefined && lb.indices.length !== loaded) fail('loadBack indices do not cover the load')
      if (r.cache.residencyOf(res.lastHostNode).hostTokens !== 0)
        fail('loaded path still has host-only tokens')
    }
    const counts = sync(m, r, { deviceEviction: true, hostWrites: 'demotion', deviceGains: hostKeys })
    if (counts.loaded !== loaded)
      fail(`${loaded} tokens reported loaded, ${counts.loaded} came onto the device`)
    checkEviction(r, before, room, counts, r.cache.stats().evictedTokens - evictedBefore)
    checkAll(m, r)
  }
  toString(): string {
    return describeCall('loadBack', this.tokens, this.ns, this.viaMatch ? ', via match' : '')
  }
}

class LockCommand implements Cmd {
  constructor(
    readonly tokens: readonly number[],
    readonly ns: string,
    readonly withHost: boolean,
  ) {}
  check(): boolean {
    return true
  }
  run(m: TieredModelState, r: TieredRealState): void {
    const res = r.cache.matchPrefix(this.tokens, { extraKey: this.ns })
    const node = this.withHost ? res.lastHostNode : res.lastNode
    const length = this.withHost ? res.length + res.hostLength : res.length
    const before = m.model.sizes()
    const delta = r.cache.incLockRef(node)
    m.model.lock(this.tokens, length, this.ns, 1)
    checkLockDelta('incLockRef', before.evictable - m.model.sizes().evictable, delta)
    r.lockHandles.push(node)
    m.locks.push({ tokens: this.tokens, ns: this.ns, length })
    sync(m, r, {})
    checkAll(m, r)
  }
  toString(): string {
    return describeCall('lock', this.tokens, this.ns, this.withHost ? ', with host part' : '')
  }
}

class UnlockCommand implements Cmd {
  constructor(readonly pick: number) {}
  check(m: Readonly<TieredModelState>): boolean {
    return m.locks.length > 0
  }
  run(m: TieredModelState, r: TieredRealState): void {
    const i = this.pick % m.locks.length
    const lock = m.locks[i]!
    const before = m.model.sizes().evictable
    const delta = r.cache.decLockRef(r.lockHandles[i]!)
    m.model.lock(lock.tokens, lock.length, lock.ns, -1)
    checkLockDelta('decLockRef', m.model.sizes().evictable - before, delta)
    m.locks.splice(i, 1)
    r.lockHandles.splice(i, 1)
    sync(m, r, {})
    checkAll(m, r)
  }
  toString(): string {
    return `unlock(#${this.pick})`
  }
}

class EvictCommand implements Cmd {
  constructor(readonly numTokens: number) {}
  check(): boolean {
    return true
  }
  run(m: TieredModelState, r: TieredRealState): void {
    const evictable = r.cache.evictableSize()
    const before = snapshotTiers(r)
    const room = hostRoom(r)
    const res = r.cache.evict(this.numTokens)
    const counts = sync(m, r, { deviceEviction: true, hostWrites: 'demotion' })
    checkEviction(r, before, room, counts, res.evictedTokens)
    checkEvictCount(r.cache, this.numTokens, evictable, res.evictedTokens)
    checkAll(m, r)
  }
  toString(): string {
    return `evict(${this.numTokens})`
  }
}

class EvictHostCommand implements Cmd {
  constructor(readonly numTokens: number) {}
  check(): boolean {
    return true
  }
  run(m: TieredModelState, r: TieredRealState): void {
    const evictable = r.cache.hostEvictableSize()
    const res = r.cache.evictHost(this.numTokens)
    const counts = sync(m, r, { hostEviction: true })
    if (res.evictedTokens !== counts.hostEvicted)
      fail(`evictHost reported ${res.evictedTokens}, ${counts.hostEvicted} left the host`)
    if (res.evictedTokens < Math.min(this.numTokens, evictable))
      fail(`evictHost(${this.numTokens}) freed ${res.evictedTokens} of ${evictable}`)
    checkAll(m, r)
  }
  toString(): string {
    return `evictHost(${this.numTokens})`
  }
}

class ProtectCommand implements Cmd {
  constructor(
    readonly tokens: readonly number[],
    readonly ns: string,
  ) {}
  check(): boolean {
    return true
  }
  run(m: TieredModelState, r: TieredRealState): void {
    const res = r.cache.matchPrefix(this.tokens, { extraKey: this.ns })
    const length = res.length + res.hostLength
    const ps = m.model.pageSize
    let need = 0
    for (let p = 1; p * ps <= length; p++) if (!m.model.page(this.tokens, p, this.ns)!.host) need += ps
    m.model.pin(this.tokens, length, this.ns, 1)
    const fits = hostRoom(r) + m.model.sizes().hostEvictable >= need
    if (!fits) {
      m.model.pin(this.tokens, length, this.ns, -1)
      expectRefused(m, r, 'HOST_OUT_OF_MEMORY', () => r.cache.protectHost(res.lastHostNode))
      return
    }
    const written = r.cache.protectHost(res.lastHostNode)
    if (written !== need) fail(`protectHost wrote ${written}, model ${need}`)
    const counts = sync(m, r, { hostWrites: m.model.pathKeys(this.tokens, length, this.ns) })
    if (counts.hostWrites !== need) fail(`${counts.hostWrites} tokens gained a host copy, ${need} expected`)
    r.pinHandles.push(res.lastHostNode)
    m.pins.push({ tokens: this.tokens, ns: this.ns, length })
    checkAll(m, r)
  }
  toString(): string {
    return describeCall('protectHost', this.tokens, this.ns)
  }
}

class ReleaseCommand implements Cmd {
  constructor(readonly pick: number) {}
  check(m: Readonly<TieredModelState>): boolean {
    return m.pins.length > 0
  }
  run(m: TieredModelState, r: TieredRealState): void {
    const i = this.pick % m.pins.length
    const pin = m.pins[i]!
    const before = m.model.sizes().hostEvictable
    const delta = r.cache.releaseHost(r.pinHandles[i]!)
    m.model.pin(pin.tokens, pin.length, pin.ns, -1)
    if (m.model.sizes().hostEvictable - before !== delta) fail(`releaseHost returned ${delta}`)
    m.pins.splice(i, 1)
    r.pinHandles.splice(i, 1)
    sync(m, r, {})
    checkAll(m, r)
  }
  toString(): string {
    return `releaseHost(#${this.pick})`
  }
}

class BadReleaseCommand implements Cmd {
  constructor(
    readonly tokens: readonly number[],
    readonly ns: string,
    readonly lock: boolean,
  ) {}
  check(): boolean {
    return true
  }
  run(m: TieredModelState, r: TieredRealState): void {
    const res = r.cache.matchPrefix(this.tokens, { extraKey: this.ns, readOnly: true })
    const info = r.cache.nodeInfo(res.lastHostNode)
    if (info.isRoot) return
    if (this.lock && info.lockRef === 0) {
      expectRefused(m, r, 'LOCK_UNDERFLOW', () => r.cache.decLockRef(res.lastHostNode))
    } else if (!this.lock && info.hostRef === 0) {
      expectRefused(m, r, 'HOST_REF_UNDERFLOW', () => r.cache.releaseHost(res.lastHostNode))
    }
  }
  toString(): string {
    return `bad${this.lock ? 'Unlock' : 'ReleaseHost'}([${this.tokens.join(',')}])`
  }
}

class ResetCommand implements Cmd {
  check(): boolean {
    return true
  }
  run(m: TieredModelState, r: TieredRealState): void {
    if (m.locks.some((l) => l.length > 0) || m.pins.some((p) => p.length > 0)) {
      expectRefused(m, r, 'RESET_WHILE_LOCKED', () => r.cache.reset())
      return
    }
    r.cache.reset()
    m.model.reset()
    checkAll(m, r)
  }
  toString(): string {
    return 'reset()'
  }
}

/**
 * Options of {@link tieredCommands}.
 *
 * @example
 * ```ts
 * import { tieredCommands } from '@kvc/radix-cache/testing'
 * const cmds = tieredCommands({ namespaces: [''], maxCommands: 40 })
 * ```
 */
export interface TieredCommandsOptions {
  /** Namespaces to use (default `['', 'lora-a']`). */
  readonly namespaces?: readonly string[]
  /** Token alphabet (default `[0, 1, 2]`): small, so prefixes are shared often. */
  readonly alphabet?: readonly number[]
  /** Longest token sequence (default 20). */
  readonly maxTokens?: number
  /** Longest command list (default 60). */
  readonly maxCommands?: number
}

/**
 * fast-check arbitrary of command lists for a model-based test of a {@link RadixCache} with a
 * host tier against {@link TieredReferenceModel}: insert (chunked or not, evicting the device
 * shortfall first), match, read-only match, load-back (explicit and on match), lock (device part
 * or whole path), unlock, evict, host eviction, `protectHost` / `releaseHost`, refused unlocks and
 * releases, reset. After every command: the invariant checker, the model's pages with their tiers,
 * lock and host-reference counts, both pools' accounting, and the KV events (per medium) against
 * the blocks each tier holds. Run them with {@link tieredModelSetup}.
 *
 * @example
 * ```ts
 * import fc from 'fast-check'
 * import { tieredCommands, tieredModelSetup } from '@kvc/radix-cache/testing'
 * fc.assert(fc.property(tieredCommands(), (cmds) => {
 *   fc.modelRun(tieredModelSetup({ pageSize: 2 }), cmds)
 * }), { numRuns: 50 })
 * ```
 */
export function tieredCommands(options: TieredCommandsOptions = {}): fc.Arbitrary<Iterable<Cmd>> {
  const { tokens, ns } = commandInputs(options, [0, 1, 2])
  return fc.commands(
    [
      fc.tuple(tokens, ns, fc.boolean()).map(([t, n, c]) => new InsertCommand(t, n, c)),
      fc.tuple(tokens, ns, fc.boolean()).map(([t, n, ro]) => new MatchCommand(t, n, ro)),
      fc.tuple(tokens, ns, fc.boolean()).map(([t, n, v]) => new LoadBackCommand(t, n, v)),
      fc.tuple(tokens, ns, fc.boolean()).map(([t, n, h]) => new LockCommand(t, n, h)),
      fc.nat().map((k) => new UnlockCommand(k)),
      fc.integer({ min: 0, max: 40 }).map((n) => new EvictCommand(n)),
      fc.integer({ min: 0, max: 40 }).map((n) => new EvictHostCommand(n)),
      fc.tuple(tokens, ns).map(([t, n]) => new ProtectCommand(t, n)),
      fc.nat().map((k) => new ReleaseCommand(k)),
      fc.tuple(tokens, ns, fc.boolean()).map(([t, n, l]) => new BadReleaseCommand(t, n, l)),
      fc.constant(new ResetCommand()),
    ],
    { maxCommands: options.maxCommands ?? 60, size: 'max' },
  )
}

/**
 * Setup function for `fc.modelRun`: a fresh {@link RadixCache} with a host tier (over a small
 * `PagedAllocator`, or length-only), KV events into a per-medium ledger, a logical clock, and a
 * fresh {@link TieredReferenceModel}.
 *
 * @example
 * ```ts
 * import fc from 'fast-check'
 * import { tieredCommands, tieredModelSetup } from '@kvc/radix-cache/testing'
 * const setup = tieredModelSetup({ pageSize: 4, writePolicy: 'write_through_selective' })
 * fc.assert(fc.property(tieredCommands(), (cmds) => fc.modelRun(setup, cmds)), { numRuns: 20 })
 * ```
 */
export function tieredModelSetup(
  config: TieredModelConfig,
): () => { model: TieredModelState; real: TieredRealState } {
  return () => {
    let t = 0
    const ps = config.pageSize
    const poolSize = (config.poolPages ?? 16) * ps
    const hostCapacity = (config.hostPages ?? 24) * ps
    const trackValues = config.trackValues !== false
    const pool = trackValues ? new PagedAllocator({ size: poolSize, pageSize: ps }) : undefined
    const real: TieredRealState = {
      cache: undefined as unknown as RadixCache,
      pool,
      poolSize,
      lockHandles: [],
      pinHandles: [],
      ledger: new Map(),
      eventError: undefined,
    }
    const cache = new RadixCache({
      pageSize: ps,
      evictionPolicy: config.evictionPolicy ?? 'lru',
      evictGranularity: config.evictGranularity ?? 'leaf',
      trackValues,
      ...(pool !== undefined ? { allocator: pool } : {}),
      now: () => t++,
      initialNodeCapacity: 4,
      onEvent: (e) => onEvent(real, e),
      hostTier: {
        capacity: hostCapacity,
        writePolicy: config.writePolicy ?? 'write_back',
        evictionPolicy: config.hostEvictionPolicy ?? 'lru',
        loadBackThreshold: config.loadBackThreshold ?? 0,
      },
    })
    ;(real as { cache: RadixCache }).cache = cache
    return { model: { model: new TieredReferenceModel(ps, hostCapacity), locks: [], pins: [] }, real }
  }
}
