import { SessionCacheError, type SessionCacheErrorCode } from '../errors/sessionCacheError.js'

/** Throws the package's typed error. */
export function fail(code: SessionCacheErrorCode, message: string, value?: unknown): never {
  throw new SessionCacheError(code, message, value)
}

/** Validate token ids and copy them into a new `Uint32Array` with `spare` free slots at the end. */
export function toTokens(tokens: ArrayLike<number>, spare: number): Uint32Array {
  if (tokens === null || typeof tokens !== 'object' || typeof tokens.length !== 'number') {
    fail(
      'INVALID_REQUEST',
      `inputIds must be an array of token ids, got ${tokens === null ? 'null' : typeof tokens}`,
      tokens,
    )
  }
  const n = tokens.length
  const out = new Uint32Array(n + spare)
  if (tokens instanceof Uint32Array) {
    out.set(tokens)
    return out
  }
  for (let i = 0; i < n; i++) {
    const t = tokens[i]!
    if (!Number.isInteger(t) || t < 0 || t > 0xffffffff) {
      fail('INVALID_REQUEST', `token ${String(t)} at index ${i} is not an integer in [0, 2^32)`, t)
    }
    out[i] = t
  }
  return out
}

/**
 * Whether `a` starts with all of `b` (8 tokens per step: committed prefixes are long). Views that
 * start at the same place of the same buffer (a session's token stream) need no comparison.
 */
export function startsWith(a: Uint32Array, b: Uint32Array): boolean {
  const n = b.length
  if (a.length < n) return false
  if (a.buffer === b.buffer && a.byteOffset === b.byteOffset) return true
  let i = 0
  const n8 = n - 7
  while (i < n8) {
    if (
      (a[i]! ^ b[i]!) |
      (a[i + 1]! ^ b[i + 1]!) |
      (a[i + 2]! ^ b[i + 2]!) |
      (a[i + 3]! ^ b[i + 3]!) |
      (a[i + 4]! ^ b[i + 4]!) |
      (a[i + 5]! ^ b[i + 5]!) |
      (a[i + 6]! ^ b[i + 6]!) |
      (a[i + 7]! ^ b[i + 7]!)
    ) {
      return false
    }
    i += 8
  }
  for (; i < n; i++) if (a[i] !== b[i]) return false
  return true
}

/**
 * The caller's prompt read in place (`copyInputIds: false`): `inputIds` itself, or with
 * `outputFollowsInput` a view of the same buffer from the prompt's start to the buffer's end, so
 * that decode steps can read the tokens that follow the prompt there.
 */
export function lentView(
  inputIds: Uint32Array,
  init: { readonly outputFollowsInput?: boolean },
): Uint32Array {
  if (init.outputFollowsInput !== true) return inputIds
  const buffer = inputIds.buffer
  const avail = Math.floor((buffer.byteLength - inputIds.byteOffset) / 4)
  return avail > inputIds.length ? new Uint32Array(buffer, inputIds.byteOffset, avail) : inputIds
}
