import { computeBlockHashes, sglangBlockHasher } from '@kvc/radix-cache'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { fakeTokenize } from '@kvc/sglang-emulator'
import { resolveConfig } from '../src/config.js'
import type { ParsedRequest } from '../src/openai.js'
import { promptTokensAsync } from '../src/promptTokens.js'
import { SessionTable } from '../src/sessions.js'
import { BlockHashCache, createTokenizer } from '../src/tokens.js'
import { chat, useProxy } from './helpers.js'

const config = (session: Record<string, number>) =>
  resolveConfig({ workers: [{ id: 'd0', role: 'decode', url: 'http://127.0.0.1:1' }], session })

const prompt = (seed: number, n: number) =>
  Uint32Array.from({ length: n }, (_, i) => (seed * 7919 + i * 31) % 50_000)

describe('BlockHashCache keeps hashes, not prompts, and gives the same ids as hashing from scratch', () => {
  it('matches computeBlockHashes over any sequence of prompts (extended, edited, cut, unrelated)', async () => {
    const hasher = sglangBlockHasher()
    const step = fc.oneof(
      fc.record({ kind: fc.constant('extend' as const), n: fc.integer({ min: 0, max: 200 }) }),
      fc.record({ kind: fc.constant('edit' as const), at: fc.nat(), value: fc.nat({ max: 1000 }) }),
      fc.record({ kind: fc.constant('cut' as const), n: fc.nat({ max: 300 }) }),
      fc.record({ kind: fc.constant('fresh' as const), n: fc.integer({ min: 0, max: 300 }) }),
    )
    await fc.assert(
      fc.asyncProperty(fc.array(step, { maxLength: 12 }), fc.boolean(), async (steps, sliced) => {
        const cache = new BlockHashCache(16)
        let t = new Uint32Array(0)
        let seed = 1
        for (const s of steps) {
          if (s.kind === 'extend') {
            const next = new Uint32Array(t.length + s.n)
            next.set(t)
            next.set(prompt(seed++, s.n), t.length)
            t = next
          } else if (s.kind === 'edit' && t.length > 0) {
            t = t.slice()
            t[s.at % t.length] = s.value
          } else if (s.kind === 'cut') t = t.slice(0, Math.max(0, t.length - s.n))
          else if (s.kind === 'fresh') t = prompt(seed++, s.n)
          const want = computeBlockHashes(hasher, t, 16)
          const got = sliced ? await cache.blocksAsync(t, undefined, 2) : cache.blocks(t)
          expect(got).toEqual(want)
          // Invariant: about 48 bytes per page (digest, id, fingerprint), nothing per token.
          expect(cache.bytes).toBe(Math.floor(t.length / 16) * (32 + 8 + 8))
        }
      }),
      { seed: 18, numRuns: 60 },
    )
  })
})

describe('SessionTable is bounded by count and bytes, evicting the least recently used idle session', () => {
  it('agrees with a naive LRU model over random turns (fc.commands-style run)', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.record({ id: fc.integer({ min: 0, max: 9 }), n: fc.integer({ min: 0, max: 400 }) }), {
          minLength: 1,
          maxLength: 40,
        }),
        fc.integer({ min: 1, max: 6 }),
        async (turns, maxSessions) => {
          const forgotten: string[] = []
          const table = new SessionTable(config({ maxSessions }), 16, (id) => forgotten.push(id))
          // The model: ids in least-recently-used order.
          let model: string[] = []
          const modelForgotten: string[] = []
          try {
            for (const { id: k, n } of turns) {
              const id = `s${k}`
              await table.run(id, async () => {
                await table.hashBlocks(id, prompt(k, n))
              })
              model = [...model.filter((x) => x !== id), id]
              while (model.length > maxSessions) modelForgotten.push(model.shift()!)
              expect(table.sessionIds()).toEqual(model)
              expect(forgotten).toEqual(modelForgotten)
              expect(table.size).toBeLessThanOrEqual(maxSessions)
              expect(table.evictions).toBe(modelForgotten.length)
            }
          } finally {
            table.close()
          }
        },
      ),
      { seed: 18, numRuns: 80 },
    )
  })

  it('evicts by bytes, never a session with a turn running, and counts what it holds', async () => {
    const forgotten: string[] = []
    // Room for about two sessions of 4,096 tokens (256 pages × 48 bytes + overhead each).
    const table = new SessionTable(config({ maxTableBytes: 30_000 }), 16, (id) => forgotten.push(id))
    try {
      let release!: () => void
      const busy = table.run('busy', async () => {
        await table.hashBlocks('busy', prompt(1, 4096))
        await new Promise<void>((r) => {
          release = r
        })
      })
      await new Promise((r) => setTimeout(r, 5))
      for (const id of ['a', 'b', 'c']) await table.run(id, () => table.hashBlocks(id, prompt(2, 4096)))
      // 'busy' was the least recently used, but its turn runs: 'a' and 'b' went instead.
      expect(forgotten).toEqual(['a', 'b'])
      expect(table.sessionIds()).toEqual(['busy', 'c'])
      expect(table.bytes).toBeLessThanOrEqual(30_000)
      release()
      await busy
      await table.run('d', () => table.hashBlocks('d', prompt(3, 4096)))
      expect(forgotten).toEqual(['a', 'b', 'busy'])
      table.drop('d')
      table.drop('c')
      expect(table.bytes).toBe(0)
      expect(table.size).toBe(0)
    } finally {
      table.close()
    }
  })

  it('refuses caps that make no sense', () => {
    expect(() => config({ maxSessions: 0 })).toThrow(/session\.maxSessions/)
    expect(() => config({ maxTableBytes: 10 })).toThrow(/session\.maxTableBytes/)
  })
})

describe('the proxy’s session table under many one-shot sessions', () => {
  const env = useProxy({ prefill: 1, decode: 2 }, { session: { maxSessions: 50 } })

  it('stays within session.maxSessions, keeps a few KB per session, and counts evictions', async () => {
    const text = 'a five-hundred character prompt '.repeat(16).slice(0, 500)
    for (let i = 0; i < 150; i += 10) {
      const batch = Array.from({ length: 10 }, (_, k) =>
        chat(env.proxy.url, `one-shot-${i + k}`, [{ role: 'user', content: `${i + k} ${text}` }]),
      )
      for (const r of await Promise.all(batch)) expect(r.status).toBe(200)
    }
    const t = env.proxy.sessions
    expect(t.size).toBe(50)
    expect(t.evictions).toBe(100)
    // Hashes of ~33 pages each, not ~530 tokens (55 KB per session was measured before).
    expect(t.bytes / t.size).toBeLessThan(4_096)
    const m = await (await fetch(`${env.proxy.url}/metrics`)).text()
    expect(m).toMatch(/^kvc_proxy_session_evictions_total 100$/m)
    expect(m).toMatch(/^kvc_proxy_sessions 50$/m)
    // The evicted sessions' bindings are gone from the router too.
    expect(env.proxy.gateway.router.cluster.store.bindingCount()).toBeLessThanOrEqual(50)
  })
})

const sameTokens = (a: Uint32Array, b: Uint32Array): boolean =>
  a.length === b.length &&
  Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength))

describe('sliced tokenization gives the tokenizer’s own ids', () => {
  it('promptTokensAsync equals PromptTokenizer.chat / .text in both modes, and the emulator mode equals fakeTokenize', async () => {
    const text = fc.string({ unit: fc.constantFrom('a', 'é', '😀', ' ', '\n', 'z'), maxLength: 200_000 })
    await fc.assert(
      fc.asyncProperty(text, fc.constantFrom('emulator' as const, 'estimate' as const), async (s, mode) => {
        const tk = createTokenizer(mode)
        const messages = [{ role: 'user', content: s }]
        const parsed = { messages, promptText: undefined, promptIds: undefined } as unknown as ParsedRequest
        expect(await promptTokensAsync(parsed, tk)).toEqual(tk.chat(messages))
        const asText = {
          messages: undefined,
          promptText: s,
          promptIds: undefined,
        } as unknown as ParsedRequest
        expect(await promptTokensAsync(asText, tk)).toEqual(tk.text(s))
        if (mode === 'emulator') expect(Array.from(tk.text(s))).toEqual(fakeTokenize(s))
      }),
      { seed: 18, numRuns: 25 },
    )
    // Several slices for sure, a surrogate pair across a slice boundary included.
    for (const mode of ['emulator', 'estimate'] as const) {
      const s = `x${'é😀ab'.repeat(60_000)}`
      const tk = createTokenizer(mode)
      const asText = { messages: undefined, promptText: s, promptIds: undefined } as unknown as ParsedRequest
      expect(sameTokens(await promptTokensAsync(asText, tk), tk.text(s))).toBe(true)
      if (mode === 'emulator') expect(sameTokens(tk.text(s), Uint32Array.from(fakeTokenize(s)))).toBe(true)
    }
  })
})
