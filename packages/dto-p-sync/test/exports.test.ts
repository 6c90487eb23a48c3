import { describe, expect, it } from 'vitest'
import * as api from '../src/index.js'
import * as testing from '../src/testing/index.js'

// Pin the public surface: adding or removing an export is a deliberate, reviewed change.
describe('public surface', () => {
  it('exports exactly these runtime values', () => {
    expect(Object.keys(api).sort()).toEqual(
      [
        'BLOCK_HEADER_BYTES',
        'DEFAULT_PRIORITY_WEIGHTS',
        'DtoPSyncError',
        'DtoPSyncErrorCode',
        'InMemoryLink',
        'InMemoryNetwork',
        'KvEventIndex',
        'MESSAGE_HEADER_BYTES',
        'OfferBuilder',
        'REPLY_BYTES',
        'RETIRED_SESSIONS_KEPT',
        'SyncSink',
        'SyncSource',
        'messageBytes',
        'planSync',
        'priorityScore',
        'transferTimeMs',
        'wireSync',
      ].sort(),
    )
    expect(Object.keys(testing).sort()).toEqual(
      [
        'SyncHarness',
        'checkSyncInvariants',
        'checkTheorem4',
        'fnvBlockHasher',
        'seededRandom',
        'syncCommands',
        'syncHarnessOptions',
        'syncScenarioSetup',
      ].sort(),
    )
  })
})
