import { DEFAULT_PAUSE_HINT } from '@kvc/kvc-router'
import { type SglangEmulator, type SglangEmulatorOptions, createSglangEmulator } from '@kvc/sglang-emulator'
import { handleCounts, leakedSince } from '@kvc/worker-bindings/testing'
import { afterAll, beforeAll, expect } from 'vitest'
import { type ProxyConfigInput, resolveConfig } from '../src/config.js'
import type { DecisionLine } from '../src/decisionLog.js'
import { type KvcProxy, type ProxyOptions, createProxy } from '../src/server.js'

/** Emulated P/D cluster on loopback, fast timings and small backpressure pauses. */
export interface Cluster {
  readonly prefill: SglangEmulator[]
  readonly decode: SglangEmulator[]
  close(): Promise<void>
}

/** Pause hints scaled down (20–100 ms instead of 200–2,000 ms) so backpressure tests stay fast. */
export const FAST_PAUSE = {
  ...DEFAULT_PAUSE_HINT,
  retractedPauseMs: 50,
  msPerBasisPoint: 0.5,
  minPauseMs: 20,
  maxPauseMs: 100,
  msPerQueuedTransfer: 10,
}

/** How {@link startCluster} sizes the cluster (defaults: 1 P, 2 D, 256K tokens each, timing scale 0.002). */
export interface ClusterOptions {
  prefill?: number
  decode?: number
  capacityTokens?: number
  decodeCapacityTokens?: number
  scale?: number
  decodeOptions?: Partial<SglangEmulatorOptions>
}

export async function startCluster(o: ClusterOptions = {}): Promise<Cluster> {
  const timing = { scale: o.scale ?? 0.002 }
  const prefill: SglangEmulator[] = []
  const decode: SglangEmulator[] = []
  for (let i = 0; i < (o.prefill ?? 1); i++) {
    prefill.push(
      await createSglangEmulator({
        role: 'prefill',
        capacityTokens: o.capacityTokens ?? 262_144,
        pageSize: 16,
        timing,
        kvEvents: false,
        enableCacheReport: true,
      }),
    )
  }
  for (let i = 0; i < (o.decode ?? 2); i++) {
    decode.push(
      await createSglangEmulator({
        role: 'decode',
        capacityTokens: o.decodeCapacityTokens ?? o.capacityTokens ?? 262_144,
        pageSize: 16,
        timing,
        transferTimeoutMs: 5_000,
        enableCacheReport: true,
        admission: { pause: FAST_PAUSE },
        ...o.decodeOptions,
      }),
    )
  }
  return {
    prefill,
    decode,
    close: async () => {
      await Promise.all([...prefill, ...decode].map((e) => e.close()))
    },
  }
}

/**
 * What every test proxy in front of `cluster` starts from: its workers (`p0`…, `d0`…), the
 * emulator tokenizer, no decision log on stdout, fast health checks and load polling.
 */
export function testProxyConfig(cluster: Cluster): ProxyConfigInput {
  return {
    listen: { port: 0 },
    workers: [
      ...cluster.prefill.map((e, i) => ({ id: `p${i}`, role: 'prefill' as const, url: e.url })),
      ...cluster.decode.map((e, i) => ({ id: `d${i}`, role: 'decode' as const, url: e.url })),
    ],
    tokenizer: 'emulator',
    decisionLog: 'off',
    health: { intervalMs: 100, timeoutMs: 500, failureThreshold: 2 },
    loads: { intervalMs: 200 },
  }
}

/** A proxy in front of `cluster` (emulator tokenizer, no decision log on stdout; lines collected). */
export async function startProxy(
  cluster: Cluster,
  overrides: ProxyConfigInput = {},
  options: ProxyOptions = {},
): Promise<{ proxy: KvcProxy; decisions: DecisionLine[] }> {
  const decisions: DecisionLine[] = []
  const config = resolveConfig({
    ...testProxyConfig(cluster),
    ...overrides,
    router: { backoffBaseMs: 10, backoffCapMs: 200, admissionTimeoutMs: 500, ...overrides.router },
  })
  const proxy = await createProxy(config, {
    onDecision: (l) => decisions.push(l),
    onTenantsReload: () => {},
    ...options,
  })
  return { proxy, decisions }
}

/** A cluster and a proxy in front of it, shared by the tests of a `describe` block (see {@link useProxy}). */
export interface ProxyEnv {
  readonly cluster: Cluster
  readonly proxy: KvcProxy
  readonly decisions: DecisionLine[]
}

/**
 * Starts a cluster and a proxy in front of it before the block's tests (`beforeAll`) and closes
 * both after them (`afterAll`), checking that no socket or timer was left open. The fields of the
 * returned object are set once `beforeAll` has run: read them inside the tests.
 */
export function useProxy(
  clusterOptions: ClusterOptions,
  overrides: ProxyConfigInput = {},
  options: ProxyOptions = {},
): ProxyEnv {
  let baseline: Record<string, number>
  const env = {} as { cluster: Cluster; proxy: KvcProxy; decisions: DecisionLine[] }
  beforeAll(async () => {
    baseline = handleCounts()
    env.cluster = await startCluster(clusterOptions)
    ;({ proxy: env.proxy, decisions: env.decisions } = await startProxy(env.cluster, overrides, options))
  })
  afterAll(async () => {
    await env.proxy.close()
    await env.cluster.close()
    expect(await leakedSince(baseline)).toEqual({})
  })
  return env
}

export interface ChatResult {
  readonly status: number
  readonly headers: Headers
  readonly json: Record<string, unknown>
  readonly content: string
}

/** One non-streaming chat turn. */
export async function chat(
  url: string,
  session: string | undefined,
  messages: { role: string; content: string }[],
  extra: Record<string, unknown> = {},
): Promise<ChatResult> {
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      ...(session === undefined ? {} : { 'x-session-id': session }),
    },
    body: JSON.stringify({ model: 'm', messages, max_tokens: 8, ...extra }),
  })
  const json = (await res.json()) as Record<string, unknown>
  const content =
    ((json.choices as { message?: { content?: string } }[] | undefined)?.[0]?.message?.content as
      | string
      | undefined) ?? ''
  return { status: res.status, headers: res.headers, json, content }
}

/** One streaming chat turn: the concatenated content, the raw events, the headers. */
export async function chatStream(
  url: string,
  session: string,
  messages: { role: string; content: string }[],
  extra: Record<string, unknown> = {},
): Promise<{ status: number; headers: Headers; content: string; events: unknown[]; done: boolean }> {
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-session-id': session },
    body: JSON.stringify({ model: 'm', messages, max_tokens: 8, stream: true, ...extra }),
  })
  const text = await res.text()
  const events: unknown[] = []
  let content = ''
  let done = false
  for (const block of text.split('\n\n')) {
    const line = block.trim()
    if (!line.startsWith('data: ')) continue
    const data = line.slice(6)
    if (data === '[DONE]') {
      done = true
      continue
    }
    const ev = JSON.parse(data) as { choices?: { delta?: { content?: string } }[] }
    events.push(ev)
    content += ev.choices?.[0]?.delta?.content ?? ''
  }
  return { status: res.status, headers: res.headers, content, events, done }
}

/** A multi-turn agent conversation: each turn re-sends the history plus a new user message. */
export class Conversation {
  readonly messages: { role: string; content: string }[]
  constructor(
    readonly id: string,
    system: string,
  ) {
    this.messages = [{ role: 'system', content: system }]
  }

  async turn(url: string, user: string, extra: Record<string, unknown> = {}): Promise<ChatResult> {
    this.messages.push({ role: 'user', content: user })
    const r = await chat(url, this.id, this.messages, extra)
    if (r.status === 200) this.messages.push({ role: 'assistant', content: r.content })
    else this.messages.pop()
    return r
  }
}

// biome-ignore lint/suspicious/noExplicitAny: JSON answers are read loosely in these tests
export type LooseJson = any

/** An HTTP answer read loosely: its status, and its body parsed as JSON (the text when it is not JSON). */
export interface LooseAnswer {
  status: number
  json: LooseJson
}

/** POSTs `body` as-is (valid JSON or not) with a JSON content type and reads the answer loosely. */
export async function postRaw(
  url: string,
  body: string,
  headers: Record<string, string> = {},
): Promise<LooseAnswer> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body,
  })
  const text = await res.text()
  let json: unknown
  try {
    json = JSON.parse(text)
  } catch {
    json = text
  }
  return { status: res.status, json }
}
