import { describe, expect, it } from 'vitest'
import { chat, useProxy } from './helpers.js'

async function metrics(url: string): Promise<string> {
  return (await fetch(`${url}/metrics`)).text()
}

const sum = (m: string, re: RegExp): number => [...m.matchAll(re)].reduce((a, x) => a + Number(x[1]), 0)

describe('overload is slow, not dead', () => {
  // The test's health settings (probes every 100 ms, 500 ms timeout, 2 failures) and admission
  // timeout (500 ms): tight enough that load alone used to mark workers unhealthy.
  const env = useProxy({ prefill: 1, decode: 2, scale: 0.002 }, { policy: 'kvc' })

  it('500 requests at once through the proxy: every one served, no worker marked unhealthy, no admission timeout, no migration', async () => {
    const transitions: string[] = []
    const health = env.proxy.gateway.workers.health
    const watch = setInterval(() => {
      for (const w of env.proxy.gateway.workers.all()) if (!health.isHealthy(w.url)) transitions.push(w.id)
    }, 5)
    const N = 500
    let results: { status: number; cause: string | undefined }[]
    try {
      results = await Promise.all(
        Array.from({ length: N }, async (_, i) => {
          // 100 sessions, 5 requests each, all sent at once (turns of a session queue in the proxy).
          const r = await chat(env.proxy.url, `burst-${i % 100}`, [
            { role: 'system', content: `Agent ${i % 100}. ${'Context of the task. '.repeat(20)}` },
            { role: 'user', content: `request ${i}` },
          ])
          return {
            status: r.status,
            cause: (r.json.error as { kvc?: { cause?: string } } | undefined)?.kvc?.cause,
          }
        }),
      )
    } finally {
      clearInterval(watch)
    }
    const failed = results.filter((r) => r.status !== 200)
    expect(failed).toEqual([])
    expect([...new Set(transitions)]).toEqual([])
    const m = await metrics(env.proxy.url)
    expect(sum(m, /^kvc_proxy_admissions_total\{[^}]*result="timeout"\} (\d+)$/gm)).toBe(0)
    expect(sum(m, /^kvc_proxy_migrations_total (\d+)$/gm)).toBe(0)
    expect(sum(m, /^kvc_proxy_worker_healthy\{[^}]*\} (\d+)$/gm)).toBe(3)
  })
})
