/**
 * SGLang's error answers: the status and body shape each kind of failure gets upstream.
 *
 * @internal
 * @module
 */

/** A request refused with SGLang's status and body. @internal */
export class SglangHttpError extends Error {
  constructor(
    readonly status: number,
    readonly body: unknown,
  ) {
    super(typeof body === 'string' ? body : JSON.stringify(body))
  }
}

/** SGLang's `ErrorResponse` (the HTTPException / validation handlers). @internal */
export function errorResponse(code: number, message: string): Record<string, unknown> {
  return { object: 'error', message, type: httpPhrase(code), param: null, code }
}

const PHRASES: Readonly<Record<number, string>> = {
  400: 'Bad Request',
  404: 'Not Found',
  413: 'Payload Too Large',
  429: 'Too Many Requests',
  500: 'Internal Server Error',
  503: 'Service Unavailable',
}

function httpPhrase(code: number): string {
  return PHRASES[code] ?? String(code)
}

/** A body that fails FastAPI validation: 400 with `ErrorResponse`. @internal */
export function validationError(message: string): SglangHttpError {
  return new SglangHttpError(400, errorResponse(400, message))
}

/** A ValueError inside generate: 400 `{"error": {"message"}}` (`_create_error_response`). @internal */
export function generateError(message: string): SglangHttpError {
  return new SglangHttpError(400, { error: { message } })
}

/** The message of an error body in either shape. @internal */
export function messageOf(err: SglangHttpError): string {
  const body = err.body as { error?: { message?: string }; message?: string } | undefined
  return body?.error?.message ?? body?.message ?? String(err.message)
}
