import { type KvEvent, PagedAllocator, RadixCache } from '@kvc/radix-cache'
import { cachedPages } from '@kvc/radix-cache/testing'
import {
  OfferBuilder,
  type SyncBlock,
  SyncSink,
  type SyncSinkOptions,
  type TransferMessage,
} from '../src/index.js'
import { checkSyncInvariants, fnvBlockHasher } from '../src/testing/index.js'

export const hasher = fnvBlockHasher()

/** P: a radix cache over a paged pool, with a sink wired to its KV events, and a manual clock. */
export function prefillSide(
  opts: { pageSize?: number; poolPages?: number; wireEvents?: boolean } & Partial<
    Omit<SyncSinkOptions, 'cache' | 'allocator' | 'now'>
  > = {},
) {
  const ps = opts.pageSize ?? 4
  const clock = { t: 0 }
  const pool = new PagedAllocator({ size: (opts.poolPages ?? 64) * ps, pageSize: ps })
  let sink: SyncSink | undefined
  const listeners: ((e: KvEvent) => void)[] = []
  const cache = new RadixCache({
    pageSize: ps,
    allocator: pool,
    blockHasher: hasher,
    now: () => clock.t,
    ...(opts.wireEvents === false
      ? {}
      : {
          onEvent: (e: KvEvent) => {
            sink?.observe(e)
            for (const l of listeners) l(e)
          },
        }),
  })
  const { pageSize: _p, poolPages: _pp, wireEvents: _w, ...sinkOpts } = opts
  sink = new SyncSink({ cache, allocator: pool, blockHasher: hasher, now: () => clock.t, ...sinkOpts })
  const check = (): void => checkSyncInvariants({ cache, pool, sink: sink!, poolSize: pool.size })
  return { cache, pool, sink, clock, check, listeners, pages: () => cachedPages(cache) }
}

/** D's chain of a history (newest sampled token excluded). */
export function chainOf(history: readonly number[], ps = 4, sessionId = 's'): readonly SyncBlock[] {
  const offers = new OfferBuilder({ pageSize: ps, blockHasher: hasher })
  offers.commitTurn(sessionId, history)
  return offers.session(sessionId)!.blocks
}

/** A transfer message for pages [from, to) of a chain. */
export function msgOf(
  chain: readonly SyncBlock[],
  from: number,
  to: number,
  o: {
    seq?: number
    version?: number
    sessionId?: string
    origin?: string
    withKv?: (i: number) => boolean
  } = {},
): TransferMessage {
  return {
    ...(o.origin === undefined ? {} : { origin: o.origin }),
    sessionId: o.sessionId ?? 's',
    version: o.version ?? 1,
    seq: o.seq ?? 0,
    extraKey: '',
    startPage: from,
    blocks: chain.slice(from, to).map((b, i) => ({ ...b, withKv: o.withKv?.(from + i) ?? true })),
  }
}

export function tokens(n: number, salt = 0): number[] {
  return Array.from({ length: n }, (_, i) => (i * 7 + salt * 13) % 23)
}
