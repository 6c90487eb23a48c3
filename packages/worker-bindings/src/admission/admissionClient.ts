/**
 * The admission RPC (Algorithm 2 over HTTP): a router asks a D worker's sidecar "can you take this
 * turn?". The contract (`AdmitRequest` / `AdmitResponse`) is `@kvc/kvc-router`'s.
 *
 * @module
 */
import {
  ADMIT_HTTP_PATH,
  type AdmitRequest,
  type AdmitResponse,
  RouterError,
  parseAdmitRequest,
  parseAdmitResponse,
} from '@kvc/kvc-router'
import { WorkerBindingsError } from '../errors/workerBindingsError.js'
import { type CallOptions, type ClientOptions, HttpTransport } from '../transport/httpTransport.js'

/**
 * Options of {@link AdmissionClient}.
 *
 * @example
 * ```ts
 * import { AdmissionClient, type AdmissionClientOptions } from '@kvc/worker-bindings'
 * const opts: AdmissionClientOptions = { baseURL: 'http://10.0.0.6:30002', timeout: 300 }
 * const admission = new AdmissionClient(opts)
 * ```
 */
export interface AdmissionClientOptions extends ClientOptions {
  /** Path of the admission endpoint (default `ADMIT_HTTP_PATH`, `/kvc/v1/admit`). */
  readonly path?: string
}

/**
 * Client of a D worker's admission endpoint. Defaults follow the kvc design (500 ms timeout,
 * 3 tries, backoff 50 ms × 2^n with full jitter). Admission is idempotent by `requestId` (the
 * worker answers a repeated id with the same lease), so timeouts, connection errors, 408/409/429
 * and 5xx are retried.
 *
 * The request is validated before sending (`INVALID_ARGUMENT`, nothing sent) and the answer
 * after (`BAD_RESPONSE` if it is not a valid `AdmitResponse` or echoes another `requestId`).
 *
 * @example
 * ```ts
 * import { AdmissionClient } from '@kvc/worker-bindings'
 * const admission = new AdmissionClient({ baseURL: 'http://10.0.0.6:30001' })
 * const answer = await admission.admit({
 *   requestId: 's1/t7/a0', sessionId: 's1', path: 'fast', promptTokens: 41_000, appendTokens: 1_200,
 * })
 * if (!answer.admitted) console.log(answer.reason, answer.recommendedPauseMs)
 * ```
 */
export class AdmissionClient {
  readonly http: HttpTransport
  readonly path: string

  constructor(options: AdmissionClientOptions) {
    this.http = new HttpTransport({
      timeout: 500,
      maxRetries: 2,
      ...options,
      retry: { baseDelayMs: 50, maxDelayMs: 1_000, jitter: 'full', ...options.retry },
    })
    this.path = options.path ?? ADMIT_HTTP_PATH
  }

  get baseURL(): string {
    return this.http.baseURL
  }

  /** Sends one admission request and returns the validated answer. */
  async admit(request: AdmitRequest, options?: CallOptions): Promise<AdmitResponse> {
    let req: AdmitRequest
    try {
      req = parseAdmitRequest(request)
    } catch (cause) {
      throw new WorkerBindingsError('INVALID_ARGUMENT', `invalid AdmitRequest: ${messageOf(cause)}`, {
        value: request,
        cause,
      })
    }
    const json = await this.http.json<unknown>(
      { method: 'POST', path: this.path, body: req, idempotent: true },
      options,
    )
    let res: AdmitResponse
    try {
      res = parseAdmitResponse(json)
    } catch (cause) {
      throw new WorkerBindingsError('BAD_RESPONSE', `invalid AdmitResponse: ${messageOf(cause)}`, {
        value: json,
        cause,
        endpoint: this.baseURL,
      })
    }
    if (res.requestId !== req.requestId) {
      throw new WorkerBindingsError(
        'BAD_RESPONSE',
        `AdmitResponse for ${res.requestId}, asked ${req.requestId}`,
        {
          value: json,
          endpoint: this.baseURL,
        },
      )
    }
    return res
  }
}

function messageOf(err: unknown): string {
  return err instanceof RouterError || err instanceof Error ? err.message : String(err)
}
