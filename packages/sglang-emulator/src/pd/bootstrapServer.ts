/**
 * The emulated prefill bootstrap server (SGLang `CommonKVBootstrapServer` routes).
 *
 * @internal
 * @module
 */
import { type IncomingMessage, type Server, type ServerResponse, createServer } from 'node:http'
import { BodyTooLargeError, readBigIntField, readBody, sendJson, sendText } from '@kvc/worker-bindings'

/** @internal */
export interface BootstrapServerState {
  readonly pageSize: number
  readonly expectedRanks: number
  readonly httpPort: () => number
}

/** @internal */
export class EmulatedBootstrapServer {
  readonly server: Server
  readonly #ranks = new Map<string, Record<string, unknown>>()
  readonly #dpRanks = new Map<string, number>()
  readonly #state: BootstrapServerState

  constructor(state: BootstrapServerState) {
    this.#state = state
    this.server = createServer((req, res) => {
      this.#handle(req, res).catch((err: unknown) => {
        sendText(res, 500, `Internal Server Error: ${(err as Error)?.message ?? String(err)}`)
      })
    })
  }

  /** Registers one prefill rank, as `PUT /route` does. */
  register(body: Record<string, unknown>): void {
    const key = ['attn_dp_rank', 'attn_cp_rank', 'attn_tp_rank', 'pp_rank']
      .map((k) => Number(body[k] ?? 0))
      .join('/')
    this.#ranks.set(key, body)
  }

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://localhost')
    let text = ''
    try {
      text = await readBody(req, 1 << 20)
    } catch (err) {
      if (err instanceof BodyTooLargeError) {
        sendText(res, 413, 'Request Entity Too Large')
        return
      }
      throw err
    }
    if (url.pathname === '/health' && req.method === 'GET') {
      sendText(res, 200, 'OK')
      return
    }
    if (url.pathname === '/route') {
      if (req.method === 'PUT') {
        let body: unknown
        try {
          body = JSON.parse(text)
        } catch {
          sendText(res, 400, 'Invalid JSON')
          return
        }
        if (typeof body !== 'object' || body === null) {
          sendText(res, 400, 'Invalid JSON')
          return
        }
        this.register(body as Record<string, unknown>)
        sendText(res, 200, 'OK')
        return
      }
      if (req.method !== 'GET') {
        sendJson(res, 405, 'Method not allowed', { 'content-type': 'application/json' })
        return
      }
      const q = (k: string): string | null => url.searchParams.get(k)
      const dp = q('prefill_dp_rank')
      const cp = q('prefill_cp_rank')
      const tp = q('target_tp_rank')
      const pp = q('target_pp_rank')
      if (!dp || !cp || !tp || !pp) {
        sendText(res, 400, 'Missing inputs for bootstrap server.')
        return
      }
      if ([dp, cp, tp, pp].every((v) => Number(v) === -1)) {
        if (this.#ranks.size < this.#state.expectedRanks) {
          sendText(res, 503, 'Prefill server not fully registered yet')
          return
        }
        sendJson(res, 200, {
          attn_tp_size: 1,
          attn_cp_size: 1,
          dp_size: 1,
          pp_size: 1,
          page_size: this.#state.pageSize,
          kv_cache_dtype: 'auto',
          follow_bootstrap_room: true,
          enable_dsa_cache_layer_split: false,
          prefill_http_port: this.#state.httpPort(),
        })
        return
      }
      const info = this.#ranks.get([dp, cp, tp, pp].map(Number).join('/'))
      if (info === undefined) {
        sendText(res, 404, 'Not Found')
        return
      }
      sendJson(res, 200, { rank_ip: info.rank_ip, rank_port: info.rank_port })
      return
    }
    if (url.pathname === '/register_dp_rank' && req.method === 'POST') {
      const body = safeJson(text) as { bootstrap_room?: unknown; dp_rank?: unknown } | undefined
      if (body?.bootstrap_room === undefined || typeof body.dp_rank !== 'number') {
        sendText(res, 400, 'Missing bootstrap_room or dp_rank')
        return
      }
      // Rooms go up to 2^63: read them exactly from the text, not from the rounded number.
      const room = readBigIntField(text, 'bootstrap_room')
      this.#dpRanks.set(String(typeof room === 'bigint' ? room : body.bootstrap_room), body.dp_rank)
      sendText(res, 200, 'OK')
      return
    }
    if (url.pathname === '/query_dp_ranks' && req.method === 'POST') {
      const body = safeJson(text) as { bootstrap_rooms?: unknown } | undefined
      const exact = readBigIntField(text, 'bootstrap_rooms')
      const rooms = Array.isArray(exact)
        ? exact
        : Array.isArray(body?.bootstrap_rooms)
          ? body.bootstrap_rooms
          : []
      const out: Record<string, number> = {}
      for (const r of rooms) {
        const v = this.#dpRanks.get(String(r))
        if (v !== undefined) out[String(r)] = v
      }
      sendJson(res, 200, out)
      return
    }
    sendText(res, 404, 'Not Found')
  }
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text)
  } catch {
    return undefined
  }
}
