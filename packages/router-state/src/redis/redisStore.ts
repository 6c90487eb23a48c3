import { Redis, type RedisOptions } from 'ioredis'
import { RouterStateError, checkOption, describeValue } from '../errors/routerStateError.js'
import type {
  BackendEvents,
  BackendSnapshot,
  BindingValue,
  FlagOp,
  FlagsValue,
  LoadMessage,
  PauseMessage,
  StateBackend,
  Versioned,
} from '../store/backend.js'
import { decodeJson, decodeKey, encodeKey } from '../store/codec.js'
import { ReplicatedStateStore } from '../store/replicatedStore.js'
import { type ReplicatedStoreOptions, checkStoreOptions } from '../store/storeOptions.js'

/**
 * Options of {@link connectRedisStore}.
 *
 * @example
 * ```ts
 * import type { RedisStoreOptions } from '@kvc/router-state'
 * const o: RedisStoreOptions = { url: 'redis://10.0.0.7:6379/0', prefix: 'kvc-prod' }
 * ```
 */
export interface RedisStoreOptions extends ReplicatedStoreOptions {
  /** `redis://host:port/db` (default `redis://127.0.0.1:6379`). */
  readonly url?: string
  /** More ioredis options (reconnection is always on, forever; the offline queue is off). */
  readonly redisOptions?: RedisOptions
  /**
   * Key and channel prefix: keys are `{<prefix>}:b:<session>` (bindings), `{<prefix>}:f:<session>`
   * (flags), `{<prefix>}:s:<worker>` (seed slots); channels `{<prefix>}:bind|flags|load|pause`.
   * One prefix per cluster of replicas (default `kvc`). The braces keep every key in one Redis
   * Cluster slot.
   */
  readonly prefix?: string
}

const CLAIM_BINDING = `
local cur = redis.call('GET', KEYS[1])
if cur then
  local p = string.find(cur, '|', 1, true)
  local rev = tonumber(string.sub(cur, 1, p - 1))
  local ok, v = pcall(cjson.decode, string.sub(cur, p + 1))
  if ok and type(v) == 'table' then
    if v.w == ARGV[1] then return {1, cur} end
    if ARGV[2] == '' or tonumber(ARGV[2]) ~= rev then return {0, cur} end
  end
end
local val = string.format('%d', redis.call('INCR', KEYS[2])) .. '|' .. ARGV[3]
redis.call('SET', KEYS[1], val, 'PX', ARGV[4])
redis.call('PUBLISH', ARGV[5], ARGV[6] .. '\\n' .. val)
return {1, val}
`

const PUT_BINDING = `
local cur = redis.call('GET', KEYS[1])
if cur then
  if ARGV[1] == '' then return {0, cur} end
  local p = string.find(cur, '|', 1, true)
  if tonumber(string.sub(cur, 1, p - 1)) ~= tonumber(ARGV[1]) then return {0, cur} end
elseif ARGV[1] ~= '' then
  return {0, false}
end
local val = string.format('%d', redis.call('INCR', KEYS[2])) .. '|' .. ARGV[2]
redis.call('SET', KEYS[1], val, 'PX', ARGV[3])
redis.call('PUBLISH', ARGV[4], ARGV[5] .. '\\n' .. val)
return {1, val}
`

const FLAG_OP = `
if ARGV[1] == 'reset' then
  redis.call('DEL', KEYS[1])
elseif ARGV[1] == 'reject' then
  redis.call('HINCRBY', KEYS[1], 'r:' .. ARGV[2], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
else
  redis.call('HSET', KEYS[1], 'x:' .. ARGV[2], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
local all = redis.call('HGETALL', KEYS[1])
redis.call('PUBLISH', ARGV[4], ARGV[5] .. '\\n' .. table.concat(all, '\\n'))
return all
`

const CLAIM_SEEDS = `
local h = redis.call('HGETALL', KEYS[1])
local live = {}
for i = 5, #ARGV do live[ARGV[i]] = true end
local sum = 0
local dead = {}
for i = 1, #h, 2 do
  local r = h[i]
  if r ~= ARGV[1] then
    if ARGV[4] == '1' or live[r] then sum = sum + tonumber(h[i + 1]) else dead[#dead + 1] = r end
  end
end
if sum + tonumber(ARGV[2]) > tonumber(ARGV[3]) then return {0, h} end
for _, r in ipairs(dead) do redis.call('HDEL', KEYS[1], r) end
if tonumber(ARGV[2]) > 0 then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) else redis.call('HDEL', KEYS[1], ARGV[1]) end
return {1, redis.call('HGETALL', KEYS[1])}
`

const PUT_SEEDS = `
if tonumber(ARGV[2]) > 0 then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) else redis.call('HDEL', KEYS[1], ARGV[1]) end
return redis.call('HGETALL', KEYS[1])
`

type Reply = [number, string | null]

interface Scripts {
  kvcClaimBinding(...args: (string | number)[]): Promise<Reply>
  kvcPutBinding(...args: (string | number)[]): Promise<Reply>
  kvcFlagOp(...args: (string | number)[]): Promise<string[]>
  kvcClaimSeeds(...args: (string | number)[]): Promise<[number, string[]]>
  kvcPutSeeds(...args: (string | number)[]): Promise<string[]>
}

function parseBinding(raw: string | null | undefined): Versioned<BindingValue> | undefined {
  if (typeof raw !== 'string') return undefined
  const p = raw.indexOf('|')
  if (p < 0) return undefined
  const revision = Number(raw.slice(0, p))
  const value = decodeJson<BindingValue>(raw.slice(p + 1))
  return value === undefined || !Number.isFinite(revision) ? undefined : { revision, value }
}

function parseFlags(flat: readonly string[]): FlagsValue | undefined {
  const r: Record<string, number> = {}
  const x: string[] = []
  for (let i = 0; i + 1 < flat.length; i += 2) {
    const f = flat[i]!
    if (f.startsWith('r:')) r[decodeKey(f.slice(2))] = Number(flat[i + 1])
    else if (f.startsWith('x:')) x.push(decodeKey(f.slice(2)))
  }
  return Object.keys(r).length === 0 && x.length === 0 ? undefined : { r, x }
}

function parseSeeds(flat: readonly string[]): Record<string, number> {
  const out: Record<string, number> = {}
  for (let i = 0; i + 1 < flat.length; i += 2) out[flat[i]!] = Number(flat[i + 1])
  return out
}

/**
 * The Redis side of a {@link ReplicatedStateStore}: bindings are strings `<revision>|<json>` with
 * the idle TTL (`PX`), claimed and compare-and-set by Lua scripts (atomic like `SET NX` /
 * `WATCH`, without a connection per transaction) that also publish the new value; session flags
 * are hashes with the TTL; pending-seed slots a hash per D (one field per replica); load and
 * pause hints go by pub/sub. Revisions come from one counter started at the wall clock in
 * microseconds, so they keep increasing across a restart that loses the data. Use
 * {@link connectRedisStore}.
 *
 * @example
 * ```ts
 * import { Redis } from 'ioredis'
 * import { RedisStateBackend, ReplicatedStateStore } from '@kvc/router-state'
 * const redis = new Redis('redis://127.0.0.1:6379', { enableOfflineQueue: false })
 * const store = new ReplicatedStateStore(new RedisStateBackend(redis, { prefix: 'kvc' }))
 * await store.start()
 * ```
 */
export class RedisStateBackend implements StateBackend {
  readonly kind = 'redis'
  readonly #r: Redis & Scripts
  readonly #sub: Redis
  readonly #p: string
  readonly #ch: { bind: string; flags: string; load: string; pause: string }
  #events: BackendEvents | undefined
  #up = { main: true, sub: false }
  #reported = false
  #started = false
  #closed = false

  /**
   * @param client a connected ioredis client (a duplicate is opened for subscriptions); the
   *   backend closes both on `close`
   * @param options `prefix` of keys and channels (default `kvc`)
   *
   * @example
   * ```ts
   * import { Redis } from 'ioredis'
   * import { RedisStateBackend } from '@kvc/router-state'
   * const backend = new RedisStateBackend(new Redis(), { prefix: 'kvc' })
   * ```
   */
  constructor(client: Redis, options: { readonly prefix?: string } = {}) {
    const prefix = options.prefix ?? 'kvc'
    checkOption(
      typeof prefix === 'string' && /^[A-Za-z0-9_.-]{1,64}$/.test(prefix),
      `prefix must match /^[A-Za-z0-9_.-]{1,64}$/, got ${describeValue(prefix)}`,
      prefix,
    )
    this.#p = `{${prefix}}`
    this.#ch = {
      bind: `${this.#p}:bind`,
      flags: `${this.#p}:flags`,
      load: `${this.#p}:load`,
      pause: `${this.#p}:pause`,
    }
    client.defineCommand('kvcClaimBinding', { numberOfKeys: 2, lua: CLAIM_BINDING })
    client.defineCommand('kvcPutBinding', { numberOfKeys: 2, lua: PUT_BINDING })
    client.defineCommand('kvcFlagOp', { numberOfKeys: 1, lua: FLAG_OP })
    client.defineCommand('kvcClaimSeeds', { numberOfKeys: 1, lua: CLAIM_SEEDS })
    client.defineCommand('kvcPutSeeds', { numberOfKeys: 1, lua: PUT_SEEDS })
    this.#r = client as Redis & Scripts
    this.#sub = client.duplicate({ lazyConnect: true })
  }

  async start(events: BackendEvents): Promise<void> {
    this.#events = events
    const watch = (c: Redis, which: 'main' | 'sub') => {
      c.on('close', () => {
        this.#up[which] = false
        this.#report(false)
      })
      c.on('ready', () => {
        this.#up[which] = true
        if (this.#up.main && this.#up.sub) this.#report(true)
      })
      c.on('error', () => {
        // reported through 'close'; ioredis reconnects
      })
    }
    watch(this.#r, 'main')
    watch(this.#sub, 'sub')
    this.#sub.on('message', (channel: string, msg: string) => this.#onMessage(channel, msg))
    await this.#sub.connect()
    await this.#sub.subscribe(this.#ch.bind, this.#ch.flags, this.#ch.load, this.#ch.pause)
    this.#up.sub = true
    this.#reported = true
    this.#started = true
  }

  /** Tells the store about a change of state only (up after down, down after up). */
  #report(up: boolean): void {
    if (this.#closed || !this.#started || up === this.#reported) return
    this.#reported = up
    this.#events!.connection(up)
  }

  #onMessage(channel: string, msg: string): void {
    const ev = this.#events
    if (ev === undefined) return
    if (channel === this.#ch.load) {
      const m = decodeJson<LoadMessage>(msg)
      if (m !== undefined) ev.load(m)
      return
    }
    if (channel === this.#ch.pause) {
      const m = decodeJson<PauseMessage>(msg)
      if (m !== undefined) ev.pause(m)
      return
    }
    const nl = msg.indexOf('\n')
    if (nl < 0) return
    const s = decodeKey(msg.slice(0, nl))
    const rest = msg.slice(nl + 1)
    if (channel === this.#ch.bind) {
      const v = parseBinding(rest)
      if (v !== undefined) ev.binding(s, v.value, v.revision)
    } else if (channel === this.#ch.flags) {
      ev.flags(s, parseFlags(rest === '' ? [] : rest.split('\n')))
    }
  }

  #bkey(s: string): string {
    return `${this.#p}:b:${encodeKey(s)}`
  }

  async claimBinding(
    sessionId: string,
    value: BindingValue,
    expectedRevision: number | undefined,
    ttlMs: number,
  ): Promise<{ granted: boolean; current: Versioned<BindingValue> | undefined }> {
    const [ok, raw] = await this.#r.kvcClaimBinding(
      this.#bkey(sessionId),
      `${this.#p}:rev`,
      value.w,
      expectedRevision === undefined ? '' : String(expectedRevision),
      JSON.stringify(value),
      Math.max(1, Math.round(ttlMs)),
      this.#ch.bind,
      encodeKey(sessionId),
    )
    return { granted: ok === 1, current: parseBinding(raw) }
  }

  async putBinding(
    sessionId: string,
    value: BindingValue,
    expectedRevision: number | undefined,
    ttlMs: number,
  ): Promise<{ ok: boolean; current: Versioned<BindingValue> | undefined }> {
    const [ok, raw] = await this.#r.kvcPutBinding(
      this.#bkey(sessionId),
      `${this.#p}:rev`,
      expectedRevision === undefined ? '' : String(expectedRevision),
      JSON.stringify(value),
      Math.max(1, Math.round(ttlMs)),
      this.#ch.bind,
      encodeKey(sessionId),
    )
    return { ok: ok === 1, current: parseBinding(raw) }
  }

  async flagOp(sessionId: string, op: FlagOp, ttlMs: number): Promise<FlagsValue | undefined> {
    const all = await this.#r.kvcFlagOp(
      `${this.#p}:f:${encodeKey(sessionId)}`,
      op.t,
      op.t === 'reset' ? '' : encodeKey(op.d),
      Math.max(1, Math.round(ttlMs)),
      this.#ch.flags,
      encodeKey(sessionId),
    )
    return parseFlags(all)
  }

  async claimSeeds(
    workerId: string,
    me: string,
    mine: number,
    budget: number,
    live: ReadonlySet<string> | 'all',
  ): Promise<{ granted: boolean; entries: Readonly<Record<string, number>> }> {
    const [ok, flat] = await this.#r.kvcClaimSeeds(
      `${this.#p}:s:${encodeKey(workerId)}`,
      me,
      mine,
      budget,
      live === 'all' ? '1' : '0',
      ...(live === 'all' ? [] : [...live]),
    )
    return { granted: ok === 1, entries: parseSeeds(flat) }
  }

  async putSeeds(workerId: string, me: string, mine: number): Promise<Readonly<Record<string, number>>> {
    return parseSeeds(await this.#r.kvcPutSeeds(`${this.#p}:s:${encodeKey(workerId)}`, me, mine))
  }

  publishLoad(message: LoadMessage): void {
    this.#r.publish(this.#ch.load, JSON.stringify(message)).catch(() => {})
  }

  publishPause(message: PauseMessage): void {
    this.#r.publish(this.#ch.pause, JSON.stringify(message)).catch(() => {})
  }

  async snapshot(): Promise<BackendSnapshot> {
    const r = this.#r
    // The meta key exists as long as the server kept its data; the revision counter starts at
    // the wall clock in microseconds, so revisions keep increasing across a restart that lost it.
    const created = await r.set(`${this.#p}:meta`, String(Date.now()), 'NX')
    const lost = created === 'OK'
    if (lost) await r.set(`${this.#p}:rev`, String(Date.now() * 1000), 'NX')
    const bindings = new Map<string, Versioned<BindingValue>>()
    const bkeys = await this.#scan(`${this.#p}:b:*`)
    for (let i = 0; i < bkeys.length; i += 500) {
      const chunk = bkeys.slice(i, i + 500)
      const vals = await r.mget(...chunk)
      chunk.forEach((k, j) => {
        const v = parseBinding(vals[j])
        if (v !== undefined) bindings.set(decodeKey(k.slice(k.lastIndexOf(':') + 1)), v)
      })
    }
    const hashes = async (pattern: string) => {
      const keys = await this.#scan(pattern)
      const out = new Map<string, string[]>()
      for (let i = 0; i < keys.length; i += 500) {
        const chunk = keys.slice(i, i + 500)
        const p = r.pipeline()
        for (const k of chunk) p.hgetall(k)
        const res = (await p.exec()) ?? []
        chunk.forEach((k, j) => {
          const [err, h] = res[j] ?? [null, {}]
          if (err === null && h !== null && typeof h === 'object') {
            out.set(
              decodeKey(k.slice(k.lastIndexOf(':') + 1)),
              Object.entries(h as Record<string, string>).flat(),
            )
          }
        })
      }
      return out
    }
    const flags = new Map<string, FlagsValue>()
    for (const [s, flat] of await hashes(`${this.#p}:f:*`)) {
      const f = parseFlags(flat)
      if (f !== undefined) flags.set(s, f)
    }
    const seeds = new Map<string, Readonly<Record<string, number>>>()
    for (const [d, flat] of await hashes(`${this.#p}:s:*`)) seeds.set(d, parseSeeds(flat))
    return { lost, bindings, flags, seeds }
  }

  async #scan(pattern: string): Promise<string[]> {
    const out: string[] = []
    let cursor = '0'
    do {
      const [next, keys] = await this.#r.scan(cursor, 'MATCH', pattern, 'COUNT', 1000)
      cursor = next
      out.push(...keys)
    } while (cursor !== '0')
    return out
  }

  async close(graceful: boolean): Promise<void> {
    this.#closed = true
    const end = async (c: Redis) => {
      if (graceful && c.status === 'ready') await c.quit().catch(() => c.disconnect())
      else c.disconnect()
    }
    await Promise.all([end(this.#sub), end(this.#r)])
  }
}

/**
 * Connects a {@link ReplicatedStateStore} to Redis: opens two connections (commands and
 * subscriptions; reconnecting forever, no offline queue), reads the server's state and starts
 * the heartbeat.
 *
 * @throws RouterStateError `INVALID_OPTION`, `CONNECT_FAILED`.
 *
 * @example
 * ```ts
 * import { Router } from '@kvc/kvc-router'
 * import { connectRedisStore } from '@kvc/router-state'
 * const store = await connectRedisStore({ url: 'redis://127.0.0.1:6379', prefix: 'kvc', replicaId: 'router-a' })
 * const router = new Router({ store })
 * ```
 */
export async function connectRedisStore(options: RedisStoreOptions = {}): Promise<ReplicatedStateStore> {
  checkStoreOptions(options)
  const prefix = options.prefix ?? 'kvc'
  checkOption(
    typeof prefix === 'string' && /^[A-Za-z0-9_.-]{1,64}$/.test(prefix),
    `prefix must match /^[A-Za-z0-9_.-]{1,64}$/, got ${describeValue(prefix)}`,
    prefix,
  )
  const url = options.url ?? 'redis://127.0.0.1:6379'
  checkOption(
    typeof url === 'string' && url.length > 0,
    `url must be a non-empty string, got ${describeValue(url)}`,
    url,
  )
  const opts = {
    lazyConnect: true,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 1,
    retryStrategy: (times: number) => Math.min(50 * times, 500),
    connectionName: `kvc-router-state ${options.replicaId ?? ''}`.trim(),
    ...options.redisOptions,
  } as RedisOptions
  const client = new Redis(url, opts)
  client.on('error', () => {
    // reported as a lost connection; ioredis reconnects
  })
  try {
    await client.connect()
  } catch (err) {
    client.disconnect()
    throw new RouterStateError(
      'CONNECT_FAILED',
      `cannot connect to Redis at ${url}: ${(err as Error).message}`,
      url,
    )
  }
  const backend = new RedisStateBackend(
    client,
    options.prefix === undefined ? {} : { prefix: options.prefix },
  )
  try {
    const store = new ReplicatedStateStore(backend, options)
    await store.start()
    return store
  } catch (err) {
    await backend.close(false).catch(() => {})
    throw err
  }
}
