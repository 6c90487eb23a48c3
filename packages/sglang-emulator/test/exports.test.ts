import { expect, it } from 'vitest'
import * as api from '../src/index.js'

it('the public surface: what the barrel exports at runtime (types aside)', () => {
  expect(Object.keys(api).sort()).toEqual([
    'BOS_TOKEN',
    'DEFAULT_EMULATOR_TIMING',
    'EOS_TOKEN',
    'PAD_TOKEN',
    'SglangEmulatorError',
    'SglangEmulatorErrorCode',
    'TOKEN_OFFSET',
    'VOCAB_SIZE',
    'createSglangEmulator',
    'fakeChatTemplate',
    'fakeDetokenize',
    'fakeNextToken',
    'fakePromptHash',
    'fakeTokenize',
  ])
})
