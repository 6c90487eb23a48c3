import { residencyBench, routedEvents } from './mooncake.js'

// Mooncake conversation trace, routed over 64 workers: each request goes to one worker (hash of its
// first two blocks), whose LRU of 4,096 blocks stores the request's new blocks and evicts
// (BlockStored / BlockRemoved events). ResidencyIndex vs a naive per-worker Set<bigint>, same run.
residencyBench({
  name: 'routed',
  title: 'Mooncake conversation trace routed over 64 workers (LRU 4,096 blocks each)',
  events: (t) => routedEvents(t, 4096),
  iterations: 20,
  warmupIterations: 3,
})
