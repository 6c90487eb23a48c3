import type { RadixCache } from '../tree/radixCache.js'
import type { NodeHandle } from '../tree/types.js'

/** Options of {@link formatTree}. */
export interface FormatTreeOptions {
  /** Tokens shown per node before `…` (default 10, as SGLang's `pretty_print`). */
  readonly maxTokens?: number
  /** Also print each node's KV slot indices. */
  readonly showValues?: boolean
}

/**
 * Render the tree as indented text, one node per line: edge length, first tokens, `r=` lock
 * count, then a `#tokens` total (the layout of SGLang's `pretty_print`). Namespaces other than the
 * default are printed under a `[ns=...]` header. With a host tier each node also shows where it
 * lives (`d` device, `h` host only, `d+h` both) and its host references (`hr=`), and a `#host`
 * line follows. Meant for logs and inline snapshots.
 *
 * @example
 * ```ts
 * import { RadixCache, formatTree } from '@kvc/radix-cache'
 * const cache = new RadixCache({ pageSize: 2, trackValues: false })
 * cache.insert([1, 2, 3, 4])
 * cache.insert([1, 2, 5, 6])
 * console.log(formatTree(cache))
 * // 2 [1,2] r=0
 * //   2 [3,4] r=0
 * //   2 [5,6] r=0
 * // #tokens: 6
 * ```
 */
export function formatTree(cache: RadixCache, options: FormatTreeOptions = {}): string {
  const maxTokens = options.maxTokens ?? 10
  const lines: string[] = []
  for (const ns of cache.namespaces()) {
    const root = cache.rootNode(ns)
    if (root === undefined) continue
    if (ns !== '') {
      if (cache.childrenOf(root).length === 0) continue
      lines.push(`[ns=${ns}]`)
    }
    const indent = ns === '' ? 0 : 2
    for (const c of cache.childrenOf(root))
      printNode(cache, c, indent, maxTokens, options.showValues === true, lines)
  }
  lines.push(`#tokens: ${cache.totalSize()}`)
  if (cache.hostTier !== undefined)
    lines.push(`#host: ${cache.hostSize()} (${cache.hostOnlySize()} host-only)`)
  return lines.join('\n')
}

function printNode(
  cache: RadixCache,
  node: NodeHandle,
  indent: number,
  maxTokens: number,
  showValues: boolean,
  lines: string[],
): void {
  const info = cache.nodeInfo(node)
  const shown = Array.from(info.tokens.subarray(0, maxTokens)).join(',')
  const more = info.tokens.length > maxTokens ? ',…' : ''
  let line = `${' '.repeat(indent)}${info.tokens.length} [${shown}${more}] r=${info.lockRef}`
  if (cache.hostTier !== undefined) {
    line += info.onDevice ? (info.onHost ? ' d+h' : ' d') : ' h'
    if (info.hostRef > 0) line += ` hr=${info.hostRef}`
  }
  if (showValues && info.values !== undefined)
    line += ` v=[${Array.from(info.values.subarray(0, maxTokens)).join(',')}${more}]`
  lines.push(line)
  for (const c of cache.childrenOf(node)) printNode(cache, c, indent + 2, maxTokens, showValues, lines)
}
