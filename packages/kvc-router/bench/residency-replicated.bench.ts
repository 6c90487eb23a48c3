import { replicatedEvents, residencyBench } from './mooncake.js'

// Mooncake conversation trace replicated across 64 workers (Dynamo's worker duplication): every
// worker receives the whole trace as KV events, so every block ends up held by all 64 workers (the
// worst case for holder masks, and for exclusive overlap every block is boilerplate).
// ResidencyIndex vs a naive per-worker Set<bigint>, same run.
residencyBench({
  name: 'replicated',
  title: 'Mooncake conversation trace replicated across 64 workers',
  events: replicatedEvents,
  iterations: 3,
  warmupIterations: 1,
})
