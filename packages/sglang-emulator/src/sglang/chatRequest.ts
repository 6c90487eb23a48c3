/**
 * Validation of a `/v1/chat/completions` body as SGLang's `ChatCompletionRequest` (a Pydantic v2
 * model in lax mode) validates it: the same coercions (`"10"` and `10.0` are the integer 10) and
 * the same refusals, worded as Pydantic words them (`Input should be a valid integer, got a
 * number with a fractional part [type=int_from_float, ...]`), answered as SGLang's 400
 * `ErrorResponse`. What the emulator does not emulate (`n` other than 1) is refused by name
 * rather than silently ignored.
 *
 * @internal
 * @module
 */
import { generateError, validationError } from './errors.js'

/** One Pydantic error line: where, what, its type tag and the input. */
interface FieldError {
  readonly loc: string
  readonly msg: string
  readonly type: string
  readonly input: unknown
}

/** Python's `repr` of a JSON value, as Pydantic prints `input_value` (shortened). */
function pyRepr(v: unknown): string {
  let s: string
  if (v === null || v === undefined) s = 'None'
  else if (v === true) s = 'True'
  else if (v === false) s = 'False'
  else if (typeof v === 'string') s = `'${v.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`
  else if (typeof v === 'number') s = Number.isInteger(v) && !Object.is(v, -0) ? String(v) : pyFloat(v)
  else if (Array.isArray(v)) s = `[${v.slice(0, 8).map(pyRepr).join(', ')}${v.length > 8 ? ', ...' : ''}]`
  else {
    const entries = Object.entries(v as Record<string, unknown>)
    s = `{${entries
      .slice(0, 8)
      .map(([k, x]) => `${pyRepr(k)}: ${pyRepr(x)}`)
      .join(', ')}${entries.length > 8 ? ', ...' : ''}}`
  }
  return s.length > 100 ? `${s.slice(0, 97)}...` : s
}

function pyFloat(v: number): string {
  if (Number.isNaN(v)) return 'nan'
  if (!Number.isFinite(v)) return v > 0 ? 'inf' : '-inf'
  const s = String(v)
  return s.includes('.') || s.includes('e') ? s : `${s}.0`
}

/** Python's type name of a JSON value, as Pydantic prints `input_type`. */
function pyType(v: unknown): string {
  if (v === null || v === undefined) return 'NoneType'
  if (typeof v === 'boolean') return 'bool'
  if (typeof v === 'string') return 'str'
  if (typeof v === 'number') return Number.isInteger(v) ? 'int' : 'float'
  return Array.isArray(v) ? 'list' : 'dict'
}

function refuse(errors: readonly FieldError[]): never {
  const n = errors.length
  const lines = errors.map(
    (e) =>
      `${e.loc}\n  ${e.msg} [type=${e.type}, input_value=${pyRepr(e.input)}, input_type=${pyType(e.input)}]`,
  )
  throw validationError(
    `${n} validation error${n === 1 ? '' : 's'} for ChatCompletionRequest\n${lines.join('\n')}`,
  )
}

/**
 * An optional integer field in Pydantic's lax mode: `null` / absent is `undefined`; an integer,
 * a float without a fractional part and a string of an integer are accepted; anything else is an
 * error (returned, not thrown, so that every error of the body is reported together).
 */
function laxInt(loc: string, v: unknown): number | undefined | FieldError {
  if (v === undefined || v === null) return undefined
  if (typeof v === 'number') {
    if (Number.isInteger(v)) return v
    if (!Number.isFinite(v))
      return { loc, msg: 'Input should be a finite number', type: 'finite_number', input: v }
    return {
      loc,
      msg: 'Input should be a valid integer, got a number with a fractional part',
      type: 'int_from_float',
      input: v,
    }
  }
  if (typeof v === 'string') {
    const t = v.trim()
    if (/^[+-]?\d+$/.test(t)) return Number(t)
    return {
      loc,
      msg: 'Input should be a valid integer, unable to parse string as an integer',
      type: 'int_parsing',
      input: v,
    }
  }
  // Lax mode takes a bool as 0 / 1.
  if (typeof v === 'boolean') return v ? 1 : 0
  return { loc, msg: 'Input should be a valid integer', type: 'int_type', input: v }
}

const isError = (x: unknown): x is FieldError => typeof x === 'object' && x !== null && 'msg' in x

/**
 * What the emulator takes from a validated chat request: the messages, the token budget
 * (`max_completion_tokens`, else `max_tokens`, coerced as Pydantic coerces them) and `stream`.
 * @internal
 */
export interface ValidatedChat {
  readonly messages: readonly { readonly role: string; readonly content: unknown }[]
  readonly maxTokens: number | undefined
}

/**
 * Validates a chat body like SGLang's `ChatCompletionRequest` (see the module comment). Throws the
 * 400 `ErrorResponse` SGLang answers, listing every bad field; a negative token budget gets
 * SGLang's sampling-parameter message.
 * @internal
 */
export function validateChatRequest(json: Record<string, unknown>): ValidatedChat {
  const errors: FieldError[] = []
  const messages = json.messages
  if (messages === undefined) {
    errors.push({ loc: 'messages', msg: 'Field required', type: 'missing', input: json })
  } else if (!Array.isArray(messages)) {
    errors.push({ loc: 'messages', msg: 'Input should be a valid list', type: 'list_type', input: messages })
  } else if (messages.length === 0) {
    errors.push({
      loc: 'messages',
      msg: 'List should have at least 1 item after validation, not 0',
      type: 'too_short',
      input: messages,
    })
  } else {
    messages.forEach((m: unknown, i) => {
      if (typeof m !== 'object' || m === null || Array.isArray(m)) {
        errors.push({
          loc: `messages.${i}`,
          msg: 'Input should be a valid dictionary or object to extract fields from',
          type: 'model_attributes_type',
          input: m,
        })
        return
      }
      const o = m as Record<string, unknown>
      if (o.role === undefined)
        errors.push({ loc: `messages.${i}.role`, msg: 'Field required', type: 'missing', input: o })
      else if (typeof o.role !== 'string')
        errors.push({
          loc: `messages.${i}.role`,
          msg: 'Input should be a valid string',
          type: 'string_type',
          input: o.role,
        })
      const c = o.content
      if (c !== undefined && c !== null && typeof c !== 'string' && !Array.isArray(c)) {
        // Pydantic reports each member of the union `str | list[ContentPart] | None`.
        errors.push(
          {
            loc: `messages.${i}.content.str`,
            msg: 'Input should be a valid string',
            type: 'string_type',
            input: c,
          },
          {
            loc: `messages.${i}.content.list[ChatCompletionMessageContentPart]`,
            msg: 'Input should be a valid list',
            type: 'list_type',
            input: c,
          },
        )
      }
    })
  }
  let maxTokens: number | undefined
  for (const key of ['max_tokens', 'max_completion_tokens'] as const) {
    const r = laxInt(key, json[key])
    if (isError(r)) errors.push(r)
    else if (r !== undefined && (key === 'max_completion_tokens' || maxTokens === undefined)) maxTokens = r
  }
  const n = laxInt('n', json.n)
  if (isError(n)) errors.push(n)
  if (json.stream !== undefined && json.stream !== null && typeof json.stream !== 'boolean')
    errors.push({
      loc: 'stream',
      msg: 'Input should be a valid boolean',
      type: 'bool_type',
      input: json.stream,
    })
  if (errors.length > 0) refuse(errors)
  if (typeof n === 'number' && n !== 1)
    throw generateError(`n=${n} is not supported by the emulator: it generates one choice per request (n=1).`)
  if (maxTokens !== undefined && maxTokens < 0)
    throw generateError(`max_new_tokens must be at least 0, got ${maxTokens}.`)
  return { messages: messages as ValidatedChat['messages'], maxTokens }
}
