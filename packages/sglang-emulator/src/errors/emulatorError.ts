/**
 * The error type of `@kvc/sglang-emulator`.
 *
 * @module
 */

/**
 * Error codes raised by `@kvc/sglang-emulator`. Requests the emulated worker refuses are not
 * errors of this package: they are HTTP answers with SGLang's status and body.
 *
 * | code | raised when |
 * |---|---|
 * | `INVALID_OPTION` | an option of `createSglangEmulator` is out of range (role, page size, capacity, a timing parameter...) |
 *
 * @example
 * ```ts
 * import { SglangEmulatorErrorCode } from '@kvc/sglang-emulator'
 * SglangEmulatorErrorCode.InvalidOption // 'INVALID_OPTION'
 * ```
 */
export const SglangEmulatorErrorCode = {
  InvalidOption: 'INVALID_OPTION',
} as const

/**
 * One of the string codes of {@link SglangEmulatorErrorCode}.
 *
 * @example
 * ```ts
 * import type { SglangEmulatorErrorCode } from '@kvc/sglang-emulator'
 * const code: SglangEmulatorErrorCode = 'INVALID_OPTION'
 * ```
 */
export type SglangEmulatorErrorCode = (typeof SglangEmulatorErrorCode)[keyof typeof SglangEmulatorErrorCode]

/**
 * The only error type `@kvc/sglang-emulator` throws: `code` says what went wrong, `value`
 * carries the offending value. Nothing is started when an option is refused.
 *
 * @example
 * ```ts
 * import { SglangEmulatorError, createSglangEmulator } from '@kvc/sglang-emulator'
 * try {
 *   await createSglangEmulator({ pageSize: 0 })
 * } catch (err) {
 *   if (err instanceof SglangEmulatorError) console.log(err.code, err.value) // INVALID_OPTION 0
 * }
 * ```
 */
export class SglangEmulatorError extends Error {
  override readonly name = 'SglangEmulatorError'
  /** Machine-readable reason. */
  readonly code: SglangEmulatorErrorCode
  /** The offending value. */
  readonly value: unknown

  constructor(code: SglangEmulatorErrorCode, message: string, value?: unknown) {
    super(message)
    this.code = code
    this.value = value
  }
}

/** @internal Throws `INVALID_OPTION` unless `ok`. */
export function checkOption(ok: boolean, message: string, value: unknown): void {
  if (!ok) throw new SglangEmulatorError('INVALID_OPTION', message, value)
}
