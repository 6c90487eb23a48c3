import { SglangClient } from '@kvc/worker-bindings'
import { handleCounts, leakedSince } from '@kvc/worker-bindings/testing'
import { describe, expect, it } from 'vitest'
import { createSglangEmulator } from '../src/index.js'

/**
 * The prototype's failure case E3 (docs/design/prototype.md#streaming-session-correction-crash)
 * against the emulator: a session with 43,459 committed tokens, then a turn carrying only its
 * 6,648 new tokens. Classic sessions (`session_params`) rebuild the whole prompt from the
 * session's history; a tagged session (`session_id`) whose turn does not extend what it committed
 * is served as a plain request. Either way the answer reports a consistent prefix (cached tokens
 * below the prompt, the rest computed), and the pool's accounting identity holds afterwards.
 */
const COMMITTED = 43_459
const NEW = 6_648
const OUTPUT = 10
const ids = (from: number, n: number) => Array.from({ length: n }, (_, i) => 3 + ((from + i) % 200))

describe('E3 against the emulator: consistent extend lengths, the pool balanced', () => {
  const cases: [number, number | undefined][] = []
  for (const pageSize of [16, 1]) for (const chunk of [undefined, 4_096]) cases.push([pageSize, chunk])

  it.each(cases)('page size %i, chunked prefill %s', async (pageSize, chunk) => {
    const baseline = handleCounts()
    const emu = await createSglangEmulator({
      capacityTokens: 131_072,
      contextLength: 131_072,
      pageSize,
      timing: { scale: 0 },
      kvEvents: false,
      ...(chunk === undefined ? {} : { chunkedPrefillSize: chunk }),
    })
    try {
      const c = new SglangClient({ baseURL: emu.url })
      const meta = (r: unknown) =>
        (r as { meta_info: { prompt_tokens: number; cached_tokens: number } }).meta_info
      // Classic session: turn 1 commits 43,459 tokens (prompt + output − 1).
      const sid = await c.openSession({ capacity_of_str_len: 1_000_000 })
      const first = COMMITTED - OUTPUT + 1
      const t1 = meta(
        await c.generate({
          input_ids: ids(0, first),
          session_params: { id: sid },
          sampling_params: { max_new_tokens: OUTPUT },
        }),
      )
      expect(t1.prompt_tokens).toBe(first)
      expect(emu.sessionCache.getSessionStatus(sid)?.committedTokens).toBe(COMMITTED)
      // The E3 turn: only its new tokens; the server rebuilds the prompt from the history.
      const t2 = meta(
        await c.generate({
          input_ids: ids(100_000, NEW),
          session_params: { id: sid },
          sampling_params: { max_new_tokens: OUTPUT },
        }),
      )
      expect(t2.prompt_tokens).toBe(COMMITTED + 1 + NEW)
      expect(t2.cached_tokens).toBeLessThanOrEqual(COMMITTED)
      expect(t2.cached_tokens).toBeGreaterThanOrEqual(COMMITTED - (pageSize - 1))
      expect(t2.prompt_tokens - t2.cached_tokens).toBeGreaterThanOrEqual(NEW)

      // A tagged session: the same history, then a turn of only the new tokens (it does not extend
      // what the session committed: a plain request, its own tokens cached or computed).
      const tag = 'tagged-1000195'
      const history = ids(7, first)
      await c.generate({ input_ids: history, session_id: tag, sampling_params: { max_new_tokens: OUTPUT } })
      expect(emu.sessionCache.getSessionStatus(tag)?.committedTokens).toBe(COMMITTED)
      const t4 = meta(
        await c.generate({
          input_ids: ids(300_000, NEW),
          session_id: tag,
          sampling_params: { max_new_tokens: OUTPUT },
        }),
      )
      expect(t4.prompt_tokens).toBe(NEW)
      expect(t4.cached_tokens).toBeLessThan(NEW)
      // The session's KV is untouched by the plain request.
      expect(emu.sessionCache.getSessionStatus(tag)?.committedTokens).toBe(COMMITTED)

      const s = emu.stats()
      expect(s.balanced).toBe(true)
      expect(emu.sessionCache.poolAccounting()).toMatchObject({ balanced: true, requestOwned: 0 })
    } finally {
      await emu.close()
    }
    expect(await leakedSince(baseline)).toEqual({})
  })

  it('refuses a chunk size below the page size, by name', async () => {
    await expect(createSglangEmulator({ pageSize: 16, chunkedPrefillSize: 8 })).rejects.toThrow(
      /chunkedPrefillSize must be an integer >= pageSize/,
    )
  })
})
