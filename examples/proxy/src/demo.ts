/**
 * A self-contained demo: three SGLang emulators (1 P, 2 D) on loopback, the proxy in front of
 * them, and a few agent sessions sent through it. Prints where every turn went, then the
 * proxy's metrics. With `--serve` it keeps running so you can `curl` it.
 */
import { createSglangEmulator } from '@kvc/sglang-emulator'
import { resolveConfig } from './config.js'
import { createProxy } from './server.js'

const serve = process.argv.includes('--serve')
const portArg = process.argv.find((a) => a.startsWith('--port='))
const timing = { scale: 0.01 }
const p0 = await createSglangEmulator({
  role: 'prefill',
  capacityTokens: 131_072,
  timing,
  enableCacheReport: true,
})
const d0 = await createSglangEmulator({
  role: 'decode',
  capacityTokens: 65_536,
  timing,
  enableCacheReport: true,
})
const d1 = await createSglangEmulator({
  role: 'decode',
  capacityTokens: 65_536,
  timing,
  enableCacheReport: true,
})
const proxy = await createProxy(
  resolveConfig({
    listen: { port: portArg === undefined ? 0 : Number(portArg.slice('--port='.length)) },
    workers: [
      { id: 'p0', role: 'prefill', url: p0.url },
      { id: 'd0', role: 'decode', url: d0.url },
      { id: 'd1', role: 'decode', url: d1.url },
    ],
    tokenizer: 'emulator',
    router: { tauAppend: 2_048 },
    decisionLog: serve ? 'stdout' : 'off',
  }),
)
console.log(`proxy on ${proxy.url} → p0 ${p0.url}, d0 ${d0.url}, d1 ${d1.url}`)

const system = 'You are a careful coding agent working in a large repository. '.repeat(40)
await Promise.all(
  ['alice', 'bob', 'carol'].map(async (agent) => {
    const messages: { role: string; content: string }[] = [
      { role: 'system', content: `${system} You are ${agent}.` },
    ]
    for (let t = 1; t <= 3; t++) {
      messages.push({ role: 'user', content: `Step ${t}: run the tests and fix what fails.` })
      const res = await fetch(`${proxy.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-session-id': agent },
        body: JSON.stringify({ model: 'default', messages, max_tokens: 16 }),
      })
      const body = (await res.json()) as {
        choices: { message: { content: string } }[]
        kvc: { path: string; worker: string; prefill: string | null; cached_tokens: number }
      }
      messages.push({ role: 'assistant', content: body.choices[0]!.message.content })
      const k = body.kvc
      console.log(
        `${agent} turn ${t}: ${res.status} ${k.path.padEnd(4)} on ${k.worker}${k.prefill === null ? '' : ` via ${k.prefill}`}, ${k.cached_tokens} prompt tokens cached`,
      )
    }
  }),
)
const metrics = await (await fetch(`${proxy.url}/metrics`)).text()
console.log(
  metrics
    .split('\n')
    .filter((l) => l.startsWith('kvc_proxy_turns_total') || l.startsWith('kvc_proxy_worker_healthy'))
    .join('\n'),
)

if (serve) {
  console.log(
    `serving until Ctrl-C: curl ${proxy.url}/v1/chat/completions -H 'content-type: application/json' -d '{"messages":[{"role":"user","content":"hi"}]}'`,
  )
  await new Promise<void>((r) => process.once('SIGINT', () => r()))
}
await proxy.close()
await Promise.all([p0.close(), d0.close(), d1.close()])
