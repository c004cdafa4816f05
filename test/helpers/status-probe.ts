/**
 * The liveness invariant (docs/contracts.md "Liveness": one request never delays `/status` by more than 100 ms): a probe that polls
 * GET /status while a request under test runs, and the assertion that the platform held /status under the bound.
 *
 *   const probe = startStatusProbe(p.url);
 *   await the request under test;
 *   await expectStatusHeldUnder(probe, 100);
 *
 * What is measured. The probe GETs /status every `intervalMs` (one request at a time) and counts the answers and the
 * failures; stop() waits for the request in flight, then takes one more sample, so the answers cover the whole window.
 * With the platform in this process (bootPlatform, bootTenancy: the default), the probe also ticks a timer on the
 * event loop they share, every TICK_MS: /status, like any request, waits for the loop, so the longest gap between two
 * ticks is the longest a /status arriving then waited.
 *
 * What the platform held, not what the machine did. On a loaded machine (2 cores shared by many jobs) a gap, or a
 * /status answer, can take well over 100 ms while the platform does nothing: the process waits for a core, or the
 * embedded PostgreSQL answers the health check late. So a gap counts as `held = min(its wall time, the CPU time the
 * process's main thread, the one running the loop, spent during it)` (Linux: /proc/<pid>/task/<pid>/schedstat;
 * elsewhere the whole process's CPU time): what the platform kept the loop busy with, i.e. what it would cost on an idle
 * machine. A 150 ms synchronous computation is ≥ 150 ms of CPU inside one gap and fails the bound however loaded
 * the machine (the garbage collector's pauses inside a gap are reported, not counted: see gcPauses); a process waiting 400 ms for a core burns no CPU and passes; several requests one after the
 * other do not add up (the loop turns between them), but what one turn of the loop takes in at once does (500
 * requests arriving together; a test's own burst: see inTurns). Blind spots: a stall without CPU (a synchronous wait on
 * a slow disk) is excused, and the test's own synchronous work counts as the platform's. Other threads (GC helpers,
 * libuv's pool) do not count, except where only the process's CPU time is known. For a platform in another process
 * pass `{ inProcess: false }`: `held` is then the longest /status latency, with no excuse for load; with its `pid` too
 * (Linux), each latency counts as `min(latency, the CPU time that process's main thread spent while the GET was out)`:
 * the same judgement, the child's wait for a core excused.
 *
 * `max` is the plain /status latency (informative), `platformDelayMax` the largest event-loop delay the platform
 * reported in the answers (`info["event loop"].delay_ms.max`, over its last minute, so it may predate the probe, and,
 * being wall time, includes waits for a core).
 */
import { readFileSync } from "fs";
import { performance, PerformanceObserver } from "perf_hooks";

export interface StatusSample {
	/** When the GET was sent (performance.now(), ms). */
	at: number;
	/** Response time of the GET (ms). */
	latency: number;
	/** HTTP status, or 0 when the request failed. */
	status: number;
	/** Out of process with a pid: min(latency, CPU of its main thread meanwhile), the value `held` takes (ms). */
	held?: number;
}

/** The longest gap between two ticks of the probe's timer, by what it held (in process only). */
export interface LoopGap {
	/** Wall time of the gap (ms). */
	wall: number;
	/** CPU time of this process's main thread (where not known, of the whole process) during the gap (ms). */
	cpu: number;
	/** min(wall, cpu): what the platform held the loop for (ms). */
	held: number;
	/** When the gap ended (performance.now(), ms, the clock of StatusSample.at): the request in flight then held it. */
	at: number;
	/** The garbage collector's pauses inside the gap (ms), not counted in `held` (the test process's heap is shared). */
	gc?: number;
}

export interface ProbeResult {
	/** Longest /status latency (ms). */
	max: number;
	/** Answers received. */
	count: number;
	/** Requests that failed: no answer within REQUEST_TIMEOUT_MS, a connection error, a status other than 200/503. */
	failures: number;
	/** The longest the platform held /status (ms): the value the bound applies to (see the file's comment). */
	held: number;
	/** In process: the gap that gave `held`, the longest gap on the clock, and the number of ticks. */
	worstGap?: LoopGap;
	longestGap?: LoopGap;
	ticks?: number;
	/** Largest `event loop` delay (`max`, ms) the platform reported in its answers; undefined when it reported none. */
	platformDelayMax?: number;
	/** When the probe started (performance.now(), ms). */
	start: number;
	/** Wall time from start to the last answer (ms). */
	windowMs: number;
	samples: StatusSample[];
}

export interface StatusProbe {
	/** Waits for the request in flight, takes one last sample, stops. */
	stop(): Promise<ProbeResult>;
}

export interface ProbeOptions {
	/** The platform runs in this process (default true): see the file's comment. */
	inProcess?: boolean;
	/** Out of process: the platform's pid, to excuse its waits for a core (see the file's comment). */
	pid?: number;
}

const REQUEST_TIMEOUT_MS = 15_000;
/** Period of the in-process loop ticker (ms). */
const TICK_MS = 5;
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
const cpuMs = () => {
	const u = process.cpuUsage();
	return (u.user + u.system) / 1000;
};
/** CPU time of the main thread of process `pid` (ms), NaN when unknown (not Linux, gone). */
const mainThreadCpuMs = (pid: number) => {
	try {
		return Number(readFileSync(`/proc/${pid}/task/${pid}/schedstat`, "utf8").split(" ")[0]) / 1e6;
	} catch {
		return NaN;
	}
};

/** CPU time of this process's event loop: of its main thread, or where that is not known, of the whole process (ms). */
export const loopCpuMs = Number.isNaN(mainThreadCpuMs(process.pid)) ? cpuMs : () => mainThreadCpuMs(process.pid);

/**
 * The garbage collector's pauses of this process (performance.now() timeline). In the test process the heap is the
 * test runner's (every suite's modules, jest's own) as much as the platform's: a major collection of it is no
 * request's doing, so an in-process gap counts without the pauses that fell inside it (reported as `gc`).
 */
const gcPauses: Array<{ start: number; end: number }> = [];
let gcObserver: PerformanceObserver | undefined;
function watchGc(): void {
	gcObserver ??= new PerformanceObserver((list) => {
		for (const e of list.getEntries()) gcPauses.push({ start: e.startTime, end: e.startTime + e.duration });
		if (gcPauses.length > 10_000) gcPauses.splice(0, gcPauses.length - 10_000);
	});
	gcObserver.observe({ entryTypes: ["gc"] });
}
const gcWithin = (from: number, to: number) => gcPauses.reduce((ms, g) => ms + Math.max(0, Math.min(to, g.end) - Math.max(from, g.start)), 0);

/** Ticks a timer on this process's event loop; keeps the gap that held it longest, and the longest (see the file's comment). */
function loopTicker(): { stop(): { worst: LoopGap; longest: LoopGap; ticks: number } } {
	watchGc();
	let worst: LoopGap = { wall: 0, cpu: 0, held: 0, at: performance.now() };
	let longest = worst;
	// Gaps that may be the worst once the collector's pauses (reported a little later) are known.
	const suspects: Array<LoopGap & { from: number }> = [];
	let ticks = 0;
	let wall = performance.now();
	let cpu = loopCpuMs();
	let timer: NodeJS.Timeout;
	const tick = () => {
		const w = performance.now();
		const c = loopCpuMs();
		const gap = { wall: w - wall, cpu: c - cpu, held: Math.min(w - wall, c - cpu), at: w };
		if (gap.held > 20) suspects.push({ ...gap, from: wall });
		if (gap.held > worst.held) worst = gap;
		if (gap.wall > longest.wall) longest = gap;
		ticks++;
		wall = w;
		cpu = c;
		timer = setTimeout(tick, TICK_MS);
	};
	timer = setTimeout(tick, TICK_MS);
	return {
		stop() {
			clearTimeout(timer);
			tick();
			clearTimeout(timer);
			// The worst gap less the collector's pauses inside it.
			let judged: LoopGap = { wall: 0, cpu: 0, held: 0, at: worst.at };
			for (const g of suspects) {
				const gc = gcWithin(g.from, g.at);
				const held = Math.max(0, g.held - gc);
				if (held >= judged.held) judged = { wall: g.wall, cpu: g.cpu, held, at: g.at, gc };
			}
			return { worst: suspects.length ? judged : worst, longest, ticks };
		},
	};
}

/** Polls GET /status of `url` (the platform's base URL, or the /status URL itself) every `intervalMs` until stopped. */
export function startStatusProbe(url: string, intervalMs = 20, opts: ProbeOptions = {}): StatusProbe {
	const statusUrl = /\/status$/.test(url) ? url : `${url.replace(/\/$/, "")}/status`;
	const ticker = (opts.inProcess ?? true) ? loopTicker() : undefined;
	const samples: StatusSample[] = [];
	let failures = 0;
	let platformDelayMax: number | undefined;
	let stopping = false;
	const start = performance.now();

	const loop = (async () => {
		for (let last = false; !last;) {
			// The last sample is taken after stop() is called: it closes the window.
			last = stopping;
			await sleep(intervalMs);
			const at = performance.now();
			const cpuAt = opts.pid ? mainThreadCpuMs(opts.pid) : NaN;
			let status = 0;
			try {
				const res = await fetch(statusUrl, { signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) });
				const body = (await res.json().catch(() => undefined)) as { info?: Record<string, { delay_ms?: { max?: unknown } }> } | undefined;
				status = res.status;
				const reported = body?.info?.["event loop"]?.delay_ms?.max;
				if (typeof reported === "number") platformDelayMax = Math.max(platformDelayMax ?? 0, reported);
			} catch {
				status = 0;
			}
			if (status !== 200 && status !== 503) failures++;
			const latency = performance.now() - at;
			const cpu = opts.pid ? mainThreadCpuMs(opts.pid) - cpuAt : NaN;
			samples.push({ at, latency, status, held: Number.isNaN(cpu) ? undefined : Math.min(latency, cpu) });
		}
	})();

	return {
		async stop(): Promise<ProbeResult> {
			stopping = true;
			await loop;
			const loopGaps = ticker?.stop();
			const answered = samples.filter((s) => s.status !== 0);
			const max = Math.max(0, ...answered.map((s) => s.latency));
			const end = samples.length ? samples[samples.length - 1].at + samples[samples.length - 1].latency : start;
			return {
				max,
				count: answered.length,
				failures,
				held: loopGaps ? loopGaps.worst.held : Math.max(0, ...answered.map((s) => s.held ?? s.latency)),
				worstGap: loopGaps?.worst,
				longestGap: loopGaps?.longest,
				ticks: loopGaps?.ticks,
				platformDelayMax,
				start,
				windowMs: end - start,
				samples,
			};
		},
	};
}

const round = (n: number) => Math.round(n * 10) / 10;

/** One line with the figures of a probe, for a test's log or an assertion message. */
export function describeProbe(r: ProbeResult): string {
	return (
		`${r.count} /status answers over ${round(r.windowMs)} ms, ${r.failures} failed; held at most ${round(r.held)} ms` +
		(r.worstGap && r.longestGap
			? ` (loop gap ${round(r.worstGap.wall)} ms wall, ${round(r.worstGap.cpu)} ms CPU, ${round(r.worstGap.gc ?? 0)} ms GC, ended ${round(r.worstGap.at - r.start)} ms after the start; longest gap ${round(r.longestGap.wall)} ms wall, ${round(r.longestGap.cpu)} ms CPU; ${r.ticks} ticks)`
			: r.samples.some((s) => s.held !== undefined)
				? " (latency, less the platform's waits for a core)"
				: " (latency)") +
		`; latency max ${round(r.max)} ms; platform-reported loop delay max ${r.platformDelayMax ?? "n/a"} ms`
	);
}

/**
 * Stops the probe (when given one) and asserts that /status answered every time, at least `minCount` times (the
 * window was covered: with the last sample taken after stop, 2 already cover it), and that the platform held it under
 * `boundMs`. Returns the figures (for a test to log).
 */
export async function expectStatusHeldUnder(probe: StatusProbe | ProbeResult, boundMs = 100, opts: { minCount?: number } = {}): Promise<ProbeResult> {
	const r = "stop" in probe ? await probe.stop() : probe;
	const summary = describeProbe(r);
	expect({ failures: r.failures, summary }).toEqual({ failures: 0, summary });
	expect({ enoughAnswers: r.count >= (opts.minCount ?? 2), summary }).toEqual({ enoughAnswers: true, summary });
	expect({ heldUnderBound: r.held < boundMs, boundMs, summary }).toEqual({ heldUnderBound: true, boundMs, summary });
	return r;
}

/**
 * The invariant around every test of a load, fuzz or attack suite: registers a probe started before each test (after
 * the suite's beforeAll hooks booted the platform) and asserted after it with expectStatusHeldUnder, and logs the
 * suite's worst figures once at the end. Call it in the describe (or file) whose tests use that platform; `target` (its
 * URL, or its URL and pid for a child process) is read at each start. A test that restarts or stops the platform belongs
 * outside it (/status fails meanwhile).
 */
export function withStatusProbe(target: () => string | { url: string; pid?: number }, opts: ProbeOptions & { boundMs?: number } = {}): void {
	let probe: StatusProbe | undefined;
	let worst: { r: ProbeResult; test?: string } | undefined;
	beforeEach(() => {
		const t = target();
		probe = typeof t === "string" ? startStatusProbe(t, undefined, opts) : startStatusProbe(t.url, undefined, { ...opts, pid: t.pid });
	});
	afterEach(async () => {
		if (!probe) return; // the suite's setup failed: that is the error to see
		const r = await probe.stop();
		probe = undefined;
		if (!worst || r.held > worst.r.held) worst = { r, test: expect.getState().currentTestName };
		await expectStatusHeldUnder(r, opts.boundMs);
	});
	afterAll(() => {
		if (worst) console.log(`status probe: worst in "${worst.test}": ${describeProbe(worst.r)}`);
	});
}

/**
 * Starts `start(0)` to `start(n - 1)` and returns their promises, the event loop turning after every `per` of them. A
 * test that fires a burst from the platform's own process would otherwise hold the loop itself while it sets up the
 * requests or writes (500 fetches, 400 sockets written until they push back: 150 to 300 ms of CPU in one turn), and the
 * in-process probe counts that as the platform's.
 */
export async function inTurns<T>(n: number, start: (i: number) => Promise<T>, per = 20): Promise<Array<Promise<T>>> {
	const started: Array<Promise<T>> = [];
	for (let i = 0; i < n; i++) {
		if (i && i % per === 0) await new Promise((resolve) => setImmediate(resolve));
		started.push(start(i));
	}
	return started;
}
