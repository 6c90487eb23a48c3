/**
 * SGLang input parsing and validation: request bodies read like FastAPI reads them, `/generate`
 * items (text or `input_ids`, sampling parameters, sessions, namespaces, bootstrap fields) and
 * chat requests rendered to a generate body. Refusals are SGLang's status and shape.
 *
 * @internal
 * @module
 */
import { randomUUID } from 'node:crypto'
import type { IncomingMessage } from 'node:http'
import { BodyTooLargeError, mediaType, readBody } from '@kvc/worker-bindings'
import type { EmulatorRole } from '../config/options.js'
import type { EngineRequest, SessionParams } from '../engine/types.js'
import { fakeChatTemplate, fakeTokenize } from '../model/fakeModel.js'
import { validateChatRequest } from './chatRequest.js'
import { SglangHttpError, errorResponse, generateError, validationError } from './errors.js'

/** A request body: its text (for exact 64-bit fields) and its JSON object. @internal */
export interface JsonBody {
  readonly text: string
  readonly json: Record<string, unknown>
}

/** Reads and parses a JSON body like FastAPI: 413 above the limit, 400 ErrorResponse when malformed. @internal */
export async function readJsonBody(
  req: IncomingMessage,
  maxBodyBytes: number,
  requireJsonType = false,
): Promise<JsonBody> {
  if (requireJsonType && mediaType(req) !== 'application/json') {
    req.resume()
    throw validationError(
      "[{'loc': ('header', 'content-type'), 'msg': \"Unsupported Media Type: Only 'application/json' is allowed\", 'type': 'value_error'}]",
    )
  }
  let text: string
  try {
    text = await readBody(req, maxBodyBytes)
  } catch (err) {
    if (err instanceof BodyTooLargeError) {
      throw new SglangHttpError(
        413,
        errorResponse(413, `Request body exceeds the limit of ${err.limit} bytes`),
      )
    }
    throw err
  }
  if (text.trim().length === 0) {
    throw validationError(
      "1 validation error:\n  {'type': 'missing', 'loc': ('body',), 'msg': 'Field required', 'input': None}",
    )
  }
  let json: unknown
  try {
    json = JSON.parse(text)
  } catch (err) {
    throw validationError(
      `1 validation error:\n  {'type': 'json_invalid', 'loc': ('body', 0), 'msg': 'JSON decode error', 'input': {}, 'ctx': {'error': '${(err as Error).message.replace(/'/g, '"')}'}}`,
    )
  }
  if (typeof json !== 'object' || json === null || Array.isArray(json)) {
    throw validationError(
      "1 validation error:\n  {'type': 'model_attributes_type', 'loc': ('body',), 'msg': 'Input should be a valid dictionary or object to extract fields from'}",
    )
  }
  return { text, json: json as Record<string, unknown> }
}

/**
 * How a `/generate` body is shaped: refuses a body without input or with two, and `input_embeds`
 * (not emulated). `batch`: the number of items of a batch request, `undefined` for one request.
 * @internal
 */
export function generateShape(json: Record<string, unknown>): { readonly batch: number | undefined } {
  const isBatch =
    Array.isArray(json.text) || (Array.isArray(json.input_ids) && Array.isArray(json.input_ids[0]))
  const inputs = [json.text, json.input_ids, json.input_embeds].filter((x) => x !== undefined && x !== null)
  if (inputs.length === 0) throw generateError('Either text, input_ids or input_embeds should be provided.')
  if (inputs.length > 1) throw generateError('Either text or input_ids should be provided, not both.')
  if (json.input_embeds !== undefined && json.input_embeds !== null) {
    throw generateError('input_embeds is not supported by the emulator.')
  }
  if (!isBatch) return { batch: undefined }
  if (json.stream === true) throw generateError('Streaming batch requests are not supported by the emulator.')
  return {
    batch: Array.isArray(json.text) ? (json.text as unknown[]).length : (json.input_ids as unknown[]).length,
  }
}

/** What parsing a generate item needs to know of the worker. @internal */
export interface ParseContext {
  readonly role: EmulatorRole
  readonly strictPd: boolean
  readonly contextLength: number
  /** The prompt of a classic session's turn: the session's history (per `params`) + `tokens`. */
  sessionPrompt(params: SessionParams, tokens: number[]): number[]
}

/**
 * Parses item `index` of a batch (or the single request, `index` undefined) of a `/generate`
 * body into an {@link EngineRequest}. `room` is the exact `bootstrap_room` read from the body's
 * text (rooms go up to 2^63).
 * @internal
 */
export function parseGenerateItem(
  json: Record<string, unknown>,
  index: number | undefined,
  room: bigint | undefined,
  ctx: ParseContext,
): EngineRequest {
  const pick = <T>(v: unknown): T | undefined =>
    (index !== undefined && Array.isArray(v) ? v[index] : v) as T | undefined
  let tokens: number[]
  const text = pick<unknown>(json.text)
  if (text !== undefined) {
    if (typeof text !== 'string') throw validationError('text: Input should be a valid string')
    tokens = fakeTokenize(text)
  } else {
    const ids = pick<unknown>(json.input_ids)
    if (
      !Array.isArray(ids) ||
      ids.some((t) => typeof t !== 'number' || !Number.isInteger(t) || t < 0 || t > 0x7fffffff)
    ) {
      throw validationError('input_ids: Input should be a list of non-negative integers')
    }
    tokens = ids as number[]
  }
  const sp = (pick<Record<string, unknown>>(json.sampling_params) ?? {}) as Record<string, unknown>
  if (typeof sp !== 'object' || sp === null)
    throw validationError('sampling_params: Input should be a valid dictionary')
  const maxNew = sp.max_new_tokens ?? 128
  if (typeof maxNew !== 'number' || !Number.isInteger(maxNew)) {
    throw generateError(`max_new_tokens must be an integer, got ${JSON.stringify(maxNew) ?? String(maxNew)}.`)
  }
  if (maxNew < 0) throw generateError(`max_new_tokens must be at least 0, got ${maxNew}.`)
  const stop = sp.stop === undefined || sp.stop === null ? [] : Array.isArray(sp.stop) ? sp.stop : [sp.stop]
  const stopIds = Array.isArray(sp.stop_token_ids) ? (sp.stop_token_ids as number[]) : []
  const ridRaw = pick<unknown>(json.rid)
  const rid = typeof ridRaw === 'string' && ridRaw.length > 0 ? ridRaw : randomUUID().replace(/-/g, '')
  const extra = pick<unknown>(json.extra_key)
  const salt = pick<unknown>(json.cache_salt)
  const extraKey =
    typeof extra === 'string' || typeof salt === 'string'
      ? [typeof salt === 'string' ? salt : '', typeof extra === 'string' ? extra : '']
          .filter((s) => s)
          .join('|')
      : undefined
  // Sessions: classic session_params (prompt rebuilt from the session's history) or the top-level tag.
  let sessionId: string | undefined
  let historySession: string | undefined
  const params = json.session_params as Record<string, unknown> | undefined
  if (params !== undefined && params !== null && typeof params.id === 'string') {
    tokens = ctx.sessionPrompt(params as unknown as SessionParams, tokens)
    sessionId = params.id
    historySession = params.id
  } else if (typeof json.session_id === 'string' && json.session_id.length > 0) {
    sessionId = json.session_id
  }
  const contextLength = ctx.contextLength
  if (tokens.length === 0) throw generateError('The input_ids should not be empty.')
  if (tokens.length >= contextLength) {
    throw generateError(
      `The input (${tokens.length} tokens) is longer than the model's context length (${contextLength} tokens).`,
    )
  }
  if (tokens.length + maxNew > contextLength) {
    throw generateError(
      `Requested token count exceeds the model's maximum context length of ${contextLength} tokens. You requested a total of ${tokens.length + maxNew} tokens: ${tokens.length} tokens from the input messages and ${maxNew} tokens for the completion. Please reduce the number of tokens in the input messages or the completion to fit within the limit.`,
    )
  }
  const host = pick<unknown>(json.bootstrap_host)
  const port = pick<unknown>(json.bootstrap_port)
  const roomRaw = room ?? pick<unknown>(json.bootstrap_room)
  let bootstrap: EngineRequest['bootstrap']
  if (roomRaw !== undefined && roomRaw !== null) {
    bootstrap = {
      host: typeof host === 'string' ? host : '127.0.0.1',
      port: typeof port === 'number' ? port : null,
      room: String(roomRaw),
    }
  } else if (ctx.role === 'prefill' || (ctx.role === 'decode' && ctx.strictPd)) {
    throw generateError(
      `Invalid request: Disaggregated request received without boostrap room id. req.rid='${rid}'`,
    )
  }
  return {
    rid,
    tokens,
    sampling: {
      maxNewTokens: ctx.role === 'prefill' ? Math.min(1, maxNew) : maxNew,
      stop: stop.filter((s): s is string => typeof s === 'string' && s.length > 0),
      stopTokenIds: new Set(stopIds),
      noStopTrim: sp.no_stop_trim === true,
    },
    extraKey,
    priority: typeof json.priority === 'number' ? json.priority : 0,
    sessionId,
    historySession,
    bootstrap,
  }
}

const CHAT_PASSTHROUGH = [
  'rid',
  'session_params',
  'session_id',
  'extra_key',
  'cache_salt',
  'priority',
  'bootstrap_host',
  'bootstrap_port',
]

/**
 * Validates a `/v1/chat/completions` body (`validateChatRequest`: SGLang's checks and wording)
 * and renders it as the `/generate` body SGLang's chat handler builds: the prompt through the chat
 * template, `max_completion_tokens` (or `max_tokens`) and `stop`, and the session, namespace and
 * bootstrap fields passed through.
 * @internal
 */
export function chatToGenerate(json: Record<string, unknown>): Record<string, unknown> {
  const { messages, maxTokens } = validateChatRequest(json)
  const prompt = fakeChatTemplate(messages)
  const maxNew = maxTokens ?? 128
  const body: Record<string, unknown> = {
    text: prompt,
    sampling_params: {
      max_new_tokens: maxNew,
      ...(json.stop === undefined ? {} : { stop: json.stop }),
    },
  }
  for (const k of CHAT_PASSTHROUGH) if (json[k] !== undefined) body[k] = json[k]
  return body
}

/** An `/open_session` body: the id to open (given, or a fresh one) and its timeout. @internal */
export function parseOpenSession(
  json: Record<string, unknown>,
  enableStreamingSession: boolean,
): { readonly id: string; readonly timeoutMs: number | undefined } {
  if (typeof json.capacity_of_str_len !== 'number' || !Number.isInteger(json.capacity_of_str_len)) {
    throw validationError(
      '1 validation error for OpenSessionReqInput\ncapacity_of_str_len\n  Field required [type=missing, input_value={}, input_type=dict]',
    )
  }
  if (json.session_id !== undefined && json.session_id !== null && typeof json.session_id !== 'string') {
    throw validationError(
      '1 validation error for OpenSessionReqInput\nsession_id\n  Input should be a valid string',
    )
  }
  if (json.streaming === true && !enableStreamingSession) {
    throw generateError('Streaming sessions are disabled. Launch the server with --enable-streaming-session.')
  }
  const id =
    typeof json.session_id === 'string' && json.session_id.length > 0
      ? json.session_id
      : randomUUID().replace(/-/g, '')
  const timeoutMs = typeof json.timeout === 'number' && json.timeout > 0 ? json.timeout * 1000 : undefined
  return { id, timeoutMs }
}

/** The session id of a `/close_session` body. @internal */
export function parseCloseSession(json: Record<string, unknown>): string {
  const id = json.session_id
  if (typeof id !== 'string') {
    throw validationError(
      '1 validation error for CloseSessionReqInput\nsession_id\n  Field required [type=missing]',
    )
  }
  return id
}
