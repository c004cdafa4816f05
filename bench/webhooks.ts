/**
 * Webhook throughput and delay: a platform child process delivers change events to a local receiver (127.0.0.1);
 * deliveries per second over a burst of writes, and the delay from the write (event ts_ms) to receipt.
 */
import type { ChildProcess } from "child_process";
import { mkdtempSync, readFileSync, rmSync } from "fs";
import http from "http";
import type { AddressInfo } from "net";
import os from "os";
import path from "path";
import { cpuTicksOf, freePort, quiet, spawnPlatform, waitFor } from "./process";

export interface WebhookRow {
	deliveries: number;
	perSecond: number;
	p50: number;
	p99: number;
	/** CPU of the platform process (node) per delivery, writes included, in ms (burst only, where /proc exists). */
	nodeCpuMs?: number;
	/** The same for the process tree (node and the embedded PostgreSQL). */
	treeCpuMs?: number;
}

/** CPU time (user + system, clock ticks) of one process so far, without its children; undefined without /proc. */
function ownTicksOf(pid: number): number | undefined {
	try {
		const f = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
		return Number(f[11]) + Number(f[12]);
	} catch {
		return undefined;
	}
}

const pct = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];

/** A local receiver counting deliveries of content.notes events and their delay since the write. */
async function receiver() {
	const delays: number[] = [];
	let first = 0;
	let last = 0;
	let waiters: Array<{ n: number; resolve: () => void }> = [];
	/** While held, answers wait here (the dispatcher's requests stay in flight). */
	let held: http.ServerResponse[] | undefined;
	const server = http.createServer((req, res) => {
		const chunks: Buffer[] = [];
		req.on("data", (c) => chunks.push(c));
		req.on("end", () => {
			if (held) held.push(res);
			else res.writeHead(204).end();
			const ev = JSON.parse(Buffer.concat(chunks).toString());
			if (ev.topic !== "content.notes") return;
			const now = Date.now();
			first ||= now;
			last = now;
			delays.push(now - ev.ts_ms);
			waiters = waiters.filter((w) => (delays.length >= w.n ? (w.resolve(), false) : true));
		});
	});
	await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
	return {
		url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`,
		hold() {
			held = [];
		},
		/** Answers the held requests; the rate is counted from here. */
		release() {
			first = Date.now();
			for (const res of held ?? []) res.writeHead(204).end();
			held = undefined;
		},
		reset() {
			delays.length = 0;
			first = last = 0;
		},
		/** Resolves when `n` deliveries arrived, or after `ms`. */
		wait(n: number, ms = 120_000) {
			return Promise.race([new Promise<void>((resolve) => (delays.length >= n ? resolve() : waiters.push({ n, resolve }))), new Promise<void>((r) => setTimeout(r, ms).unref())]);
		},
		result(): WebhookRow {
			const sorted = [...delays].sort((a, b) => a - b);
			return { deliveries: delays.length, perSecond: Math.round(delays.length / Math.max(0.001, (last - first) / 1000)), p50: pct(sorted, 50), p99: pct(sorted, 99) };
		},
		close: () => server.close(),
	};
}

/**
 * Run against a platform with no backlog. Paced: single writes at ~50/s, the delay is delivery latency. Burst:
 * bulk writes as fast as the API takes them, deliveries per second is the dispatcher's throughput.
 */
export async function webhookBench(
	base: string,
	token: string,
	clientId: string,
	pid?: number,
	drainToo = false,
): Promise<{ paced: WebhookRow; burst: WebhookRow; drain?: WebhookRow }> {
	const rx = await receiver();
	const auth = { authorization: `Bearer ${token}`, "content-type": "application/json" };
	const cfg = await fetch(`${base}/context/configs`, {
		method: "POST",
		headers: auth,
		body: JSON.stringify({ key: "CQRS", eid: clientId, value: { webhook: rx.url, secret: "bench-secret" } }),
	});
	if (cfg.status !== 200) throw new Error(`CQRS config: ${cfg.status} ${await cfg.text()}`);
	try {
		const PACED = Number(process.env.BENCH_WEBHOOK_PACED ?? 500);
		for (let i = 0; i < PACED; i++) {
			await fetch(`${base}/content/notes`, { method: "POST", headers: auth, body: JSON.stringify({ title: `paced ${i}` }) });
			await new Promise((r) => setTimeout(r, 20));
		}
		await rx.wait(PACED);
		const paced = rx.result();
		rx.reset();
		// The burst's CPU is measured from a quiet platform (the paced phase's events handled by every worker).
		if (pid !== undefined) await quiet(pid, 30_000);
		const node0 = pid === undefined ? undefined : ownTicksOf(pid);
		const tree0 = pid === undefined ? undefined : cpuTicksOf(pid);
		const BURST = 2000;
		const writeBurst = async (label: string) => {
			for (let i = 0; i < BURST; i += 100) {
				const items = Array.from({ length: 100 }, (_, j) => ({ title: `${label} ${i + j}` }));
				await fetch(`${base}/content/notes/bulk`, { method: "POST", headers: auth, body: JSON.stringify({ items }) });
			}
		};
		await writeBurst("burst");
		await rx.wait(BURST);
		const burst = rx.result();
		// Clock ticks are 10 ms.
		const perDelivery = (row: WebhookRow, t0: number | undefined, t1: number | undefined) =>
			t0 === undefined || t1 === undefined || !row.deliveries ? undefined : Math.round(((t1 - t0) * 10_000) / row.deliveries) / 1000;
		if (pid === undefined) return { paced, burst };
		burst.nodeCpuMs = perDelivery(burst, node0, ownTicksOf(pid));
		burst.treeCpuMs = perDelivery(burst, tree0, cpuTicksOf(pid));
		if (!drainToo) return { paced, burst };
		// Drain: the deliveries alone. The receiver holds its answers while the writes are made and every other worker
		// has handled them (the dispatcher queues the deliveries, its requests in flight wait); then it answers, and the
		// CPU from there to the last delivery is the dispatcher's (claim, sign, post, settle). Delays mean nothing here.
		rx.reset();
		rx.hold();
		await writeBurst("drain");
		await quiet(pid, 60_000);
		const dn0 = ownTicksOf(pid);
		const dt0 = cpuTicksOf(pid);
		rx.release();
		await rx.wait(BURST);
		const drain = rx.result();
		drain.nodeCpuMs = perDelivery(drain, dn0, ownTicksOf(pid));
		drain.treeCpuMs = perDelivery(drain, dt0, cpuTicksOf(pid));
		return { paced, burst, drain };
	} finally {
		rx.close();
	}
}

/**
 * A fresh platform for the webhook scenario (no backlog of earlier writes in its outbox), in a child process
 * registered in `children` (the caller stops it) with its DATA_DIR in `dirs` (the caller removes it).
 */
/** `drain`: also the drain phase (webhookBench), as a run of this file alone does. */
export async function webhookScenario(children: ChildProcess[], dirs: string[], drain = false): Promise<{ paced: WebhookRow; burst: WebhookRow; drain?: WebhookRow }> {
	const dir = mkdtempSync(path.join(os.tmpdir(), "bench-hooks-"));
	dirs.push(dir);
	const port = await freePort();
	const base = `http://127.0.0.1:${port}`;
	// The receiver listens on 127.0.0.1: private addresses are allowed for this run only.
	const child = spawnPlatform({ PORT: String(port), DATA_DIR: dir, WEBHOOK_ALLOW_PRIVATE: "1" });
	children.push(child);
	await waitFor(`${base}/status`, 120_000);
	const root = JSON.parse(readFileSync(path.join(dir, "bootstrap.json"), "utf8"));
	const login = await fetch(`${base}/auth/token`, {
		method: "POST",
		headers: { "content-type": "application/json" },
		body: JSON.stringify({ grant_type: "password", client_id: root.client_id, username: root.username, password: root.password }),
	}).then((r) => r.json() as Promise<{ data: { access_token: string } }>);
	return webhookBench(base, login.data.access_token, root.client_id, child.pid, drain);
}

if (require.main === module) {
	const children: ChildProcess[] = [];
	const dirs: string[] = [];
	webhookScenario(children, dirs, true)
		.then((r) => console.log(JSON.stringify({ store: "postgres", ...r })))
		.catch((err) => {
			console.error(err);
			process.exitCode = 1;
		})
		.finally(async () => {
			await Promise.all(children.map((c) => (c.exitCode !== null ? undefined : new Promise((r) => (c.once("exit", r), c.kill("SIGTERM"))))));
			for (const d of dirs) rmSync(d, { recursive: true, force: true, maxRetries: 5, retryDelay: 200 });
		});
}
