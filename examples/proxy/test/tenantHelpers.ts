import { request } from 'node:http'
import OpenAI from 'openai'
import type { TenantInput } from '../src/tenancy/tenants.js'

/** Keys of the test tenants (16+ printable characters, as the proxy requires). */
export const KEYS = {
  alice: 'sk-test-alice-0000000001',
  bob: 'sk-test-bob-00000000002',
  carol: 'sk-test-carol-000000003',
  ops: 'sk-test-ops-00000000004',
  shared1: 'sk-test-shared-0000005',
  shared2: 'sk-test-shared-0000006',
  eve: 'sk-test-eve-00000000007',
} as const

/**
 * The test tenants: alice and bob isolated (alice sees cache details, bob does not), carol
 * isolated and privileged (sees cache details), ops an admin, shared1 and shared2 in one group
 * that shares its prefix cache, both seeing cache details, and eve in that group without seeing them.
 */
export function testTenants(): TenantInput[] {
  return [
    { id: 'alice', keys: [KEYS.alice], exposeCacheInfo: true },
    { id: 'bob', keys: [KEYS.bob] },
    { id: 'carol', keys: [KEYS.carol], exposeCacheInfo: true },
    { id: 'ops', keys: [KEYS.ops], admin: true },
    { id: 'shared1', keys: [KEYS.shared1], cache: { group: 'team' }, exposeCacheInfo: true },
    { id: 'shared2', keys: [KEYS.shared2], cache: { group: 'team' }, exposeCacheInfo: true },
    { id: 'eve', keys: [KEYS.eve], cache: { group: 'team' } },
  ]
}

/** The official OpenAI client against the proxy: no retries (a 429 must reach the test), no timeout games. */
export function client(url: string, apiKey: string, defaultHeaders: Record<string, string> = {}): OpenAI {
  return new OpenAI({ apiKey, baseURL: `${url}/v1`, maxRetries: 0, timeout: 60_000, defaultHeaders })
}

/** A chat turn through the OpenAI client, with the response headers. */
export async function turn(
  c: OpenAI,
  messages: OpenAI.Chat.ChatCompletionMessageParam[],
  maxTokens = 8,
): Promise<{ data: OpenAI.Chat.ChatCompletion; headers: Headers }> {
  const { data, response } = await c.chat.completions
    .create({ model: 'm', messages, max_tokens: maxTokens })
    .withResponse()
  return { data, headers: response.headers }
}

/** The error an OpenAI call rejects with (its status, headers and OpenAI error body). */
export async function apiError(p: Promise<unknown>): Promise<InstanceType<typeof OpenAI.APIError>> {
  try {
    await p
  } catch (err) {
    if (err instanceof OpenAI.APIError) return err
    throw err
  }
  throw new Error('the call succeeded; an error was expected')
}

/** A raw HTTP exchange (for bodies and headers the clients will not send). */
export function rawRequest(
  url: string,
  options: { method?: string; path: string; headers?: Record<string, string>; body?: string | Buffer },
): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; json: unknown }> {
  const u = new URL(url)
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: u.hostname,
        port: u.port,
        method: options.method ?? 'GET',
        path: options.path,
        headers: options.headers,
      },
      (res) => {
        const chunks: Buffer[] = []
        res.on('data', (c: Buffer) => chunks.push(c))
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8')
          let json: unknown = text
          try {
            json = JSON.parse(text)
          } catch {}
          resolve({ status: res.statusCode ?? 0, headers: res.headers, json })
        })
      },
    )
    req.on('error', reject)
    req.end(options.body)
  })
}
