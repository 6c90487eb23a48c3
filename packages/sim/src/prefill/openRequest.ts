import { SessionCacheError, type SessionRequest } from '../adapters/sessionCache.js'
import type { Turn } from '../cluster/turn.js'
import type { SimWorker } from '../cluster/worker.js'
import type { RunConfig } from '../config/runConfig.js'

/** The session cache ran out of KV memory. */
export function isOom(err: unknown): boolean {
  return err instanceof SessionCacheError && err.code === 'OUT_OF_MEMORY'
}

/**
 * Create a request for `turn` on `w` (a prefill, or a seed landing on its D): match its prompt,
 * make room, allocate its new tokens; undefined (and no change) when `w` is short of KV memory.
 * `cached` is in tokens (the cache counts units: see `KvGeometry`).
 */
export function openRequest(
  config: RunConfig,
  w: SimWorker,
  turn: Turn,
  withSession: boolean,
  reserve: number,
): { req: SessionRequest; cached: number; loaded: number } | undefined {
  const cache = w.cache!
  const g = config.geometry
  const prompt = turn.prompt!
  const sid = withSession ? turn.key : undefined
  // Room for the output it decodes here, so decoding does not grow its buffers.
  const maxNewTokens = g.units(reserve)
  let req: SessionRequest
  try {
    req = admit(cache, turn, prompt, sid, maxNewTokens)
  } catch (err) {
    // The session's slot on this worker diverged from the prompt (another D served it since,
    // or the trace's next prompt does not extend the last output): release it and start over.
    if (!(err instanceof SessionCacheError) || sid === undefined) throw err
    const st = cache.getSessionStatus(sid)
    if (st?.active) throw err
    if (st !== undefined) cache.releaseSession(sid)
    req = admit(cache, turn, prompt, sid, maxNewTokens)
  }
  const cachedUnits = matched.length
  const loadedUnits = matched.loadedTokens
  const cached = g.tokens(cachedUnits)
  const newTokens = g.promptTokens(prompt.length) - cached
  // Admission to the GPU (SGLang's scheduler): the prompt and the outputs of every admitted
  // request must fit in free + evictable memory; idle sessions give up their locks first, least
  // recently used first (`release=pressure`), or not at all (`release=reaper`: only the periodic
  // sweep releases them, so the request waits; two pages of slack per request keep the page
  // rounding of its decode from reaching the session cache's own release fallback). Nothing is
  // evicted yet.
  const lazy = config.reaper !== undefined && w.retention === 'sessions'
  const need = newTokens + reserve + w.reservedOutputs + (lazy ? 2 * config.pageSize : 0)
  if (g.tokens(w.pool.availableSize() + cache.cache.evictableSize()) < need) {
    if (!lazy) cache.evictIdleSessions({ needTokens: g.units(need) })
    if (lazy || g.tokens(w.pool.availableSize() + cache.cache.evictableSize()) < need) {
      cache.abortReq(req)
      return undefined
    }
  }
  // Allocate chunk by chunk (chunked prefill / layer-wise transfer): each chunk evicts only
  // its own shortfall, as the engine does. The chunks are cut in tokens and allocated in units.
  try {
    let doneUnits = cachedUnits
    for (let done = 0; done < newTokens; ) {
      done += Math.min(config.chunkTokens, newTokens - done)
      const target = g.units(cached + done)
      if (target > doneUnits) {
        cache.prefill(req, target - doneUnits)
        doneUnits = target
      }
    }
  } catch (err) {
    cache.abortReq(req)
    if (isOom(err)) return undefined
    throw err
  }
  return { req, cached, loaded: g.tokens(loadedUnits) }
}

/** What {@link admit} matched: the last admission's cached and loaded units. */
const matched = { length: 0, loadedTokens: 0 }

/**
 * Create the turn's request on `cache` (opening its session first) and match its prompt, noting
 * the match in {@link matched}. A function of its own rather than a closure in `openRequest`, so
 * that an admission allocates no closure and its caller's variables stay out of a context.
 */
function admit(
  cache: NonNullable<SimWorker['cache']>,
  turn: Turn,
  prompt: Uint32Array,
  sid: string | undefined,
  maxNewTokens: number,
): SessionRequest {
  if (sid !== undefined && !cache.hasSession(sid)) cache.openSession(sid)
  // The workload's prompts are never written: the cache reads them in place
  // (`copyInputIds: false`), and the output it decodes too where the workload's stream goes on
  // with it (`outputFollowsInput`).
  const rid = `${turn.id}.${turn.seq}`
  const req = cache.createRequest(
    sid === undefined
      ? { rid, inputIds: prompt, maxNewTokens, copyInputIds: false, outputFollowsInput: true }
      : {
          rid,
          inputIds: prompt,
          sessionId: sid,
          maxNewTokens,
          copyInputIds: false,
          outputFollowsInput: true,
        },
  )
  const m = cache.matchPrefix(req)
  matched.length = m.length
  matched.loadedTokens = m.loadedTokens
  return req
}
