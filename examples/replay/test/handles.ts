/** Counts of the resources that leak when a socket or timer is forgotten. */
export function handleCounts(): Record<string, number> {
  const out: Record<string, number> = {}
  for (const r of process.getActiveResourcesInfo()) {
    if (r === 'TCPSocketWrap' || r === 'TCPServerWrap' || r === 'Timeout' || r === 'Immediate') {
      out[r] = (out[r] ?? 0) + 1
    }
  }
  return out
}

/** Waits (up to `ms`) until nothing is open beyond `baseline`; returns the excess left. */
export async function leakedSince(
  baseline: Record<string, number>,
  ms = 3_000,
): Promise<Record<string, number>> {
  const deadline = Date.now() + ms
  for (;;) {
    const now = handleCounts()
    const excess: Record<string, number> = {}
    for (const [k, v] of Object.entries(now)) {
      const allowed = baseline[k] ?? 0
      if (v > allowed) excess[k] = v - allowed
    }
    if (Object.keys(excess).length === 0 || Date.now() > deadline) return excess
    await new Promise((r) => setTimeout(r, 25))
  }
}
