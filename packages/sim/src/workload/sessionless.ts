import type { TurnSpec, Workload } from './types.js'

/**
 * A request of a trace without sessions (Azure, Mooncake): a turn of its own, its whole prompt
 * appended, at least one output token.
 */
export function sessionlessTurn(
  id: number,
  arrivalMs: number,
  inputLength: number,
  outputLength: number,
  reuseFraction: number,
): TurnSpec {
  return {
    id,
    session: -1,
    turnIndex: 0,
    arrivalMs,
    thinkMs: 0,
    inputLength,
    outputLength: Math.max(1, outputLength),
    appendTokens: inputLength,
    reuseFraction,
  }
}

/** A workload of sessionless turns, arriving open-loop at their trace times, with no recorded outputs. */
export function sessionlessWorkload(
  o: Pick<Workload, 'name' | 'source' | 'turns' | 'tokenScale' | 'suggestedPageSize' | 'promptTokens'> & {
    readonly blockTokens?: number
  },
): Workload {
  return {
    name: o.name,
    source: o.source,
    arrivalMode: 'open',
    sessions: 0,
    sessionLabels: [],
    turns: o.turns,
    notes: [],
    tokenScale: o.tokenScale,
    suggestedPageSize: o.suggestedPageSize,
    ...(o.blockTokens === undefined ? {} : { blockTokens: o.blockTokens }),
    promptTokens: o.promptTokens,
    outputTokens: () => undefined,
  }
}
