import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { PagedAllocator, RadixCacheError } from '../src/index.js'

/**
 * The naive allocator: the per-slot algorithm the pool started with (every slot validated and
 * mapped to its page one by one). `PagedAllocator` works by page and by run of slots; it must
 * hand out the same slots, refuse the same calls with the same code, and free the same pages.
 */
class NaiveAllocator {
  readonly free: number[] = []
  readonly isFree: boolean[]
  constructor(
    readonly size: number,
    readonly pageSize: number,
  ) {
    const pages = size / pageSize
    this.isFree = new Array<boolean>(pages).fill(true)
    for (let i = 0; i < pages; i++) this.free.push(pages - 1 - i)
  }

  alloc(n: number): number[] {
    if (!Number.isInteger(n) || n < 0) throw code('INVALID_OPTION')
    const pages = Math.ceil(n / this.pageSize)
    if (pages > this.free.length) throw code('OUT_OF_MEMORY')
    const out: number[] = []
    for (let p = 0; p < pages; p++) {
      const page = this.free.pop()!
      this.isFree[page] = false
      for (let j = 0; j < this.pageSize && out.length < n; j++) out.push(page * this.pageSize + j)
    }
    return out
  }

  allocExtend(lastLoc: number, n: number): number[] {
    if (!Number.isInteger(n) || n < 0) throw code('INVALID_OPTION')
    if (lastLoc === -1) return this.alloc(n)
    this.#check(lastLoc)
    const ps = this.pageSize
    if (this.isFree[Math.floor(lastLoc / ps)]) throw code('INVALID_INDEX')
    const inPage = Math.min(n, ps - 1 - (lastLoc % ps))
    const fresh = n - inPage > 0 ? this.alloc(n - inPage) : []
    const out: number[] = []
    for (let j = 0; j < inPage; j++) out.push(lastLoc + 1 + j)
    return [...out, ...fresh]
  }

  release(indices: readonly number[]): void {
    for (const idx of indices) {
      this.#check(idx)
      if (this.isFree[Math.floor(idx / this.pageSize)]) throw code('DOUBLE_FREE')
    }
    for (const idx of indices) {
      const page = Math.floor(idx / this.pageSize)
      if (this.isFree[page]) continue
      this.isFree[page] = true
      this.free.push(page)
    }
  }

  allocPages(n: number): number[] {
    if (!Number.isInteger(n) || n < 0) throw code('INVALID_OPTION')
    return this.alloc(n * this.pageSize)
      .filter((_, i) => i % this.pageSize === 0)
      .map((s) => s / this.pageSize)
  }

  freePages(pages: readonly number[]): void {
    const seen = new Set<number>()
    for (const p of pages) {
      if (!Number.isInteger(p) || p < 0 || p >= this.isFree.length) throw code('INVALID_INDEX')
      if (this.isFree[p] || seen.has(p)) throw code('DOUBLE_FREE')
      seen.add(p)
    }
    for (const p of pages) {
      this.isFree[p] = true
      this.free.push(p)
    }
  }

  #check(idx: number): void {
    if (!Number.isInteger(idx) || idx < 0 || idx >= this.size) throw code('INVALID_INDEX')
  }
}

function code(c: string): Error {
  return Object.assign(new Error(c), { code: c })
}

function outcome<T>(f: () => T): { ok: T } | { code: string } {
  try {
    return { ok: f() }
  } catch (e) {
    if (e instanceof RadixCacheError) return { code: e.code }
    const c = (e as { code?: string }).code
    if (c !== undefined) return { code: c }
    throw e
  }
}

type Op =
  | { kind: 'alloc'; n: number }
  | { kind: 'extend'; owner: number; n: number }
  | { kind: 'free'; owner: number; from: number; to: number }
  | { kind: 'freeMixed'; owners: number[]; junk: number }
  | { kind: 'freeOf'; indices: number[] }
  | { kind: 'allocPages'; n: number }
  | { kind: 'freePages'; owner: number; extra: number[] }

const op: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ kind: fc.constant('alloc' as const), n: fc.nat(40) }),
  fc.record({ kind: fc.constant('extend' as const), owner: fc.nat(20), n: fc.nat(20) }),
  fc.record({ kind: fc.constant('free' as const), owner: fc.nat(20), from: fc.nat(40), to: fc.nat(40) }),
  fc.record({
    kind: fc.constant('freeMixed' as const),
    owners: fc.array(fc.nat(20), { maxLength: 3 }),
    junk: fc.integer({ min: -2, max: 80 }),
  }),
  fc.record({
    kind: fc.constant('freeOf' as const),
    indices: fc.array(fc.integer({ min: -1, max: 70 }), { maxLength: 12 }),
  }),
  fc.record({ kind: fc.constant('allocPages' as const), n: fc.nat(6) }),
  fc.record({
    kind: fc.constant('freePages' as const),
    owner: fc.nat(20),
    extra: fc.array(fc.integer({ min: -1, max: 70 }), { maxLength: 2 }),
  }),
)

describe('PagedAllocator (slots, runs and whole pages) agrees with the naive per-slot allocator', () => {
  for (const [size, pageSize] of [
    [64, 1],
    [64, 4],
    [60, 5],
    [64, 16],
  ] as const) {
    it(`size ${size}, pageSize ${pageSize}`, () => {
      fc.assert(
        fc.property(fc.array(op, { maxLength: 60 }), (ops) => {
          const real = new PagedAllocator({ size, pageSize })
          const naive = new NaiveAllocator(size, pageSize)
          // Slot sequences handed out and not freed yet (the same in both).
          const owned: number[][] = []
          // Page lists handed out by allocPages and not freed yet.
          const pageOwned: number[][] = []
          for (const o of ops) {
            let a: ReturnType<typeof outcome<number[]>>
            let b: ReturnType<typeof outcome<number[]>>
            if (o.kind === 'allocPages') {
              a = outcome(() => Array.from(real.allocPages(o.n)))
              b = outcome(() => naive.allocPages(o.n))
              if ('ok' in b && b.ok.length > 0) pageOwned.push(b.ok)
            } else if (o.kind === 'freePages') {
              const list = pageOwned.length === 0 ? [] : pageOwned[o.owner % pageOwned.length]!
              const pages = [...list, ...o.extra]
              a = outcome(() => real.freePages(Int32Array.from(pages)) ?? [])
              b = outcome(() => {
                naive.freePages(pages)
                return []
              })
              if ('ok' in b) {
                const freed = new Set(pages)
                for (let i = pageOwned.length - 1; i >= 0; i--) {
                  if (pageOwned[i]!.some((p) => freed.has(p))) pageOwned.splice(i, 1)
                }
                for (let i = owned.length - 1; i >= 0; i--) {
                  if (owned[i]!.some((x) => freed.has(Math.floor(x / pageSize)))) owned.splice(i, 1)
                }
              }
            } else if (o.kind === 'alloc') {
              a = outcome(() => Array.from(real.alloc(o.n)))
              b = outcome(() => naive.alloc(o.n))
              if ('ok' in b && b.ok.length > 0) owned.push(b.ok)
            } else if (o.kind === 'extend') {
              const seq = owned.length === 0 ? [] : owned[o.owner % owned.length]!
              const last = seq.length === 0 ? -1 : seq[seq.length - 1]!
              // Odd owners extend through allocExtendInto, into a row with a margin on each side.
              a = outcome(() => {
                if (o.owner % 2 === 0) return Array.from(real.allocExtend(last, o.n))
                const row = new Int32Array(o.n + 4).fill(-5)
                try {
                  real.allocExtendInto(last, o.n, row, 2)
                } catch (e) {
                  if (row.some((x) => x !== -5)) throw new Error('a refused allocExtendInto wrote')
                  throw e
                }
                if (row[0] !== -5 || row[1] !== -5 || row[o.n + 2] !== -5 || row[o.n + 3] !== -5)
                  throw new Error('allocExtendInto wrote outside its range')
                return Array.from(row.subarray(2, 2 + o.n))
              })
              b = outcome(() => naive.allocExtend(last, o.n))
              if ('ok' in b) seq.push(...b.ok)
              if ('ok' in b && seq.length > 0 && owned.indexOf(seq) < 0) owned.push(seq)
            } else {
              let idx: number[]
              if (o.kind === 'free') {
                if (owned.length === 0) continue
                const k = o.owner % owned.length
                const seq = owned[k]!
                const lo = Math.min(o.from, o.to) % (seq.length + 1)
                const hi = Math.max(lo, Math.max(o.from, o.to) % (seq.length + 1))
                idx = seq.slice(lo, hi)
              } else if (o.kind === 'freeMixed') {
                idx = o.owners.flatMap((k) => (owned.length === 0 ? [] : owned[k % owned.length]!))
                idx.push(o.junk)
              } else idx = o.indices
              a = outcome(() => real.free(Int32Array.from(idx)) ?? [])
              b = outcome(() => {
                naive.release(idx)
                return []
              })
              if ('ok' in b) {
                // Freed pages drop whole owned sequences that touch them (their slots are gone).
                const freed = new Set(idx.map((i) => Math.floor(i / pageSize)))
                for (let i = owned.length - 1; i >= 0; i--) {
                  if (owned[i]!.some((s) => freed.has(Math.floor(s / pageSize)))) owned.splice(i, 1)
                }
                for (let i = pageOwned.length - 1; i >= 0; i--) {
                  if (pageOwned[i]!.some((p) => freed.has(p))) pageOwned.splice(i, 1)
                }
              }
            }
            expect(a).toEqual(b)
            expect(real.availableSize()).toBe(naive.free.length * pageSize)
            expect(real.freePageCount()).toBe(naive.free.length)
          }
          for (let s = 0; s < size; s++) expect(real.isFree(s)).toBe(naive.isFree[Math.floor(s / pageSize)])
        }),
        { numRuns: 300 },
      )
    })
  }

  it('frees a long run page by page and refuses a run that crosses into a free page unchanged', () => {
    const pool = new PagedAllocator({ size: 64, pageSize: 16 })
    const a = pool.alloc(40)
    expect(pool.availableSize()).toBe(16)
    pool.free(a.subarray(16, 32))
    expect(pool.availableSize()).toBe(32)
    // Slots 0..39 run through page 1, which is free now: refused, pages 0 and 2 stay allocated.
    expect(outcome(() => pool.free(a))).toEqual({ code: 'DOUBLE_FREE' })
    expect(pool.availableSize()).toBe(32)
    pool.free(a.subarray(0, 16))
    pool.free(a.subarray(32))
    expect(pool.availableSize()).toBe(64)
  })
})
