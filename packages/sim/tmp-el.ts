import { generateAgenticWorkload, runSimulation } from './src/index.js'
for (const seed of [1, 2, 3]) {
  const r = runSimulation({
    workload: generateAgenticWorkload({ seed }),
    topology: { kind: 'pd', prefill: 2, decode: 6 },
    policy: 'kvc:pathChoice=adaptive:elastic=on', seed, timeScale: 10, maxConcurrentSessions: 32,
  })
  console.log(seed, JSON.stringify(r.adaptive))
}
