import { replicaSuite } from './replicas.js'

// Two proxy replicas on one real redis-server (no persistence), started on a free loopback port.
replicaSuite('redis')
