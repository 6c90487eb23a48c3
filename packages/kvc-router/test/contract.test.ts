import { describe, expect, it } from 'vitest'
import {
  ADMIT_PATHS,
  ADMIT_REASONS,
  type AdmitResponse,
  RouterError,
  SLO_CLASSES,
  admitRequestJsonSchema,
  admitResponseJsonSchema,
  parseAdmitRequest,
  parseAdmitResponse,
} from '../src/index.js'

const res: AdmitResponse = {
  requestId: 'r1',
  admitted: true,
  reason: 'ok',
  residentTokens: 10,
  needTokens: 600,
  tokenUsageAfter: 0.42,
  transferQueueDepth: 1,
  retractedQueueDepth: 0,
  recommendedPauseMs: 0,
  leaseMs: 5000,
  releasedSessions: ['old'],
}

const codeOf = (f: () => unknown) => {
  try {
    f()
  } catch (e) {
    return e instanceof RouterError ? `${e.code}: ${e.message}` : String(e)
  }
  return 'ok'
}

describe('the admission wire contract', () => {
  it('round-trips through JSON and drops unknown fields', () => {
    const req = {
      v: 1,
      requestId: 'r1',
      sessionId: 's',
      path: 'fast',
      promptTokens: 10,
      appendTokens: 4,
      sloClass: 'batch',
      extra: 1,
    }
    expect(parseAdmitRequest(JSON.parse(JSON.stringify(req)))).toEqual({
      v: 1,
      requestId: 'r1',
      sessionId: 's',
      path: 'fast',
      promptTokens: 10,
      appendTokens: 4,
      sloClass: 'batch',
    })
    expect(parseAdmitResponse(JSON.parse(JSON.stringify({ ...res, junk: true })))).toEqual(res)
  })

  it('names the first bad field', () => {
    const base = { requestId: 'r', sessionId: 's', path: 'seed', promptTokens: 5, appendTokens: 5 }
    expect(codeOf(() => parseAdmitRequest({ ...base, v: 2 }))).toContain('AdmitRequest.v')
    expect(codeOf(() => parseAdmitRequest({ ...base, path: 'slow' }))).toContain('AdmitRequest.path')
    expect(codeOf(() => parseAdmitRequest({ ...base, promptTokens: 1.5 }))).toContain(
      'AdmitRequest.promptTokens',
    )
    expect(codeOf(() => parseAdmitRequest({ ...base, appendTokens: 6 }))).toContain(
      'must not exceed promptTokens',
    )
    expect(codeOf(() => parseAdmitRequest({ ...base, sloClass: 'gold' }))).toContain('AdmitRequest.sloClass')
    expect(codeOf(() => parseAdmitRequest([]))).toContain('INVALID_MESSAGE')
    expect(codeOf(() => parseAdmitResponse({ ...res, reason: 'capacity' }))).toContain(
      "'ok' if and only if admitted",
    )
    expect(codeOf(() => parseAdmitResponse({ ...res, tokenUsageAfter: Number.POSITIVE_INFINITY }))).toContain(
      'tokenUsageAfter',
    )
    expect(codeOf(() => parseAdmitResponse({ ...res, releasedSessions: [1] }))).toContain('releasedSessions')
    expect(codeOf(() => parseAdmitResponse({ ...res, releasableTokens: -1 }))).toContain('releasableTokens')
    expect(parseAdmitResponse({ ...res, releasableTokens: 7 }).releasableTokens).toBe(7)
    expect(codeOf(() => parseAdmitResponse({ ...res, retractedSessions: 's3' }))).toContain(
      'retractedSessions',
    )
    expect(parseAdmitResponse({ ...res, retractedSessions: ['s3'] }).retractedSessions).toEqual(['s3'])
    expect('retractedSessions' in parseAdmitResponse(res)).toBe(false)
  })

  it('the JSON schemas list the same enums and required fields as the validators', () => {
    expect(admitRequestJsonSchema.properties.path.enum).toEqual([...ADMIT_PATHS])
    expect(admitRequestJsonSchema.properties.sloClass.enum).toEqual([...SLO_CLASSES])
    expect(admitResponseJsonSchema.properties.reason.enum).toEqual([...ADMIT_REASONS])
    for (const k of admitResponseJsonSchema.required) {
      const { [k]: _, ...rest } = res as unknown as Record<string, unknown>
      expect(codeOf(() => parseAdmitResponse(rest))).toContain('INVALID_MESSAGE')
    }
    for (const k of admitRequestJsonSchema.required) {
      const req: Record<string, unknown> = {
        requestId: 'r',
        sessionId: 's',
        path: 'seed',
        promptTokens: 5,
        appendTokens: 5,
      }
      delete req[k]
      expect(codeOf(() => parseAdmitRequest(req))).toContain('INVALID_MESSAGE')
    }
  })
})
