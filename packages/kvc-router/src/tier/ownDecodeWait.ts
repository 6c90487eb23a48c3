/**
 * The inputs of {@link chooseWaitOrMigrate} read from the router's view of the cluster: what the
 * session's own D holds of the prompt on its device and below it (residency index, host
 * residency, binding), and what the P of a migration holds. Used by Dispatch when
 * `waitForOwnDecode` is on.
 *
 * @module
 */
import type { BlockKeys } from '../residency/blockKeys.js'
import type { ResidencyIndex } from '../residency/residencyIndex.js'
import type { RouteCandidate, RouteContext } from '../route/types.js'
import type { TieredHit } from './prefixCost.js'
import { type WaitOrMigrate, chooseWaitOrMigrate } from './waitOrMigrate.js'
import { DEFAULT_COST_MODEL } from '../cost/costModel.js'

let scratch = new Int32Array(16)

/** Leading blocks of `keys` the index shows on `workerId` (0 when it does not know the worker). */
function leadingBlocks(index: ResidencyIndex, workerId: string, keys: BlockKeys): number {
  if (keys.length === 0 || !index.hasWorker(workerId)) return 0
  if (scratch.length < index.slotCount) scratch = new Int32Array(index.slotCount * 2)
  index.overlapInto(keys, scratch)
  return scratch[index.slotOf(workerId)]!
}

/**
 * Where the prompt's prefix lives on the session's own D `d`: the device part the residency index
 * shows (or, while the index still shows the blocks of the session's last successful prompt
 * there, its committed length, as Route trusts it), then the host and disk runs that follow it.
 *
 * @internal
 */
export function ownDecodeHit(
  ctx: RouteContext,
  sessionId: string,
  d: string,
  keys: BlockKeys,
  prompt: number,
): TieredHit {
  const { cluster, params } = ctx
  const ps = params.pageSize
  const plain = leadingBlocks(cluster.residency, d, keys)
  const binding = cluster.store.getBinding(sessionId)
  let device = Math.min(prompt, plain * ps)
  if (
    binding !== undefined &&
    binding.workerId === d &&
    plain >= Math.min(binding.verifiedBlocks, keys.length)
  ) {
    device = Math.max(device, Math.min(binding.committedTokens, prompt))
  }
  const run = cluster.hostResidency.blockCount > 0 ? cluster.hostResidency.runFrom(d, keys, plain) : undefined
  const host = run === undefined ? 0 : Math.min(prompt - device, run.host * ps)
  const disk = run === undefined ? 0 : Math.min(prompt - device - host, run.disk * ps)
  return { promptTokens: prompt, deviceTokens: device, hostTokens: host, diskTokens: disk }
}

/**
 * {@link chooseWaitOrMigrate} for a turn whose session's own D `d` is paused for `waitS` more
 * seconds (`queueS` of prefill queued there) while the best candidate elsewhere, `top`, would
 * take it through P `p` (`pQueueS` queued there; `undefined`: no P, the estimate then assumes an
 * idle P that holds nothing).
 *
 * @internal
 */
export function waitOrMigrateFor(
  ctx: RouteContext,
  sessionId: string,
  keys: BlockKeys,
  prompt: number,
  d: string,
  waitS: number,
  queueS: number,
  top: RouteCandidate,
  p: string | undefined,
  pQueueS: number,
): WaitOrMigrate {
  const hit = ownDecodeHit(ctx, sessionId, d, keys, prompt)
  const pHeld =
    p === undefined
      ? 0
      : Math.min(prompt, leadingBlocks(ctx.cluster.prefillResidency, p, keys) * ctx.params.pageSize)
  return chooseWaitOrMigrate(
    ctx.cost ?? DEFAULT_COST_MODEL,
    { waitS, queueS, hit },
    {
      decodeHeldTokens: Math.min(prompt, top.heldTokens - top.loadBackTokens),
      prefillHeldTokens: pHeld,
      prefillQueueS: pQueueS,
    },
  )
}
