import { SingleBar } from 'cli-progress'

/** Where progress goes: a bar on a terminal, else a line now and then on stderr. */
export interface ProgressSink {
  readonly err: (line: string) => void
  readonly isTTY: boolean
}

/**
 * Progress of a batch of runs. On a terminal, a bar that starts at once; elsewhere (a log, CI) a
 * line at the start, then one whenever a run ends or `everyS` seconds of wall time passed since the
 * last line, so the first line never waits for the first run to end.
 */
export class Progress {
  readonly #sink: ProgressSink
  readonly #tasks: number
  readonly #everyMs: number
  readonly #bar: SingleBar | undefined
  readonly #runs = new Map<number, [number, number]>()
  readonly #started = performance.now()
  #lastLine = 0
  #finished = 0

  constructor(sink: ProgressSink, enabled: boolean, tasks: number, what: string, everyS = 10) {
    this.#sink = sink
    this.#tasks = tasks
    this.#everyMs = everyS * 1000
    this.#bar =
      enabled && sink.isTTY
        ? new SingleBar({
            format: ' {bar} {percentage}% | runs {runs}/{tasks} | {turns} turns | ETA {eta_formatted}',
            hideCursor: true,
            clearOnComplete: true,
            stream: process.stderr,
            etaBuffer: 50,
          })
        : undefined
    if (this.#bar !== undefined) this.#bar.start(1000, 0, { runs: 0, tasks, turns: 0 })
    else if (enabled) {
      sink.err(`kvc-sim: ${what}`)
      this.#lastLine = performance.now()
    }
    this.enabled = enabled
  }

  readonly enabled: boolean

  /** Run `task` has ended `ended` of its `total` turns. */
  update(task: number, ended: number, total: number): void {
    const prev = this.#runs.get(task)
    this.#runs.set(task, [ended, total])
    const justFinished = ended === total && (prev === undefined || prev[0] !== prev[1])
    if (justFinished) this.#finished++
    let frac = 0
    let turns = 0
    for (const [e, t] of this.#runs.values()) {
      frac += t === 0 ? 1 : e / t
      turns += e
    }
    if (this.#bar !== undefined) {
      this.#bar.update(Math.floor((1000 * frac) / this.#tasks), {
        runs: this.#finished,
        tasks: this.#tasks,
        turns,
      })
      return
    }
    if (!this.enabled) return
    const now = performance.now()
    if (!justFinished && now - this.#lastLine < this.#everyMs) return
    this.#lastLine = now
    this.#sink.err(
      `kvc-sim: ${((100 * frac) / this.#tasks).toFixed(0)}% · runs ${this.#finished}/${this.#tasks} done · ` +
        `${turns.toLocaleString('en')} turns (${((now - this.#started) / 1000).toFixed(1)} s)`,
    )
  }

  stop(): void {
    this.#bar?.stop()
  }
}
