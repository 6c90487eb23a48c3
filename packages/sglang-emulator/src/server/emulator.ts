/**
 * The emulated worker as a process would run it: its HTTP server (and, for a prefill, the
 * bootstrap server), KV-event sockets, faults and shutdown. `createSglangEmulator` starts one.
 *
 * @module
 */
import { type Server, createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import type { SessionCache } from '@kvc/session-cache'
import { createAdmissionHandler, sendJson } from '@kvc/worker-bindings'
import {
  type EmulatorConfig,
  type EmulatorRole,
  type SglangEmulatorOptions,
  resolveOptions,
} from '../config/options.js'
import { EmulatorEngine, type EmulatorStats } from '../engine/engine.js'
import { type EmulatorFaults, FaultInjector } from '../faults/faults.js'
import { EmulatedBootstrapServer } from '../pd/bootstrapServer.js'
import { prefillRegistry } from '../pd/prefillRooms.js'
import { SglangHttpError, errorResponse } from '../sglang/errors.js'
import type { Endpoints } from '../sglang/responses.js'
import { type RouteContext, route } from './routes.js'

/**
 * A running emulator.
 *
 * @example
 * ```ts
 * import { SglangClient } from '@kvc/worker-bindings'
 * import { createSglangEmulator } from '@kvc/sglang-emulator'
 * const emu = await createSglangEmulator({ capacityTokens: 8192, pageSize: 16, timing: { scale: 0 } })
 * const client = new SglangClient({ baseURL: emu.url })
 * await client.generate({ text: 'hello', sampling_params: { max_new_tokens: 4 } })
 * await emu.close()
 * ```
 */
export interface SglangEmulator {
  /** Base URL, e.g. `http://127.0.0.1:41234`. */
  readonly url: string
  readonly port: number
  readonly role: EmulatorRole
  readonly pageSize: number
  readonly capacityTokens: number
  /** PUB endpoint of the KV events (undefined when disabled). */
  readonly kvEventsEndpoint: string | undefined
  /** ROUTER replay endpoint of the KV events. */
  readonly kvReplayEndpoint: string | undefined
  /** Prefill role: the bootstrap server's URL and port. */
  readonly bootstrapUrl: string | undefined
  readonly bootstrapPort: number | undefined
  /** The real session cache (and through it the radix cache and pool) behind the emulator. */
  readonly sessionCache: SessionCache
  readonly faults: EmulatorFaults
  stats(): EmulatorStats
  /** Marks the worker draining (admission answers `draining`) or not. */
  setDraining(draining: boolean): void
  /** Aborts every request, closes the server, the bootstrap server and the ZeroMQ sockets. Idempotent. */
  close(): Promise<void>
}

/**
 * Starts an SGLang-compatible worker on `127.0.0.1` with an ephemeral port.
 *
 * What it serves (paths and fields as SGLang's `http_server.py`): `POST|PUT /generate`
 * (text or `input_ids`, non-streaming and SSE streaming, cumulative or incremental, batches
 * non-streaming, `session_params`, top-level `session_id`, `extra_key`/`cache_salt`, bootstrap
 * fields), `POST /v1/chat/completions` (streaming too), `/open_session`, `/close_session`,
 * `/abort_request`, `/server_info` + `/get_server_info`, `/model_info` + `/get_model_info`,
 * `/get_load`, `/v1/loads`, `/flush_cache`, `/health`, `/health_generate`, `/metrics`,
 * `/v1/models`, and the kvc admission RPC at `ADMIT_HTTP_PATH` answered by `kvc-router`'s
 * `admit` over the worker's real state. A prefill emulator also runs a bootstrap server; a decode
 * emulator in the same process receives the prefill's KV through an in-process rendezvous keyed
 * by `bootstrap_room`.
 *
 * Errors have SGLang's status and shape: `{"error": {"message"}}` (400) for generate-level
 * failures (unknown session, prompt too long), `{"object": "error", "message", "type", "param",
 * "code"}` (400) for bodies that fail validation (malformed JSON), `{"detail": "Not Found"}` for
 * unknown paths, and 413 with the `ErrorResponse` shape for bodies above `maxBodyBytes` (SGLang's
 * own server has no limit; its router answers 413). Refused requests change no state.
 *
 * @throws SglangEmulatorError `INVALID_OPTION` (rejects with it) for a bad option; nothing is started.
 *
 * @example
 * ```ts
 * import { SglangClient } from '@kvc/worker-bindings'
 * import { createSglangEmulator } from '@kvc/sglang-emulator'
 * const emu = await createSglangEmulator({ role: 'decode', capacityTokens: 32_768, pageSize: 16, timing: { scale: 0.01 } })
 * const worker = new SglangClient({ baseURL: emu.url })
 * const a = await worker.generate({ text: 'a long shared prefix ...', sampling_params: { max_new_tokens: 8 } })
 * const b = await worker.generate({ text: 'a long shared prefix ... and more', sampling_params: { max_new_tokens: 8 } })
 * console.log(b.meta_info.cached_tokens) // the true prefix hit
 * await emu.close()
 * ```
 */
export async function createSglangEmulator(options: SglangEmulatorOptions = {}): Promise<SglangEmulator> {
  const emu = new Emulator(resolveOptions(options))
  try {
    await emu.start()
  } catch (err) {
    await emu.close()
    throw err
  }
  return emu
}

class Emulator implements SglangEmulator {
  readonly faults: FaultInjector
  readonly #config: EmulatorConfig
  readonly #engine: EmulatorEngine
  readonly #server: Server
  readonly #bootstrap: EmulatedBootstrapServer | undefined
  #bootstrapKey: string | undefined
  #closing: Promise<void> | undefined
  #port = 0
  #bootPort: number | undefined
  #kvEndpoint: string | undefined
  #kvReplay: string | undefined

  constructor(config: EmulatorConfig) {
    this.#config = config
    this.faults = new FaultInjector()
    const engine = new EmulatorEngine(config, this.faults)
    this.#engine = engine
    if (config.role === 'prefill') {
      this.#bootstrap = new EmulatedBootstrapServer({
        pageSize: config.pageSize,
        expectedRanks: config.bootstrapRanks,
        httpPort: () => this.#port,
      })
    }
    const ctx: RouteContext = {
      config,
      engine,
      faults: this.faults,
      endpoints: () => this.#endpoints(),
      admission: createAdmissionHandler({ admit: (r) => engine.admit(r) }),
    }
    this.#server = createServer((req, res) => {
      route(ctx, req, res).catch((err: unknown) => {
        if (err instanceof SglangHttpError) sendJson(res, err.status, err.body)
        else
          sendJson(
            res,
            500,
            errorResponse(500, `Internal Server Error: ${(err as Error)?.message ?? String(err)}`),
          )
      })
    })
    this.#server.keepAliveTimeout = 5_000
  }

  get role(): EmulatorRole {
    return this.#config.role
  }
  get pageSize(): number {
    return this.#config.pageSize
  }
  get capacityTokens(): number {
    return this.#config.capacityTokens
  }
  get sessionCache(): SessionCache {
    return this.#engine.sessionCache
  }
  get url(): string {
    return `http://${this.#config.host}:${this.#port}`
  }
  get port(): number {
    return this.#port
  }
  get kvEventsEndpoint(): string | undefined {
    return this.#kvEndpoint
  }
  get kvReplayEndpoint(): string | undefined {
    return this.#kvReplay
  }
  get bootstrapPort(): number | undefined {
    return this.#bootPort
  }
  get bootstrapUrl(): string | undefined {
    return this.#bootPort === undefined ? undefined : `http://${this.#config.host}:${this.#bootPort}`
  }

  async start(): Promise<void> {
    const host = this.#config.host
    this.#port = await listen(this.#server, this.#config.port, host)
    if (this.#bootstrap !== undefined) {
      this.#bootPort = await listen(this.#bootstrap.server, this.#config.bootstrapPort, host)
      this.#bootstrap.register({
        attn_tp_size: 1,
        attn_tp_rank: 0,
        attn_cp_size: 1,
        attn_cp_rank: 0,
        attn_dp_size: 1,
        attn_dp_rank: 0,
        pp_size: 1,
        pp_rank: 0,
        system_dp_size: 1,
        system_dp_rank: 0,
        rank_ip: host,
        rank_port: this.#port,
        page_size: this.pageSize,
        kv_cache_dtype: 'auto',
      })
      this.#bootstrapKey = `${host}:${this.#bootPort}`
      prefillRegistry.set(this.#bootstrapKey, this.#engine.rooms!)
    }
    const kv = this.#engine.kvEvents
    if (kv !== undefined) {
      const ep = await kv.bind()
      this.#kvEndpoint = ep.endpoint
      this.#kvReplay = ep.replayEndpoint
    }
  }

  setDraining(draining: boolean): void {
    this.#engine.setDraining(draining)
  }

  stats(): EmulatorStats {
    return this.#engine.stats()
  }

  close(): Promise<void> {
    this.#closing ??= this.#doClose()
    return this.#closing
  }

  async #doClose(): Promise<void> {
    if (this.#bootstrapKey !== undefined) prefillRegistry.delete(this.#bootstrapKey)
    this.#engine.shutdown()
    await Promise.all([
      closeServer(this.#server),
      this.#bootstrap ? closeServer(this.#bootstrap.server) : undefined,
    ])
    await this.#engine.kvEvents?.close()
  }

  #endpoints(): Endpoints {
    const publisher = this.#engine.kvEvents?.publisher
    return {
      bootstrapPort: this.#bootPort,
      kvEventsConfig:
        this.#kvEndpoint === undefined
          ? null
          : JSON.stringify({
              publisher: 'zmq',
              endpoint: this.#kvEndpoint,
              replay_endpoint: this.#kvReplay,
              topic: publisher?.topic ?? '',
              buffer_steps: publisher?.bufferSteps ?? 0,
            }),
    }
  }
}

function listen(server: Server, port: number, host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const onError = (err: Error): void => reject(err)
    server.once('error', onError)
    server.listen(port, host, () => {
      server.off('error', onError)
      resolve((server.address() as AddressInfo).port)
    })
  })
}

function closeServer(server: Server): Promise<void> {
  return new Promise((resolve) => {
    if (!server.listening) {
      resolve()
      return
    }
    server.close(() => resolve())
    server.closeAllConnections()
  })
}
