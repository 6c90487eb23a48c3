/**
 * Kinds of the simulation's events (`EventQueue` kinds); `a` and `b` are the kind's two integers.
 */

/** A turn arrives (a: turn). */
export const EV_ARRIVAL = 1
/** A turn's dispatch takes its next step (a: turn, b: step sequence). */
export const EV_STEP = 2
/** An admission request reaches its D (a: turn, b: turn sequence). */
export const EV_ADMIT_AT_D = 3
/** A worker's running prefill ends (a: worker, b: prefill generation). */
export const EV_PREFILL_DONE = 4
/** The next sequence of a worker's decode batch ends (a: worker, b: decode generation). */
export const EV_DECODE_TICK = 5
/** A KV transfer's last byte lands (a: transfer). */
export const EV_TRANSFER_DONE = 6
/** A KV transfer's deadline (a: transfer). */
export const EV_TRANSFER_DEADLINE = 7
/** The head of a worker's prefill queue waited too long for KV memory (a: worker, b: blocked generation). */
export const EV_MEMORY_TIMEOUT = 8
/** Sample every worker's KV usage. */
export const EV_SAMPLE = 9
/** A timed fault starts (a: fault index, b: phase), or a probabilistic death ends (a: -1 - window). */
export const EV_FAULT = 10
/** A round of the D→P sync. */
export const EV_SYNC = 11
/** The D workers' idle-session reaper sweeps. */
export const EV_REAP = 12
/** A classic P/D request's bootstrap timeout: still not preallocated on its D (a: turn, b: turn sequence). */
export const EV_PREALLOC_TIMEOUT = 13
/** The elastic topology controller samples the workers (`elastic=on`). */
export const EV_ELASTIC = 14
/** A hedged admission's leg reaches its D, comes back or times out, or its hedge timer fires (a: record, b: code). */
export const EV_HEDGE = 15
/** A D's admitting answer to an admission on arrival reaches the router (a: turn). */
export const EV_ARRIVAL_ANSWER = 16
