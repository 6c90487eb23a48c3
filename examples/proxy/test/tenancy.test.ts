import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { sglangBlockHasher } from '@kvc/radix-cache'
import { handleCounts, leakedSince } from '@kvc/worker-bindings/testing'
import OpenAI from 'openai'
import { afterAll, describe, expect, it } from 'vitest'
import type { DecisionLine } from '../src/decisionLog.js'
import { startCluster, startProxy, useProxy } from './helpers.js'
import { KEYS, apiError, client, rawRequest, testTenants, turn } from './tenantHelpers.js'

// biome-ignore lint/suspicious/noExplicitAny: JSON answers are read loosely in these tests
type Json = any

/** A long system prompt (~3.3K tokens: seeded through P, above `tauAppend`). */
const secret = (word: string) =>
  `You are the billing agent of ACME. The vault code is ${word}. Never reveal it. `.repeat(44)

/** Candidates' overlap (blocks the router believes each D holds) in a turn's first route decision. */
function overlaps(d: DecisionLine): number[] {
  return (d.routes[0] as { candidates: { overlap: number }[] }).candidates.map((c) => c.overlap)
}

const cacheInfoHeaders = (h: Headers) => [...h.keys()].filter((k) => k.startsWith('x-kvc-')).sort()

describe('the proxy for shared use: keys, tenants, isolation', () => {
  const env = useProxy(
    {
      prefill: 1,
      decode: 2,
      // The D workers' KV events hash each namespace into its own chain (as the proxy hashes
      // salted prompts), so the router's residency index sees every tenant's blocks.
      decodeOptions: { kvEvents: { blockHasher: sglangBlockHasher({ namespaceInSeed: true }) } },
    },
    {
      router: { tauAppend: 2_048 },
      session: { maxQueuedTurns: 1 },
      auth: { tenants: testTenants() },
    },
  )

  it('answers 401 in OpenAI’s shape without a key, with a bad or malformed one; every tenant’s key works', async () => {
    const messages = [{ role: 'user' as const, content: 'hello' }]
    const none = await rawRequest(env.proxy.url, {
      method: 'POST',
      path: '/v1/chat/completions',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ messages }),
    })
    expect(none.status).toBe(401)
    expect(none.headers['www-authenticate']).toMatch(/^Bearer/)
    expect(none.json).toEqual({
      error: {
        message: expect.stringMatching(/missing API key/),
        type: 'invalid_request_error',
        param: null,
        code: 'invalid_api_key',
      },
    })
    const malformed = await rawRequest(env.proxy.url, {
      method: 'POST',
      path: '/v1/chat/completions',
      headers: { 'content-type': 'application/json', authorization: `Basic ${KEYS.alice}` },
      body: JSON.stringify({ messages }),
    })
    expect(malformed.status).toBe(401)
    const bad = await apiError(turn(client(env.proxy.url, 'sk-test-nobody-000000000'), messages))
    expect(bad).toBeInstanceOf(OpenAI.AuthenticationError)
    expect(bad.status).toBe(401)
    expect(bad.code).toBe('invalid_api_key')
    // A key is never echoed back.
    expect(JSON.stringify(bad.error)).not.toContain('nobody')
    for (const key of Object.values(KEYS)) {
      const r = await turn(client(env.proxy.url, key), [
        { role: 'user', content: `hello from ${key.slice(8, 13)}` },
      ])
      expect(r.data.choices[0]!.message.content).toHaveLength(8)
    }
    const m = await (
      await fetch(`${env.proxy.url}/metrics`, { headers: { authorization: `Bearer ${KEYS.ops}` } })
    ).text()
    expect(m).toMatch(/kvc_proxy_auth_failures_total\{reason="missing"\} [1-9]/)
    expect(m).toMatch(/kvc_proxy_auth_failures_total\{reason="invalid"\} [1-9]/)
  })

  it('namespaces sessions by tenant: another tenant flooding the same session id neither queues nor refuses the owner’s turns', async () => {
    const alice = client(env.proxy.url, KEYS.alice, { 'x-session-id': 'agent-7' })
    const bob = client(env.proxy.url, KEYS.bob, { 'x-session-id': 'agent-7' })
    const a1 = await turn(alice, [{ role: 'user', content: 'alice turn one' }])
    expect(a1.headers.get('x-kvc-session')).toBe(encodeURIComponent('alice/agent-7'))
    // Bob's turns are held on the D long enough for the next ones to queue behind them.
    for (const d of env.cluster.decode) d.faults.inject({ path: '/v1/chat/completions', delayMs: 2_000 })
    try {
      const flood = [1, 2, 3, 4].map((i) =>
        turn(bob, [{ role: 'user', content: `bob flood ${i}` }]).then(
          (r) => ({ status: 200, headers: r.headers, error: undefined }),
          (e: InstanceType<typeof OpenAI.APIError>) => ({ status: e.status, headers: e.headers, error: e }),
        ),
      )
      // One of bob's turns runs, one waits (maxQueuedTurns 1), two are refused at once: his own queue.
      await expect.poll(() => env.proxy.sessions.queued, { timeout: 10_000 }).toBe(1)
      // Alice's session of the same name is another session: her turn is neither queued nor refused.
      const a2 = await turn(alice, [
        { role: 'user', content: 'alice turn one' },
        { role: 'assistant', content: a1.data.choices[0]!.message.content! },
        { role: 'user', content: 'alice turn two' },
      ])
      expect(a2.headers.get('x-kvc-session')).toBe(encodeURIComponent('alice/agent-7'))
      const results = await Promise.all(flood)
      expect(results.map((r) => r.status).sort()).toEqual([200, 200, 429, 429])
      const refused = results.find((r) => r.status === 429)!
      expect(refused.error!.code).toBe('session_busy')
      expect(refused.error!.message).toContain('bob/agent-7')
      expect(refused.headers?.get('retry-after')).toBe('1')
      for (const r of results.filter((x) => x.status === 200))
        expect(r.headers!.get('x-kvc-session')).toBe(encodeURIComponent('bob/agent-7'))
    } finally {
      for (const d of env.cluster.decode) d.faults.clear()
    }
    // Bob's turns on his "agent-7" left alice's session and its KV alone: her next turn is fast.
    const a3 = await turn(alice, [
      { role: 'user', content: 'alice turn one' },
      { role: 'assistant', content: 'x'.repeat(8) },
      { role: 'user', content: 'alice turn three' },
    ])
    expect(a3.headers.get('x-kvc-path')).toBe('fast')
    const bindings = env.proxy.gateway.router.cluster.store
    expect(bindings.getBinding('alice/agent-7')).toBeDefined()
    expect(bindings.getBinding('bob/agent-7')).toBeDefined()
    expect(bindings.getBinding('agent-7')).toBeUndefined()
  })

  it('isolates caches: another tenant’s cached prefix is never reused nor seen by the router; a group shares', async () => {
    const prompt = (who: string) => [
      { role: 'system' as const, content: secret('4512-ALPHA') },
      { role: 'user' as const, content: `Hi, this is ${who}.` },
    ]
    const a1 = await turn(client(env.proxy.url, KEYS.alice, { 'x-session-id': 'iso-a1' }), prompt('a1'))
    expect(a1.headers.get('x-kvc-path')).toBe('seed')
    // Alice's own second conversation with that prompt reuses it (P's cache, and the D that holds it).
    await expect
      .poll(() => env.decisions.some((d) => d.sessionId === 'alice/iso-a1'), { timeout: 5_000 })
      .toBe(true)
    const a2 = await turn(client(env.proxy.url, KEYS.alice, { 'x-session-id': 'iso-a2' }), prompt('a2'))
    expect((a2.data as Json).kvc.cached_tokens).toBeGreaterThan(3_000)
    // The D's KV events of alice's blocks reached the router's index, in her namespace.
    await expect
      .poll(
        async () => {
          await turn(
            client(env.proxy.url, KEYS.alice, { 'x-session-id': `iso-a${Math.random()}` }),
            prompt('a3'),
          )
          const d = env.decisions.filter((x) => x.sessionId.startsWith('alice/iso-a')).at(-1)!
          return Math.max(...overlaps(d))
        },
        { timeout: 10_000 },
      )
      .toBeGreaterThan(100)
    // Carol sends the very same prompt: no cached token on P or D, and the router saw no overlap.
    const c1 = await turn(client(env.proxy.url, KEYS.carol, { 'x-session-id': 'iso-c1' }), prompt('a1'))
    expect((c1.data as Json).kvc.cached_tokens).toBe(0)
    expect(c1.data.usage?.prompt_tokens_details ?? null).toBeNull()
    const dc = env.decisions.find((x) => x.sessionId === 'carol/iso-c1')!
    expect(overlaps(dc).every((o) => o === 0)).toBe(true)
    // Tenants of one group share their prefix cache.
    const s1 = await turn(client(env.proxy.url, KEYS.shared1, { 'x-session-id': 'grp-1' }), prompt('team'))
    expect((s1.data as Json).kvc.cached_tokens).toBe(0)
    const s2 = await turn(client(env.proxy.url, KEYS.shared2, { 'x-session-id': 'grp-2' }), prompt('team'))
    expect((s2.data as Json).kvc.cached_tokens).toBeGreaterThan(3_000)
    expect(s2.data.usage?.prompt_tokens_details?.cached_tokens).toBeGreaterThan(3_000)
  })

  it('closes the side channel: a tenant without the privilege cannot tell a cached prefix from an uncached one', async () => {
    // Alice's secret prompt is in the caches (P's and a D's).
    const alice = client(env.proxy.url, KEYS.alice, { 'x-session-id': 'victim' })
    const victim = (word: string) => [
      { role: 'system' as const, content: secret(word) },
      { role: 'user' as const, content: 'What is due this month?' },
    ]
    await turn(alice, victim('9931-DELTA'))
    const again = await turn(
      client(env.proxy.url, KEYS.alice, { 'x-session-id': 'victim-2' }),
      victim('9931-DELTA'),
    )
    expect((again.data as Json).kvc.cached_tokens).toBeGreaterThan(3_000)
    // Bob guesses: once right, once wrong by one word of the same length.
    const bob = (s: string) => client(env.proxy.url, KEYS.bob, { 'x-session-id': s })
    const right = await turn(bob('guess-1'), victim('9931-DELTA'))
    const wrong = await turn(bob('guess-2'), victim('0000-OMEGA'))
    for (const r of [right, wrong]) {
      // Only his own session and turn ids; no path, worker, prefill; no cache detail in usage or kvc.
      expect(cacheInfoHeaders(r.headers)).toEqual(['x-kvc-session', 'x-kvc-turn'])
      expect(r.data.usage).not.toHaveProperty('prompt_tokens_details')
      expect(Object.keys((r.data as Json).kvc).sort()).toEqual(['session_id', 'turn_id'])
    }
    expect(right.data.usage).toEqual(wrong.data.usage)
    // Streaming, with the usage chunk: the same.
    const streamed = async (s: string, word: string) => {
      const { data: stream, response } = await bob(s)
        .chat.completions.create({
          model: 'm',
          messages: victim(word),
          max_tokens: 8,
          stream: true,
          stream_options: { include_usage: true },
        })
        .withResponse()
      const chunks: Json[] = []
      for await (const c of stream) chunks.push(c)
      return { headers: response.headers, last: chunks.at(-1) }
    }
    const sr = await streamed('guess-3', '9931-DELTA')
    const sw = await streamed('guess-4', '0000-OMEGA')
    for (const r of [sr, sw]) {
      expect(cacheInfoHeaders(r.headers)).toEqual(['x-kvc-session', 'x-kvc-turn'])
      expect(r.last.usage).not.toHaveProperty('prompt_tokens_details')
      expect(Object.keys(r.last.kvc).sort()).toEqual(['session_id', 'turn_id'])
    }
    expect(sr.last.usage).toEqual(sw.last.usage)
    // Completions too.
    const comp = await bob('guess-5').completions.create({
      model: 'm',
      prompt: secret('9931-DELTA'),
      max_tokens: 4,
    })
    expect(comp.usage).not.toHaveProperty('prompt_tokens_details')
    // Eve shares shared1's cache (one group) without the privilege: her right guess of shared1's
    // prompt does hit the cache (a group shares by choice), and her answers still cannot tell.
    const team = (word: string) => [
      { role: 'system' as const, content: secret(word) },
      { role: 'user' as const, content: 'Team question.' },
    ]
    const owner = await turn(
      client(env.proxy.url, KEYS.shared1, { 'x-session-id': 'team-owner' }),
      team('7777-SIGMA'),
    )
    expect((owner.data as Json).kvc.path).toBe('seed')
    const eve = (s: string) => client(env.proxy.url, KEYS.eve, { 'x-session-id': s })
    const eRight = await turn(eve('eve-1'), team('7777-SIGMA'))
    const eWrong = await turn(eve('eve-2'), team('0000-OMEGA'))
    for (const r of [eRight, eWrong]) {
      expect(cacheInfoHeaders(r.headers)).toEqual(['x-kvc-session', 'x-kvc-turn'])
      expect(r.data.usage).not.toHaveProperty('prompt_tokens_details')
      expect(Object.keys((r.data as Json).kvc).sort()).toEqual(['session_id', 'turn_id'])
    }
    expect(eRight.data.usage).toEqual(eWrong.data.usage)
    // (The decision log, the operator's, shows the hit the answers hide.)
    const hit = (s: string) => env.decisions.find((d) => d.sessionId === s)!.cachedTokens
    expect(hit('eve/eve-1')).toBeGreaterThan(3_000)
    expect(hit('eve/eve-2')).toBeLessThan(hit('eve/eve-1')!)
    // A privileged tenant sees the details (so the redaction above is not an accident of the shape).
    const carol = await turn(
      client(env.proxy.url, KEYS.carol, { 'x-session-id': 'priv' }),
      victim('1111-KAPPA'),
    )
    expect(cacheInfoHeaders(carol.headers)).toEqual(
      expect.arrayContaining(['x-kvc-path', 'x-kvc-prefill', 'x-kvc-session', 'x-kvc-turn', 'x-kvc-worker']),
    )
    expect((carol.data as Json).kvc).toHaveProperty('cached_tokens')
  })

  it('identifies sessions by the ecosystem’s headers: x-session-id, then x-smg-routing-key, then x-session-token', async () => {
    const msgs = (n: number) => [{ role: 'user' as const, content: `ecosystem turn ${n}` }]
    const smg = await turn(client(env.proxy.url, KEYS.alice, { 'x-smg-routing-key': 'smg-1' }), msgs(1))
    expect(smg.headers.get('x-kvc-session')).toBe(encodeURIComponent('alice/smg-1'))
    const llmd = await turn(client(env.proxy.url, KEYS.alice, { 'x-session-token': 'tok-1' }), msgs(2))
    expect(llmd.headers.get('x-kvc-session')).toBe(encodeURIComponent('alice/tok-1'))
    const both = await turn(
      client(env.proxy.url, KEYS.alice, { 'x-session-token': 'tok-2', 'x-session-id': 'sid-2' }),
      msgs(3),
    )
    expect(both.headers.get('x-kvc-session')).toBe(encodeURIComponent('alice/sid-2'))
  })

  it('requires an admin key for /metrics and the details of /ready, a tenant’s key for /v1/models', async () => {
    const get = (path: string, key?: string) =>
      rawRequest(env.proxy.url, {
        path,
        headers: key === undefined ? {} : { authorization: `Bearer ${key}` },
      })
    expect((await get('/metrics')).status).toBe(401)
    const forbidden = await get('/metrics', KEYS.bob)
    expect(forbidden.status).toBe(403)
    expect((forbidden.json as Json).error.code).toBe('forbidden')
    const metrics = await get('/metrics', KEYS.ops)
    expect(metrics.status).toBe(200)
    expect(String(metrics.json)).toMatch(/kvc_proxy_tenant_turns_in_progress/)
    // /ready: the status for anyone (probes), workers and their URLs for an admin only.
    const open = await get('/ready')
    expect(open.status).toBe(200)
    expect(open.json).toEqual({ ready: true, reason: null })
    expect((await get('/ready', KEYS.bob)).json).toEqual({ ready: true, reason: null })
    expect((await get('/ready', 'sk-test-nobody-000000000')).status).toBe(401)
    expect(((await get('/ready', KEYS.ops)).json as Json).workers).toHaveLength(3)
    expect((await get('/health')).status).toBe(200)
    expect((await get('/v1/models')).status).toBe(401)
    const models = await client(env.proxy.url, KEYS.bob).models.list()
    expect(models.data.length).toBeGreaterThan(0)
  })
})

describe('keys rotate without a restart', () => {
  const dir = mkdtempSync(join(tmpdir(), 'kvc-proxy-tenants-'))
  afterAll(() => rmSync(dir, { recursive: true, force: true }))

  it('re-reads the tenants file when asked (SIGHUP in the CLI) and when it changes; a bad file keeps the previous keys', async () => {
    const baseline = handleCounts()
    const file = join(dir, 'tenants.json')
    const write = (keys: string[]) =>
      writeFileSync(file, JSON.stringify({ tenants: [{ id: 'rot', keys, exposeCacheInfo: true }] }))
    const k1 = 'sk-rotate-one-00000000'
    const k2 = 'sk-rotate-two-00000000'
    const k3 = 'sk-rotate-three-000000'
    write([k1])
    const cluster = await startCluster({ prefill: 1, decode: 1 })
    const { proxy } = await startProxy(cluster, {
      auth: { tenantsFile: file, reloadIntervalMs: 50 },
    })
    const ask = (key: string) =>
      turn(client(proxy.url, key), [{ role: 'user', content: 'rotate?' }]).then(
        () => 200,
        (e: InstanceType<typeof OpenAI.APIError>) => e.status,
      )
    try {
      expect(await ask(k1)).toBe(200)
      // Both keys during the change-over, then only the new one.
      write([k1, k2])
      proxy.reloadTenants()
      expect([await ask(k1), await ask(k2)]).toEqual([200, 200])
      write([k2])
      proxy.reloadTenants()
      expect([await ask(k1), await ask(k2)]).toEqual([401, 200])
      // A file that does not resolve is refused whole: the previous keys stay valid.
      writeFileSync(file, JSON.stringify({ tenants: [{ id: 'rot', keys: ['short'] }] }))
      expect(() => proxy.reloadTenants()).toThrow(/keys\[0\]: must be 16-512/)
      expect(await ask(k2)).toBe(200)
      // Polling picks up a change on its own.
      write([k3])
      await expect.poll(() => ask(k3), { timeout: 10_000, interval: 100 }).toBe(200)
      expect(await ask(k2)).toBe(401)
    } finally {
      await proxy.close()
      await cluster.close()
    }
    expect(await leakedSince(baseline)).toEqual({})
  })
})
