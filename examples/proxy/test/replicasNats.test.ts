import { replicaSuite } from './replicas.js'

// Two proxy replicas on one real nats-server with JetStream, started on a free loopback port.
replicaSuite('nats')
