/** Deterministic agentic op scripts shared by the radix-cache benchmarks. */

export interface AgenticOp {
  readonly kind: 'match' | 'insert'
  readonly tokens: Uint32Array
}

/** A small LCG so the scripts are identical from run to run. */
export function lcg(seed: number): () => number {
  let s = seed >>> 0
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0
    return s / 2 ** 32
  }
}

/**
 * Sessions share a system prefix; each turn matches its prompt (the whole history plus an
 * append), then inserts prompt + output, like a serving engine's cache_finished_req.
 */
export function agenticScript(opts: {
  sessions: number
  turns: number
  systemTokens: number
  seed?: number
}): AgenticOp[] {
  const rand = lcg(opts.seed ?? 7)
  const fresh = (n: number): number[] => Array.from({ length: n }, () => Math.floor(rand() * 150000))
  const system = fresh(opts.systemTokens)
  const histories = Array.from({ length: opts.sessions }, () => [...system])
  const ops: AgenticOp[] = []
  for (let t = 0; t < opts.turns; t++) {
    for (let s = 0; s < opts.sessions; s++) {
      const h = histories[s]!
      h.push(...fresh(100 + Math.floor(rand() * 1500)))
      ops.push({ kind: 'match', tokens: Uint32Array.from(h) })
      h.push(...fresh(50 + Math.floor(rand() * 400)))
      ops.push({ kind: 'insert', tokens: Uint32Array.from(h) })
    }
  }
  return ops
}

export function totalTokens(ops: readonly AgenticOp[], kind: AgenticOp['kind']): number {
  let n = 0
  for (const op of ops) if (op.kind === kind) n += op.tokens.length
  return n
}
