/**
 * What the HTTP handlers share: the configuration, the engine, the faults and the worker's
 * published endpoints.
 *
 * @internal
 * @module
 */
import type { EmulatorConfig } from '../config/options.js'
import type { EmulatorEngine } from '../engine/engine.js'
import { EngineError } from '../engine/types.js'
import type { FaultInjector } from '../faults/faults.js'
import { SglangHttpError, errorResponse, generateError } from '../sglang/errors.js'
import type { Endpoints } from '../sglang/responses.js'

/** @internal */
export interface ServerContext {
  readonly config: EmulatorConfig
  readonly engine: EmulatorEngine
  readonly faults: FaultInjector
  endpoints(): Endpoints
}

/** An engine refusal as SGLang answers it (400 `{"error"}`, or 500 for a failed KV transfer). @internal */
export function asSglangError(err: unknown): unknown {
  if (!(err instanceof EngineError)) return err
  return err.kind === 'kv_transfer'
    ? new SglangHttpError(500, errorResponse(500, err.message))
    : generateError(err.message)
}
