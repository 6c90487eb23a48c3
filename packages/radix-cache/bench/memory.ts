/**
 * Heap bytes per cached token on the agentic script, ours vs the port-style baseline, measured
 * with forced GCs. Run: `node --expose-gc --import tsx packages/radix-cache/bench/memory.ts`
 * (part of `pnpm bench`).
 */
import { RadixCache } from '../src/index.js'
import { NaiveRadixCache } from './baseline/naiveRadix.js'
import { agenticScript } from './workload.js'

const gc = (globalThis as { gc?: () => void }).gc
if (gc === undefined) {
  console.log('memory.ts: run with node --expose-gc to measure heap bytes per token')
  process.exit(0)
}

function used(): number {
  gc!()
  gc!()
  const m = process.memoryUsage()
  return m.heapUsed + m.arrayBuffers
}

const ops = agenticScript({ sessions: 24, turns: 12, systemTokens: 4096 })
const values = new Int32Array(64 * 1024)

function measure(name: string, build: () => { size: () => number }): void {
  const before = used()
  const keep = build()
  const after = used()
  const tokens = keep.size()
  console.log(
    `${name.padEnd(34)} ${tokens} tokens cached, ${((after - before) / tokens).toFixed(1)} bytes/token`,
  )
}

console.log('heap bytes per cached token (agentic script, page 16)')
measure('ours, with KV slot values', () => {
  const c = new RadixCache({ pageSize: 16 })
  for (const op of ops) if (op.kind === 'insert') c.insert(op.tokens, values.subarray(0, op.tokens.length))
  return { size: () => c.totalSize() }
})
measure('ours, lengths only', () => {
  const c = new RadixCache({ pageSize: 16, trackValues: false })
  for (const op of ops) if (op.kind === 'insert') c.insert(op.tokens)
  return { size: () => c.totalSize() }
})
measure('baseline (objects, number[] keys)', () => {
  const c = new NaiveRadixCache(16)
  for (const op of ops) if (op.kind === 'insert') c.insert(op.tokens, values.subarray(0, op.tokens.length))
  return { size: () => c.evictable }
})
