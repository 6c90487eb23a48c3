// Shared imports for the tests: the public API plus a few internals the tests check against.
export * from '../src/index.js'
export { blockBytes as blockBytesForTest } from '../src/protocol/bytes.js'
