/**
 * Live cursors with the gateway node on its own (issue 25 item 2): the gateway (SERVICES=api, which holds the live
 * cursors) in one child process, the domain services and workers in another, both on the local NATS (a namespace of
 * their own) over a fresh PostgreSQL database; the writers and the SSE clients in this process. Same load as
 * bench/live-cursors.ts: LIVE_CURSORS cursors (8 per user, the open-cursor limit) of LIVE_USERS users over two
 * tenants, LIVE_RATE changes a second for LIVE_SECONDS, each patching a note shared with one other user (16 cursors).
 *
 * The gateway's event-loop delay is read inside that process, from what it exposes: /metrics
 * `process_eventloop_delay_{p99,max}_seconds` (lib/metrics.ts: p99 of the worst 5 s slot of the last minute, max of
 * the last minute). The setup (logins, 2 000 cursors opening) is let age out of that minute (LIVE_SETTLE_S, 62 s of
 * idle cursors) before the load; the reading right after the load then covers idle cursors, the load and 2 s of drain.
 * CPU % of each process over the load window from /proc. LIVE_PROFILE=<dir>: a CPU profile of the gateway over the
 * load window (V8's sampler, started and stopped by signals to a script preloaded there), summarised by
 * bench/cpuprofile.ts.
 *
 * `npx tsx bench/live-cursors-split.ts`. Bounded: LIVE_TIMEOUT_S (900) stops the children, drops the Redis keys and
 * the database, and exits 1.
 */
import { existsSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from "fs";
import os from "os";
import { monitorEventLoopDelay } from "perf_hooks";
import path from "path";
import { WORKER_PORTS } from "../workers";
import { ALL_DOMAINS, clusterSettings, dropRedisPrefix, startNode, stopNode, testDeployment, waitForHttp, type ChildNode } from "../test/helpers/nodes";
import { DOMAIN_SPEC_PORTS, freeOpsOffset, freePort } from "../test/helpers/ports";
import { testDatabase, type TestDatabase } from "../test/helpers/pg";
import { openStream, type LiveStream } from "../test/helpers/live-sse";
import { summarise } from "./cpuprofile";
import { frameDelays, patchLoad, pct, recordChanges } from "./live-cursors";

const USERS = Number(process.env.LIVE_USERS ?? 250);
const PER_USER = 8;
const RATE = Number(process.env.LIVE_RATE ?? 500);
const SECONDS = Number(process.env.LIVE_SECONDS ?? 10);
const SETTLE_S = Number(process.env.LIVE_SETTLE_S ?? 62);
const TIMEOUT_S = Number(process.env.LIVE_TIMEOUT_S ?? 900);
const PROFILE = process.env.LIVE_PROFILE ? path.resolve(process.env.LIVE_PROFILE) : undefined;
/** LIVE_GATEWAY_NICE=-10: the gateway's scheduling priority (a negative one needs root), to tell its own work from its wait for a core. */
const GATEWAY_NICE = process.env.LIVE_GATEWAY_NICE ? Number(process.env.LIVE_GATEWAY_NICE) : undefined;

/**
 * Preloaded in the gateway (NODE_OPTIONS allows --require, not --cpu-prof): the first SIGUSR2 starts V8's sampling
 * profiler in that process, the second writes `gateway-<pid>.cpuprofile` next to this script.
 */
const PROFILER = `const { Session } = require("node:inspector");
const { writeFileSync } = require("node:fs");
const path = require("node:path");
const s = new Session();
s.connect();
let on = false;
process.on("SIGUSR2", () => {
	if (!on) return ((on = true), s.post("Profiler.enable", () => s.post("Profiler.start")));
	on = false;
	s.post("Profiler.stop", (err, r) => { if (!err) writeFileSync(path.join(__dirname, "gateway-" + process.pid + ".cpuprofile"), JSON.stringify(r.profile)); });
});
`;

export interface SplitRow {
	cursors: number;
	users: number;
	rate: number;
	/** Writes answered 200 per second, from the first write to the last answer: the rate changes were committed at. */
	answeredPerS: number;
	expected: number;
	delivered: number;
	/** Streams the gateway ended before the bench closed them. */
	cut: number;
	p50: number;
	p99: number;
	writeP50: number;
	writeP99: number;
	/** Writes not answered 200, by status (0: no answer). */
	writeFailed: Record<string, number>;
	/** The gateway's own /metrics reading (ms) at the load's start (idle cursors) and after it. */
	gatewayLoopIdle: { p99: number; max: number };
	gatewayLoop: { p99: number; max: number };
	/** This process's own loop delay over the load window (ms): a late reading of a frame adds to its delay. */
	benchLoop: { p99: number; max: number };
	/** The load window (s): the writes, their answers, 2 s of drain. */
	windowS: number;
	/** CPU % (of one core) of each process over the load window. */
	cpu: Record<string, number>;
	loadavgBefore: string;
	loadavgAfter: string;
	gatewayNice?: number;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const loadavg = () => readFileSync("/proc/loadavg", "utf8").trim().split(" ").slice(0, 3).join(" ");

/** utime + stime (clock ticks) of a process, 0 when it is gone. */
function ticks(pid: number): number {
	try {
		const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
		const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
		return Number(f[11]) + Number(f[12]);
	} catch {
		return 0;
	}
}

/** Ticks of each process whose command is `comm` (servers other jobs share too), by PID. */
function ticksOfCommand(comm: string): Map<number, number> {
	const out = new Map<number, number>();
	for (const pid of readdirSync("/proc").filter((d) => /^\d+$/.test(d))) {
		try {
			if (readFileSync(`/proc/${pid}/comm`, "utf8").trim() === comm) out.set(Number(pid), ticks(Number(pid)));
		} catch {
			/* gone */
		}
	}
	return out;
}

/** Busy and total ticks of the whole machine (all cores). */
function machineTicks(): { busy: number; total: number } {
	const f = readFileSync("/proc/stat", "utf8").split("\n")[0].trim().split(/\s+/).slice(1).map(Number);
	const total = f.reduce((a, b) => a + b, 0);
	return { busy: total - f[3] - f[4], total };
}

const SERVERS = ["postgres", "nats-server"];
interface Sample {
	own: Record<string, number>;
	servers: Record<string, Map<number, number>>;
	machine: { busy: number; total: number };
}
function cpuSample(pids: Record<string, number>): Sample {
	const own: Record<string, number> = {};
	for (const [k, pid] of Object.entries(pids)) own[k] = ticks(pid);
	return { own, servers: Object.fromEntries(SERVERS.map((c) => [c, ticksOfCommand(c)])), machine: machineTicks() };
}

/**
 * CPU % of one core per process between two samples (a server: its processes alive at the end, those that started
 * in between counted whole); `machine`: the share of all cores busy.
 */
function cpuPercent(a: Sample, b: Sample, ms: number): Record<string, number> {
	const percent = (t: number) => Math.round((t / 100 / (ms / 1000)) * 100);
	const out: Record<string, number> = {};
	for (const k of Object.keys(a.own)) out[k] = percent(b.own[k] - a.own[k]);
	for (const c of SERVERS) out[c] = percent([...b.servers[c]].reduce((sum, [pid, t]) => sum + t - (a.servers[c].get(pid) ?? 0), 0));
	out.machine = Math.round((100 * (b.machine.busy - a.machine.busy)) / (b.machine.total - a.machine.total));
	return out;
}

/** The gateway's event-loop delay (ms) from its /metrics. */
async function gatewayLoop(base: string): Promise<{ p99: number; max: number }> {
	const text = await (await fetch(`${base}/metrics`, { signal: AbortSignal.timeout(10_000) })).text();
	const read = (name: string) => {
		const m = new RegExp(`^${name}(?:\\{[^}]*\\})?\\s+(\\S+)`, "m").exec(text);
		if (!m) throw new Error(`no ${name} in /metrics`);
		return Math.round(Number(m[1]) * 10_000) / 10;
	};
	return { p99: read("process_eventloop_delay_p99_seconds"), max: read("process_eventloop_delay_max_seconds") };
}

/** The platform's JSON answer, as the caller says it is shaped (`T`). */
async function call<T = unknown>(base: string, method: string, p: string, token: string | undefined, body?: unknown): Promise<T> {
	const r = await fetch(`${base}${p}`, {
		method,
		headers: { ...(token ? { authorization: `Bearer ${token}` } : {}), ...(body ? { "content-type": "application/json" } : {}) },
		body: body ? JSON.stringify(body) : undefined,
	});
	const text = await r.text();
	if (r.status !== 200) throw new Error(`${method} ${p}: ${r.status} ${text.slice(0, 300)}`);
	return JSON.parse(text);
}

/** Runs `fn` over `items` at most `n` at a time, results in order. */
async function pool<T, R>(items: T[], n: number, fn: (x: T, i: number) => Promise<R>): Promise<R[]> {
	const out: R[] = new Array(items.length);
	let next = 0;
	await Promise.all(
		Array.from({ length: n }, async () => {
			while (next < items.length) {
				const i = next++;
				out[i] = await fn(items[i], i);
			}
		}),
	);
	return out;
}

export async function splitBench(): Promise<SplitRow> {
	const loadavgBefore = loadavg();
	const deployment = testDeployment();
	const nodes: ChildNode[] = [];
	const streams: LiveStream[] = [];
	let db: TestDatabase | undefined;
	const cleanup = async () => {
		for (const s of streams) s.close();
		// LIVE_NODE_LOGS=1: the warnings and errors the nodes logged, counted by message (not the seeding banner: credentials).
		if (process.env.LIVE_NODE_LOGS)
			for (const n of nodes) {
				const counts = new Map<string, number>();
				for (const line of n.output().split("\n")) {
					const m = /^\[[^\]]+\] (WARN|ERROR) +(.*)$/.exec(line);
					const key = m && `${m[1]} ${m[2].replace(/[0-9a-f]{24}/g, "<id>").slice(0, 200)}`;
					if (key) counts.set(key, (counts.get(key) ?? 0) + 1);
				}
				console.log(`--- ${n.name} logged:\n${[...counts].map(([k, c]) => `${c} × ${k}`).join("\n")}`);
			}
		await Promise.all(nodes.map((n) => stopNode(n, 10_000)));
		await dropRedisPrefix("redis://127.0.0.1:6379", deployment.redisPrefix).catch(() => undefined);
		if (db) {
			await db.drop();
			console.log(`database ${db.name} dropped`);
		}
	};
	let timer: NodeJS.Timeout | undefined;
	const bounded = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`not done within ${TIMEOUT_S} s`)), TIMEOUT_S * 1000)));
	try {
		const row = await Promise.race([bounded, run()]);
		return row;
	} finally {
		clearTimeout(timer);
		await cleanup();
	}

	async function run(): Promise<SplitRow> {
		db = await testDatabase();
		if (!db) throw new Error("PostgreSQL is not answering on 127.0.0.1:5432");
		const shared = clusterSettings(deployment, db.url);
		const port = await freePort();
		const base = `http://127.0.0.1:${port}`;
		const offset = await freeOpsOffset([...DOMAIN_SPEC_PORTS, ...Object.values(WORKER_PORTS)]);
		const domain = startNode("domain", { ...shared, SERVICES: [ALL_DOMAINS, ...Object.keys(WORKER_PORTS)].join(","), OPS_PORT_OFFSET: String(offset) });
		nodes.push(domain);
		const gwEnv: Record<string, string> = { ...shared, SERVICES: "api", PORT: String(port) };
		if (PROFILE) {
			mkdirSync(PROFILE, { recursive: true });
			writeFileSync(path.join(PROFILE, "profiler.cjs"), PROFILER);
			gwEnv.NODE_OPTIONS = `${process.env.NODE_OPTIONS ?? ""} --require ${path.join(PROFILE, "profiler.cjs")}`.trim();
		}
		const gateway = startNode("gateway", gwEnv);
		nodes.push(gateway);
		if (GATEWAY_NICE !== undefined) os.setPriority(gateway.pid, GATEWAY_NICE);
		await waitForHttp(`${base}/status`, nodes, { timeoutMs: 180_000 });
		const root = JSON.parse(readFileSync(path.join(domain.dataDir, "bootstrap.json"), "utf8"));
		const token = async (body: Record<string, string>) => (await call<{ data: { access_token: string } }>(base, "POST", "/auth/token", undefined, body)).data.access_token;
		const rootToken = await token({ grant_type: "password", client_id: root.client_id, username: root.username, password: root.password });

		// Two tenants: a client each (its own domain) that manages its users; their role @editor manages content.
		const tenants: Array<{ id: string; token: string }> = [];
		for (const name of ["a", "b"]) {
			const dom = `${name}.example`;
			const c = (await call<{ data: { id: string; secret: string } }>(base, "POST", "/domain/clients", rootToken, { name: `tenant ${name}`, domains: [dom], scopes: ["whole"] }))
				.data;
			await call(base, "POST", "/auth/grants", rootToken, { subject: `${c.id}@${dom}`, action: "manage", object: "identity:users" });
			await call(base, "POST", "/auth/grants", rootToken, { subject: `@editor@${dom}`, action: "manage", object: "content:*" });
			tenants.push({ id: c.id, token: await token({ grant_type: "client_credential", client_id: c.id, client_secret: c.secret }) });
		}
		const users = await pool(
			Array.from({ length: USERS }, (_, i) => i),
			4,
			async (i) => {
				const t = tenants[i % 2];
				const username = `live-${i}`;
				const password = `pw-live-${i}-Secret1`;
				const u = (await call<{ data: { id: string } }>(base, "POST", "/identity/users", t.token, { username, password, subjects: ["@editor"] })).data;
				return { id: u.id, token: await token({ grant_type: "password", client_id: t.id, username, password }) };
			},
		);
		// One note per user, shared with the next user of its tenant.
		const notes = await pool(
			users,
			4,
			async (u, i) => (await call<{ data: { id: string } }>(base, "POST", "/content/notes", u.token, { title: "n", shares: [users[(i + 2) % USERS].id] })).data.id,
		);

		/** Arrival times of the frames of each change (`<note>:<content>`), matched with the write's answer at the end. */
		const arrivals = new Map<string, number[]>();
		let closing = false;
		let cut = 0;
		for (const u of users)
			for (let k = 0; k < PER_USER; k++) {
				const s = await openStream(`${base}/content/notes/cursor?live=true`, { authorization: `Bearer ${u.token}` }, recordChanges(arrivals));
				if (s.status !== 200) throw new Error(`live cursor: ${s.status} ${s.text().slice(0, 300)}`);
				void s.ended.then(() => void (closing || cut++));
				streams.push(s);
			}
		await Promise.all(streams.map((s) => s.waitFor((f) => f.event === "live", 60_000)));
		console.log(`${streams.length} live cursors open; ${SETTLE_S} s for the setup to leave the gateway's one-minute loop-delay window`);
		await sleep(SETTLE_S * 1000);
		const gatewayLoopIdle = await gatewayLoop(base);

		const pids = { gateway: gateway.pid, domain: domain.pid, bench: process.pid };
		if (PROFILE) process.kill(gateway.pid, "SIGUSR2");
		const cpu0 = cpuSample(pids);
		const benchLoop = monitorEventLoopDelay({ resolution: 10 });
		benchLoop.enable();
		const started = performance.now();
		const { offered, writes, answered, failed: writeFailed, lastAnswer } = await patchLoad(base, users, notes, RATE, SECONDS);
		await sleep(2000);
		const windowMs = performance.now() - started;
		benchLoop.disable();
		const cpu = cpuPercent(cpu0, cpuSample(pids), windowMs);
		if (PROFILE) process.kill(gateway.pid, "SIGUSR2");
		const gatewayLoopLoad = await gatewayLoop(base);
		const loadavgAfter = loadavg();
		closing = true;
		const latencies = frameDelays(answered, arrivals);
		const row: SplitRow = {
			cursors: streams.length,
			users: USERS,
			rate: Math.round(offered / SECONDS),
			answeredPerS: Math.round(answered.size / ((lastAnswer - started) / 1000)),
			expected: answered.size * 2 * PER_USER,
			delivered: latencies.length,
			cut,
			p50: Math.round(pct(latencies, 50)),
			p99: Math.round(pct(latencies, 99)),
			writeP50: Math.round(pct(writes, 50)),
			writeP99: Math.round(pct(writes, 99)),
			writeFailed,
			gatewayLoopIdle,
			gatewayLoop: gatewayLoopLoad,
			benchLoop: { p99: Math.round(benchLoop.percentile(99) / 1e6 - 10), max: Math.round(benchLoop.max / 1e6 - 10) },
			windowS: Math.round(windowMs / 100) / 10,
			cpu,
			loadavgBefore,
			loadavgAfter,
			gatewayNice: GATEWAY_NICE,
		};
		console.log(`live cursors, gateway on its own: ${JSON.stringify(row)}`);
		if (PROFILE) {
			const file = path.join(PROFILE, `gateway-${gateway.pid}.cpuprofile`);
			for (let i = 0; i < 300 && !existsSync(file); i++) await sleep(100);
			console.log(`gateway CPU profile of the load window (${file}):\n${summarise(file, 25)}`);
		}
		return row;
	}
}

if (require.main === module)
	splitBench().then(
		() => process.exit(0),
		(err) => (console.error(err), process.exit(1)),
	);
