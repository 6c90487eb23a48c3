/**
 * The README's walkthrough as one runnable script: an emulated P/D pair plus a colocated worker,
 * every client against them, and the KV-event stream feeding a sink.
 *
 *   pnpm tsx --conditions=@kvc/source packages/sglang-emulator/examples/quickstart.ts
 */
import {
  AdmissionClient,
  KvEventSubscriber,
  PdDispatcher,
  PrefillBootstrapClient,
  SglangClient,
  residencyFeeder,
} from '@kvc/worker-bindings'
import { createSglangEmulator } from '../src/index.js'

export async function main(log: (...args: unknown[]) => void = console.log): Promise<void> {
  // 1. An SGLang-compatible worker on 127.0.0.1 (ephemeral port), 100× faster than real time.
  const worker = await createSglangEmulator({ capacityTokens: 16_384, pageSize: 16, timing: { scale: 0.01 } })
  // 2. A prefill/decode pair.
  const prefill = await createSglangEmulator({
    role: 'prefill',
    capacityTokens: 16_384,
    pageSize: 16,
    timing: { scale: 0.01 },
  })
  const decode = await createSglangEmulator({
    role: 'decode',
    capacityTokens: 16_384,
    pageSize: 16,
    timing: { scale: 0.01 },
  })
  try {
    const client = new SglangClient({ baseURL: worker.url, timeout: 10_000 })

    // KV events: subscribe first, catch up from sequence 0 through the replay socket.
    let events = 0
    const sub = new KvEventSubscriber({
      endpoint: worker.kvEventsEndpoint!,
      replayEndpoint: worker.kvReplayEndpoint!,
      startSeq: 0n,
      onBatch: residencyFeeder({ ingest: () => void events++ }, 'worker-0'),
      onGap: (gap) => log('gap', gap),
    })
    await sub.start()

    // Non-streaming generate; the second call shares a prefix and reports the true hit.
    const system = 'You are a careful coding agent. Follow the repository conventions. '.repeat(4)
    const a = await client.generate({ text: `${system}Task 1`, sampling_params: { max_new_tokens: 8 } })
    const b = await client.generate({ text: `${system}Task 2`, sampling_params: { max_new_tokens: 8 } })
    log('cached tokens', a.meta_info.cached_tokens, '→', b.meta_info.cached_tokens)

    // Streaming (SSE): deltas, whatever mode the server streams in.
    const stream = await client.generateStream({
      text: `${system}Task 3`,
      sampling_params: { max_new_tokens: 8 },
    })
    let streamed = ''
    for await (const chunk of stream) streamed += chunk.delta
    log('streamed', JSON.stringify(streamed))

    // A session: its turns extend each other and keep their KV on the worker.
    const sid = await client.openSession({ session_id: 'agent-1' })
    await client.generate({
      text: `turn one: ${system}`,
      session_params: { id: sid },
      sampling_params: { max_new_tokens: 4 },
    })
    const t2 = await client.generate({
      text: ' turn two',
      session_params: { id: sid },
      sampling_params: { max_new_tokens: 4 },
    })
    log('turn 2 cached', t2.meta_info.cached_tokens, 'of', t2.meta_info.prompt_tokens)
    await client.closeSession(sid)

    // Load, metrics, admission.
    const [load] = await client.getLoad()
    const metrics = await client.metrics()
    log('load', load, 'prompt tokens', metrics.promptTokensTotal, 'cached', metrics.cachedTokensTotal)
    const admission = await new AdmissionClient({ baseURL: decode.url }).admit({
      requestId: 'agent-1/t3/a0',
      sessionId: 'agent-1',
      path: 'seed',
      promptTokens: 2_000,
      appendTokens: 2_000,
    })
    log('admission', admission.admitted, admission.reason, admission.tokenUsageAfter.toFixed(3))

    // P/D: the bootstrap server is ready, then one body goes to both; the decode streams.
    const boot = new PrefillBootstrapClient({ baseURL: prefill.bootstrapUrl! })
    log('prefill ready', await boot.isReady())
    const pd = new PdDispatcher({
      prefill: new SglangClient({ baseURL: prefill.url }),
      decode: new SglangClient({ baseURL: decode.url }),
      bootstrapPort: prefill.bootstrapPort!,
    })
    const pdStream = await pd.generateStream({
      text: 'Explain KV caches.',
      sampling_params: { max_new_tokens: 8 },
    })
    log('pd answer', JSON.stringify((await pdStream.final()).text), 'room', String(pdStream.bootstrapRoom))

    await sub.close()
    log('kv events ingested', events)
  } finally {
    await Promise.all([worker.close(), prefill.close(), decode.close()])
  }
}

if (process.argv[1] !== undefined && import.meta.url.endsWith(process.argv[1].replace(/\\/g, '/'))) {
  main().catch((err: unknown) => {
    console.error(err)
    process.exitCode = 1
  })
}
