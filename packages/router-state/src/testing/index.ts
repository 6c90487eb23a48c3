/**
 * Test helpers for `@kvc/router-state` and code that runs replicas on it: a real `nats-server` or
 * `redis-server` started and stopped by a test (with crashes and restarts), a free loopback port,
 * and waits for what replicas learn from each other asynchronously. Needs the server binaries on
 * the `PATH`; no other dependency.
 *
 * @packageDocumentation
 */
export {
  freePort,
  hasStateServer,
  startStateServer,
  type StateServer,
  type StateServerKind,
} from './servers.js'
export { eventually, expectNoLoad } from './checks.js'
