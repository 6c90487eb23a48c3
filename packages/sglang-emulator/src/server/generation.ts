/**
 * `/generate` and `/v1/chat/completions`: parse, check, run on the engine, answer (JSON or SSE).
 *
 * @internal
 * @module
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import { readBigIntField, sendJson } from '@kvc/worker-bindings'
import type { EngineOutput, EngineRequest, Progress } from '../engine/types.js'
import { SglangHttpError, errorResponse, generateError, messageOf } from '../sglang/errors.js'
import { chatToGenerate, generateShape, parseGenerateItem, readJsonBody } from '../sglang/request.js'
import {
  type StreamState,
  abortedProgress,
  chatChunk,
  chatCompletion,
  chatUsageChunk,
  generateChunk,
} from '../sglang/responses.js'
import { type ServerContext, asSglangError } from './context.js'

const SSE_HEADERS = { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' }

/** `POST /generate`. @internal */
export async function handleGenerate(
  ctx: ServerContext,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  const { text, json } = await readJsonBody(req, ctx.config.maxBodyBytes)
  ctx.engine.sessions.reap(performance.now())
  const stream = json.stream === true
  const { batch } = generateShape(json)
  if (batch !== undefined) {
    const rooms = readBigIntField(text, 'bootstrap_room')
    const items: EngineRequest[] = []
    for (let i = 0; i < batch; i++)
      items.push(parseItem(ctx, json, i, Array.isArray(rooms) ? rooms[i] : undefined))
    checkRids(ctx, items)
    const outs = await Promise.all(items.map((it) => runNonStream(ctx, it, res)))
    if (outs.some((o) => o === undefined)) return
    sendJson(res, 200, outs)
    return
  }
  const room = readBigIntField(text, 'bootstrap_room')
  const item = parseItem(ctx, json, undefined, Array.isArray(room) ? undefined : room)
  checkRids(ctx, [item])
  try {
    checkSession(ctx, json)
  } catch (err) {
    if (!stream || !(err instanceof SglangHttpError)) throw err
    // Upstream streams a scheduler abort as a chunk with finish_reason abort (status_code 400).
    const message = (err.body as { error?: { message?: string } }).error?.message ?? err.message
    res.writeHead(200, SSE_HEADERS)
    const chunk = generateChunk(
      ctx.config,
      item.rid,
      abortedProgress(item.tokens.length, {
        type: 'abort',
        message,
        status_code: 400,
        err_type: 'BadRequestError',
      }),
    )
    res.end(`data: ${JSON.stringify(chunk)}\n\ndata: [DONE]\n\n`)
    return
  }
  if (!stream) {
    const out = await runNonStream(ctx, item, res)
    if (out !== undefined) sendJson(res, 200, out)
    return
  }
  runStream(ctx, item, res, (p, state) => generateChunk(ctx.config, item.rid, p, state))
}

/** `POST /v1/chat/completions`. @internal */
export async function handleChat(
  ctx: ServerContext,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  const { text, json } = await readJsonBody(req, ctx.config.maxBodyBytes, true)
  const body = chatToGenerate(json)
  const room = readBigIntField(text, 'bootstrap_room')
  const item = parseItem(ctx, body, undefined, Array.isArray(room) ? undefined : room)
  checkRids(ctx, [item])
  checkSession(ctx, body)
  const chat = {
    id: `chatcmpl-${item.rid}`,
    created: Math.floor(Date.now() / 1000),
    model: typeof json.model === 'string' ? json.model : ctx.config.modelName,
  }
  if (json.stream !== true) {
    const controller = track(ctx, item.rid, res)
    try {
      const out = await ctx.engine.execute(item, controller.signal, undefined)
      sendJson(res, 200, chatCompletion(ctx.config, chat, out))
    } catch (e) {
      const err = asSglangError(e)
      if (controller.signal.aborted && (res.destroyed || ctx.engine.closed)) return
      if (err instanceof SglangHttpError) {
        const b = err.body as { error?: { message?: string } }
        if (b?.error?.message !== undefined)
          throw new SglangHttpError(err.status, errorResponse(err.status, b.error.message))
      }
      throw err
    } finally {
      ctx.engine.untrack(item.rid)
    }
    return
  }
  const includeUsage =
    (json.stream_options as { include_usage?: unknown } | undefined)?.include_usage === true
  let first = true
  runStream(
    ctx,
    item,
    res,
    (p, state) => {
      const chunk = chatChunk(chat, p, state, first)
      first = false
      return chunk
    },
    (out) => (includeUsage ? [chatUsageChunk(ctx.config, chat, out)] : []),
  )
}

function parseItem(
  ctx: ServerContext,
  json: Record<string, unknown>,
  index: number | undefined,
  room: bigint | undefined,
): EngineRequest {
  const sessions = ctx.engine.sessions
  return parseGenerateItem(json, index, room, {
    role: ctx.config.role,
    strictPd: ctx.config.strictPd,
    contextLength: ctx.config.contextLength,
    sessionPrompt: (params, tokens) => sessions.prompt(params, tokens),
  })
}

function checkRids(ctx: ServerContext, items: readonly EngineRequest[]): void {
  const seen = new Set<string>()
  for (const it of items) {
    if (ctx.engine.isInflight(it.rid) || seen.has(it.rid))
      throw generateError(`Duplicate request id: ${it.rid}`)
    seen.add(it.rid)
  }
}

/** Session checks that SGLang answers with a 400 before any work. */
function checkSession(ctx: ServerContext, json: Record<string, unknown>): void {
  const sp = json.session_params as Record<string, unknown> | undefined
  if (sp !== undefined && sp !== null && typeof sp.id === 'string') {
    if (!ctx.engine.sessions.isOpen(sp.id))
      throw generateError(`Invalid request: session id ${sp.id} does not exist`)
    if (ctx.engine.sessionCache.getSessionStatus(sp.id)?.active === true) {
      throw generateError(`Invalid request: session ${sp.id} already has a request in flight`)
    }
  }
}

/** Registers the request as in flight; a client that disconnects aborts it. */
function track(ctx: ServerContext, rid: string, res: ServerResponse): AbortController {
  const c = ctx.engine.track(rid)
  res.on('close', () => {
    if (!res.writableFinished) c.abort(new Error('the client disconnected'))
  })
  return c
}

/** Runs one request; its answer, or `undefined` when nobody is left to answer. */
async function runNonStream(
  ctx: ServerContext,
  item: EngineRequest,
  res: ServerResponse,
): Promise<Record<string, unknown> | undefined> {
  const controller = track(ctx, item.rid, res)
  try {
    const out = await ctx.engine.execute(item, controller.signal, undefined)
    return generateChunk(ctx.config, item.rid, out)
  } catch (e) {
    const err = asSglangError(e)
    if (err instanceof SglangHttpError) throw err
    if (controller.signal.aborted) {
      const reason = controller.signal.reason
      if (res.destroyed || ctx.engine.closed) return undefined
      return generateChunk(
        ctx.config,
        item.rid,
        abortedProgress(item.tokens.length, {
          type: 'abort',
          message: reason instanceof Error ? reason.message : 'aborted',
        }),
      )
    }
    throw err
  } finally {
    ctx.engine.untrack(item.rid)
  }
}

/** Runs one request as an SSE stream of `render`ed chunks, then `after`'s, then `[DONE]`. */
function runStream(
  ctx: ServerContext,
  item: EngineRequest,
  res: ServerResponse,
  render: (p: Progress, state: StreamState) => unknown,
  after?: (out: EngineOutput) => unknown[],
): void {
  const controller = track(ctx, item.rid, res)
  const state: StreamState = { ids: 0, text: 0 }
  res.writeHead(200, SSE_HEADERS)
  const write = (obj: unknown): void => {
    if (!res.destroyed) res.write(`data: ${JSON.stringify(obj)}\n\n`)
  }
  ctx.engine
    .execute(item, controller.signal, (p) => {
      if (p.finishReason === null) write(render(p, state))
    })
    .then(
      (out) => {
        write(render(out, state))
        for (const extra of after?.(out) ?? []) write(extra)
      },
      (e: unknown) => {
        const err = asSglangError(e)
        if (err instanceof SglangHttpError) {
          const message = messageOf(err)
          if (err.status === 400 && /session|Invalid request/.test(message)) {
            const finishReason = { type: 'abort', message, status_code: 400, err_type: 'BadRequestError' }
            write(render(abortedProgress(item.tokens.length, finishReason), state))
          } else {
            write({ error: { message } })
          }
        } else if (!controller.signal.aborted) {
          write({ error: { message: (err as Error)?.message ?? String(err) } })
        }
      },
    )
    .finally(() => {
      ctx.engine.untrack(item.rid)
      if (!res.destroyed) res.end('data: [DONE]\n\n')
    })
}
