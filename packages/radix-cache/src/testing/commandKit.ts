import fc from 'fast-check'
import type { RadixCache } from '../tree/radixCache.js'

// Helpers shared by the one-tier (commands.ts) and two-tier (tieredCommands.ts) model-based
// command sets: input arbitraries, the checks both make of evict and of lock counts, and how a
// command prints itself.

/** Fail the current command. */
export function fail(message: string): never {
  throw new Error(message)
}

/** What the command arbitraries draw from (both option interfaces have these fields). */
export interface CommandInputOptions {
  readonly namespaces?: readonly string[]
  readonly alphabet?: readonly number[]
  readonly maxTokens?: number
}

/** Token-sequence and namespace arbitraries for the commands. */
export function commandInputs(
  options: CommandInputOptions,
  defaultAlphabet: readonly number[],
): { tokens: fc.Arbitrary<number[]>; ns: fc.Arbitrary<string> } {
  const namespaces = options.namespaces ?? ['', 'lora-a']
  const alphabet = options.alphabet ?? defaultAlphabet
  const tokens = fc.array(fc.constantFrom(...alphabet), { maxLength: options.maxTokens ?? 20 })
  return { tokens, ns: fc.constantFrom(...namespaces) }
}

/**
 * `evict(numTokens)` freed at least what was asked (or everything evictable), and with page
 * granularity exactly that rounded up to a page.
 */
export function checkEvictCount(
  cache: RadixCache,
  numTokens: number,
  evictable: number,
  evicted: number,
): void {
  if (evicted < Math.min(numTokens, evictable)) fail(`evict(${numTokens}) freed ${evicted} of ${evictable}`)
  if (cache.evictGranularity === 'page') {
    const ps = cache.pageSize
    const exact = Math.min(Math.ceil(numTokens / ps) * ps, evictable)
    if (evicted !== exact) fail(`page eviction freed ${evicted}, expected ${exact}`)
  }
}

/** A lock call returned the tokens the model moved between evictable and protected. */
export function checkLockDelta(what: 'incLockRef' | 'decLockRef', modelMoved: number, delta: number): void {
  if (modelMoved !== delta) fail(`${what} returned ${delta}`)
}

/** `name([tokens], ns="…"<suffix>)`, how a command prints in a counterexample. */
export function describeCall(name: string, tokens: readonly number[], ns: string, suffix = ''): string {
  return `${name}([${tokens.join(',')}], ns=${JSON.stringify(ns)}${suffix})`
}
