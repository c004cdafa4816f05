/**
 * Live cursors at scale (issue 25 item 2): one platform process (gateway and domains) holds LIVE_CURSORS live
 * cursors of LIVE_USERS users over two tenants (8 per user: the open-cursor limit) while LIVE_RATE changes a second
 * are written for LIVE_SECONDS. Each change patches a note of one user (shared with another user of its tenant), so
 * it concerns that user's and the sharer's cursors. Measured: the frames each change must produce and those that
 * came, the delay from the write's answer to each frame (p50/p99), the platform's event-loop delay (p99, max) and
 * the heap per open cursor. `npx tsx bench/live-cursors.ts` (or from `npm run bench`).
 */
import { monitorEventLoopDelay } from "perf_hooks";
import { bootTenancy, ok, type Tenancy } from "../test/helpers/tenants";
import { openStream, type LiveStream, type SseFrame } from "../test/helpers/live-sse";

const USERS = Number(process.env.LIVE_USERS ?? 250);
const PER_USER = 8;
const RATE = Number(process.env.LIVE_RATE ?? 500);
const SECONDS = Number(process.env.LIVE_SECONDS ?? 10);

export interface LiveRow {
	cursors: number;
	users: number;
	rate: number;
	expected: number;
	delivered: number;
	p50: number;
	p99: number;
	loopP99: number;
	loopMax: number;
	heapPerCursorKb: number;
	writeP99: number;
}

export const pct = (xs: number[], p: number) => (xs.length ? xs.sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))] : NaN);

/** An `onFrame` that records when each change frame came, by `<note id>:<content>` (what a write set). */
export function recordChanges(arrivals: Map<string, number[]>): (f: SseFrame) => void {
	return (f) => {
		if (f.event !== "change") return;
		const c = JSON.parse(f.data);
		const key = `${c.id}:${c.data?.content}`;
		const list = arrivals.get(key);
		if (list) list.push(f.at);
		else arrivals.set(key, [f.at]);
	};
}

export interface PatchLoad {
	/** Writes sent. */
	offered: number;
	/** Time to each write's answer (ms). */
	writes: number[];
	/** When each write answered 200, by `<note id>:<content>`. */
	answered: Map<string, number>;
	/** Writes not answered 200, by status (0: no answer). */
	failed: Record<string, number>;
	/** When the last 200 came (performance.now()). */
	lastAnswer: number;
}

/** PATCHes `content` of note i (as user i, in turn) through `base` at `rate` a second for `seconds`; waits for every answer. */
export async function patchLoad(base: string, users: Array<{ token: string }>, notes: string[], rate: number, seconds: number): Promise<PatchLoad> {
	const load: PatchLoad = { offered: 0, writes: [], answered: new Map(), failed: {}, lastAnswer: 0 };
	const started = performance.now();
	const inFlight = new Set<Promise<void>>();
	while (performance.now() - started < seconds * 1000) {
		const due = Math.floor(((performance.now() - started) / 1000) * rate);
		while (load.offered < due) {
			const i = load.offered % users.length;
			const content = `v${load.offered++}`;
			const t0 = performance.now();
			const p = (async () => {
				let status = 0;
				try {
					const r = await fetch(`${base}/content/notes/${notes[i]}`, {
						method: "PATCH",
						headers: { authorization: `Bearer ${users[i].token}`, "content-type": "application/json" },
						body: JSON.stringify({ content }),
					});
					const text = await r.text();
					status = r.status;
					if (status !== 200 && !Object.keys(load.failed).length) console.log(`a write answered ${status}: ${text.slice(0, 300)}`);
				} catch {
					status = 0;
				}
				const now = performance.now();
				load.writes.push(now - t0);
				if (status === 200) {
					load.answered.set(`${notes[i]}:${content}`, now);
					load.lastAnswer = now;
				} else load.failed[status] = (load.failed[status] ?? 0) + 1;
			})();
			inFlight.add(p);
			void p.finally(() => inFlight.delete(p));
		}
		await new Promise((r) => setTimeout(r, 5));
	}
	await Promise.all(inFlight);
	return load;
}

/** The frames that came for answered writes and their delays from the answer (a frame before it counts 0 ms). */
export function frameDelays(answered: Map<string, number>, arrivals: Map<string, number[]>): number[] {
	const latencies: number[] = [];
	for (const [key, at] of answered) for (const t of arrivals.get(key) ?? []) latencies.push(Math.max(0, t - at));
	return latencies;
}

export async function liveCursorBench(): Promise<LiveRow> {
	const T: Tenancy = await bootTenancy();
	try {
		const users: Array<{ id: string; token: string; tenant: "a" | "b" }> = [];
		for (let i = 0; i < USERS; i++) {
			const tenant = i % 2 ? "b" : "a";
			const t = T[tenant];
			const username = `live-${i}`;
			const password = `pw-live-${i}-Secret1`;
			const u = (await ok(T.as(t.clientToken, "POST", "/identity/users", { username, password, subjects: ["@editor"] }), "user")).data;
			users.push({ id: u.id, token: await T.login(t, username, password), tenant });
		}
		// One note per user, shared with the next user of its tenant.
		const notes = [];
		for (let i = 0; i < USERS; i++) {
			const peer = users[(i + 2) % USERS];
			notes.push((await ok(T.as(users[i].token, "POST", "/content/notes", { title: "n", shares: [peer.id] }), "note")).data.id as string);
		}
		global.gc?.();
		const heap0 = process.memoryUsage().heapUsed;
		/** Arrival times of the frames of each change (`<note>:<content>`), matched with the write's answer at the end. */
		const arrivals = new Map<string, number[]>();
		const streams: LiveStream[] = [];
		for (const u of users)
			for (let k = 0; k < PER_USER; k++)
				streams.push(await openStream(`${T.p.url}/content/notes/cursor?live=true`, { authorization: `Bearer ${u.token}` }, recordChanges(arrivals)));
		await Promise.all(streams.map((s) => s.waitFor((f) => f.event === "live", 60_000)));
		global.gc?.();
		const heapPerCursorKb = (process.memoryUsage().heapUsed - heap0) / streams.length / 1024;
		const loop = monitorEventLoopDelay({ resolution: 10 });
		loop.enable();
		const { offered, writes, answered } = await patchLoad(T.p.url, users, notes, RATE, SECONDS);
		await new Promise((r) => setTimeout(r, 2000));
		loop.disable();
		for (const s of streams) s.close();
		const latencies = frameDelays(answered, arrivals);
		const row: LiveRow = {
			cursors: streams.length,
			users: USERS,
			rate: Math.round(offered / SECONDS),
			expected: answered.size * 2 * PER_USER,
			delivered: latencies.length,
			p50: Math.round(pct(latencies, 50)),
			p99: Math.round(pct(latencies, 99)),
			loopP99: Math.round(loop.percentile(99) / 1e6),
			loopMax: Math.round(loop.max / 1e6),
			heapPerCursorKb: Math.round(heapPerCursorKb * 10) / 10,
			writeP99: Math.round(pct(writes, 99)),
		};
		console.log(`live cursors: ${JSON.stringify(row)}`);
		return row;
	} finally {
		await T.cleanup();
	}
}

if (require.main === module)
	liveCursorBench().then(
		() => process.exit(0),
		(err) => (console.error(err), process.exit(1)),
	);
