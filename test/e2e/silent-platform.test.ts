/**
 * Connections that go silent (a partition without resets) under a whole platform: one node with every service and
 * worker (EVENT_STREAM=nats) whose PostgreSQL, Redis and NATS are the local servers reached through proxies that can
 * silence them (test/helpers/silent-proxy.ts: nothing forwarded either way, nothing closed; a connection silenced once
 * stays silent, as when a NAT forgot it). For each dependency in turn, under steady creates and lists: /status reports
 * it within a bound; once the partition ends the platform serves every kind of request again within a bound, no
 * answer was a 500, every acknowledged create's event reaches the webhook and none is in `.failed`. Then NATS
 * stranded (the open connections silent for good, new ones pass: a NAT that forgot them, the server keeping them):
 * both connections are made again and the pipeline goes on within bounds. Last, SIGTERM while PostgreSQL is silent
 * stops the node within a bound.
 *
 * The PostgreSQL limits are short here (DATABASE_URL parameters: statement 3 s, lock 2 s, idle in transaction 4 s,
 * answer 4 s) and STREAM_MAX_RETRIES is 3: an outage that spent deliveries would move events to `.failed` at once.
 */
// jest-solo: a cluster of node processes of its own, stopped, killed or cut off on a schedule (test/run.mjs)
import { readFileSync } from "fs";
import path from "path";
import { connect } from "nats";
import { needServers } from "../helpers/platform";
import { testDatabase, type TestDatabase } from "../helpers/pg";
import {
	client,
	dropNatsStreams,
	dropRedisPrefix,
	eventReceiver,
	startNode,
	stopNode,
	testDeployment,
	timeToServe,
	waitForHttp,
	type ChildNode,
	type EventReceiver,
} from "../helpers/nodes";
import { freePort } from "../helpers/ports";
import { silentProxy, type SilentProxy } from "../helpers/silent-proxy";
import { sleep } from "../helpers/wait";

const servers = needServers(["PostgreSQL", 5432], ["Redis", 6379], ["NATS", 4222]);
jest.setTimeout(120_000);

/** From the silence until /status names it. */
const DETECT_BOUND_MS = 25_000;
/** From the end of the partition until login, first request, create and list all answer 200 (three rounds). */
const RECOVERY_BOUND_MS = 30_000;
/** Every acknowledged create's event at the webhook within this after recovery. */
const EVENTS_BOUND_MS = 30_000;
/** SIGTERM to exit while PostgreSQL is silent. */
const STOP_BOUND_MS = 30_000;

const d = testDeployment();
let db: TestDatabase | undefined;
const proxy: Record<"pg" | "redis" | "nats", SilentProxy> = {} as never;
let node: ChildNode | undefined;
let gw: ReturnType<typeof client>;
let root: { client_id: string; username: string; password: string };
/** The webhook: ids of the content.notes documents whose `c` events reached it. */
let receiver: EventReceiver | undefined;

beforeAll(async () => {
	if (!servers.up) return;
	receiver = await eventReceiver();
	db = await testDatabase();
	[proxy.pg, proxy.redis, proxy.nats] = await Promise.all([silentProxy(5432), silentProxy(6379), silentProxy(4222)]);
	const port = await freePort();
	node = startNode("silent", {
		TRANSPORTER: `nats://${proxy.nats.address}`,
		EVENT_STREAM: "nats",
		STREAM_ACK_WAIT_MS: "2000",
		STREAM_MAX_RETRIES: "3",
		NAMESPACE: d.namespace,
		JWT_SECRET: d.jwtSecret,
		AES_SECRET: d.aesSecret,
		REDIS_URL: `redis://${proxy.redis.address}`,
		REDIS_PREFIX: d.redisPrefix,
		DOCUMENT_STORE: "postgres",
		DATABASE_URL: `postgres://postgres@${proxy.pg.address}/${db!.name}?statement_timeout=3000&lock_timeout=2000&idle_in_transaction_session_timeout=4000&query_timeout=4000`,
		WEBHOOK_ALLOW_PRIVATE: "1",
		WEBHOOK_RETRY_SCHEDULE: Array(20).fill("1").join(","),
		SERVICE_PORTS: "0",
		PORT: String(port),
	});
	await waitForHttp(`http://127.0.0.1:${port}/status`, [node], { timeoutMs: 100_000 });
	gw = client(`http://127.0.0.1:${port}`);
	root = JSON.parse(readFileSync(path.join(node.dataDir, "bootstrap.json"), "utf8"));
	const reg = await gw("POST", "/context/configs", { token: await login(), body: { key: "CQRS", eid: root.client_id, value: { webhook: receiver.url } } });
	expect(reg.status).toBe(200);
}, 110_000);

afterAll(async () => {
	await stopNode(node);
	for (const p of Object.values(proxy)) await p?.close();
	await db?.drop().catch(() => undefined);
	if (servers.up) {
		await dropNatsStreams(d.namespace).catch(() => undefined);
		await dropRedisPrefix("redis://127.0.0.1:6379", d.redisPrefix).catch(() => undefined);
	}
	await receiver?.close();
});

async function login(): Promise<string> {
	const r = await gw("POST", "/auth/token", { body: { grant_type: "password", client_id: root.client_id, username: root.username, password: root.password } });
	if (r.status !== 200) throw new Error(`login ${r.status} ${r.text}`);
	return r.body.data.access_token;
}

/** GET /status within 5 s (an answer that never comes counts as none). */
async function status(): Promise<{ status: number; body: any }> {
	const r = await Promise.race([gw("GET", "/status").catch(() => ({ status: 0, body: undefined })), sleep(5000).then(() => ({ status: 0, body: undefined }))]);
	return { status: r.status, body: r.body };
}

/** Milliseconds until /status satisfies `ok`, polled every 500 ms; fails with the last body after `bound`. */
async function statusUntil(what: string, ok: (s: { status: number; body: any }) => boolean, bound: number): Promise<number> {
	const t0 = Date.now();
	let last: unknown;
	for (;;) {
		const s = await status();
		if (ok(s)) return Date.now() - t0;
		last = s.body;
		if (Date.now() - t0 > bound) throw new Error(`${what}: not within ${bound} ms; last /status ${JSON.stringify(last)}\n${node?.output().slice(-4000)}`);
		await sleep(500);
	}
}

/** An answer within 20 s, else status 0 (none: a request must not wait on a silent dependency for long). */
const answer = (p: Promise<{ status: number; body?: any }>) =>
	Promise.race([p.catch(() => ({ status: 0, body: undefined })), sleep(20_000).then(() => ({ status: 0, body: undefined }))]);

/** Creates (and a list) every 150 ms until stopped: every answer's status, and the ids of the acknowledged creates. */
function traffic(token: string) {
	const statuses: number[] = [];
	const acked: string[] = [];
	let running = true;
	const done = (async () => {
		for (let i = 0; running; i++) {
			const c = await answer(gw("POST", "/content/notes", { token, body: { title: `silent-${i}` } }));
			statuses.push(c.status);
			if (c.status === 200) acked.push(c.body.data.id);
			statuses.push((await answer(gw("GET", "/content/notes", { token }))).status);
			await sleep(150);
		}
	})();
	return {
		statuses,
		acked,
		async stop() {
			running = false;
			await done;
		},
	};
}

/** Events in the dead-letter streams of the deployment (`<ns>.platform.changes.failed`, `<ns>.platform.audit.failed`). */
async function deadLettered(): Promise<number> {
	const nc = await connect({ servers: "127.0.0.1:4222" });
	try {
		const jsm = await nc.jetstreamManager();
		let n = 0;
		for (const s of ["changes", "audit"])
			n += await jsm.streams.info(`${d.namespace}_platform_${s}_failed`).then(
				(i) => i.state.messages,
				() => 0,
			);
		return n;
	} finally {
		await nc.close();
	}
}

/**
 * One partition of `which` for at least `silentMs` under traffic: `detected` names what /status must show (timed from
 * the silence); then recovery, no 500, every event delivered, nothing dead-lettered, /status 200 again.
 */
async function partition(which: keyof typeof proxy, silentMs: number, detected: (s: { status: number; body: any }) => boolean, during?: () => Promise<void>) {
	const token = await login();
	const load = traffic(token);
	let detectMs = 0;
	let recoverMs = 0;
	let t0 = 0;
	try {
		await sleep(1500);
		proxy[which].silence();
		t0 = Date.now();
		detectMs = await statusUntil(`${which} silence reported`, detected, DETECT_BOUND_MS);
		await during?.();
		await sleep(Math.max(0, silentMs - (Date.now() - t0)));
		proxy[which].restore();
		recoverMs = await timeToServe(gw, root, token, { boundMs: RECOVERY_BOUND_MS, nodes: [node!] });
	} finally {
		proxy[which].restore();
		await load.stop();
	}
	const { delivered } = receiver!;
	const healthyMs = await statusUntil("/status 200 again", (s) => s.status === 200, RECOVERY_BOUND_MS);
	const until = Date.now() + EVENTS_BOUND_MS;
	while (load.acked.some((id) => !delivered.has(id)) && Date.now() < until) await sleep(250);
	const eventsMs = EVENTS_BOUND_MS - (until - Date.now());
	const counts: Record<number, number> = {};
	for (const s of load.statuses) counts[s] = (counts[s] ?? 0) + 1;
	console.log(
		`${which} silent ${Math.round((Date.now() - t0) / 1000)} s: reported after ${detectMs} ms; serving ${recoverMs} ms after the partition ended, /status 200 after ${recoverMs + healthyMs} ms; ` +
			`${load.acked.length} creates acknowledged, all delivered ${eventsMs} ms later; answers ${JSON.stringify(counts)}`,
	);
	expect(load.acked.filter((id) => !delivered.has(id))).toEqual([]);
	// While the dependency is away, a request that needs it answers 503 within 20 s; never a 500.
	expect(load.statuses.filter((s) => s !== 200 && s !== 503)).toEqual([]);
	expect(load.acked.length).toBeGreaterThan(5);
	expect(await deadLettered()).toBe(0);
	expect([node!.child.exitCode, node!.child.signalCode]).toEqual([null, null]);
}

const entry = (s: { body: any }, key: string) => s.body?.info?.[key] as { status: string; message?: string } | undefined;

// The stage that cannot read is the process's change feed (events/feed.ts), which the relay and the groups read from.
servers.test("PostgreSQL silent: /status and the metrics name the stalled change feed; the platform recovers by itself, no event lost or dead-lettered", () =>
	partition(
		"pg",
		14_000,
		(s) => s.status === 503 && entry(s, "change feed")?.status === "down" && /^stalled: no progress for \d+ s/.test(entry(s, "change feed")?.message ?? ""),
		async () => {
			const m = await gw("GET", "/metrics");
			expect(m.text).toMatch(/^platform_pipeline_stalled\{[^}]*stage="change feed"\} 1$/m);
		},
	),
);

servers.test("Redis silent: /status reports the cache; logins come back once the partition ends, no event lost or dead-lettered", () =>
	partition(
		"redis",
		8_000,
		(s) => s.status === 503 && entry(s, "cache")?.status === "down",
		async () => {
			const l = await gw("POST", "/auth/token", { body: { grant_type: "password", client_id: root.client_id, username: root.username, password: root.password } });
			expect([l.status, l.headers.get("retry-after")]).toEqual([503, "2"]);
		},
	),
);

servers.test("NATS silent: noticed within seconds (503 with Retry-After, not a 5-minute wait); the platform recovers by itself", () =>
	partition("nats", 8_000, (s) => s.status === 503 && entry(s, "event stream")?.status === "down"),
);

/** From the stranding until every NATS connection of the node was given up and made again. */
const STRANDED_NOTICE_MS = 10_000;
/** From the stranding until every acknowledged create's event reached the webhook and /status answers 200. */
const STRANDED_RESUME_MS = 30_000;

servers.test("NATS connections stranded (the open ones silent for good, new ones pass): each is made again within 10 s and the pipeline resumes by itself", async () => {
	const token = await login();
	const load = traffic(token);
	const { delivered } = receiver!;
	let t0 = 0;
	let remadeMs = 0;
	try {
		await sleep(1500);
		// The transporter's connection and the event stream's.
		const open = proxy.nats.counts().forwarding;
		expect(open).toBeGreaterThanOrEqual(2);
		// The NATS server keeps the stranded connections (and their subscriptions): nothing tells it they are gone.
		proxy.nats.silence({ newConnections: false });
		t0 = Date.now();
		while (proxy.nats.counts().forwarding < open) {
			if (Date.now() - t0 > STRANDED_NOTICE_MS)
				throw new Error(`${proxy.nats.counts().forwarding} of ${open} NATS connections made again ${STRANDED_NOTICE_MS} ms after the stranding\n${node!.output().slice(-4000)}`);
			await sleep(100);
		}
		remadeMs = Date.now() - t0;
		// Creates keep coming after the connections were made again: their events go through the new connections.
		await sleep(Math.max(0, 12_000 - (Date.now() - t0)));
		await load.stop();
		while (load.acked.some((id) => !delivered.has(id)) && Date.now() - t0 < STRANDED_RESUME_MS) await sleep(250);
		const eventsMs = Date.now() - t0;
		const missing = load.acked.filter((id) => !delivered.has(id));
		const healthyMs = (await statusUntil("/status 200 after the stranding", (s) => s.status === 200, Math.max(0, STRANDED_RESUME_MS - (Date.now() - t0)))) + eventsMs;
		console.log(
			`NATS stranded: ${open} connections made again after ${remadeMs} ms; ${load.acked.length} creates acknowledged, ${missing.length} not delivered ${eventsMs} ms after the stranding; /status 200 after ${healthyMs} ms`,
		);
		expect(missing).toEqual([]);
		expect(load.acked.length).toBeGreaterThan(5);
		expect(load.statuses.filter((s) => s !== 200 && s !== 503)).toEqual([]);
		expect(await deadLettered()).toBe(0);
	} finally {
		await load.stop();
		proxy.nats.restore();
	}
});

servers.test("SIGTERM while PostgreSQL is silent: the node stops within the bound", async () => {
	const token = await login();
	const load = traffic(token);
	const out = node!;
	let code: number | null | "still running";
	let stopMs: number;
	try {
		await sleep(1000);
		proxy.pg.silence();
		// Requests and the pipeline now wait on the silent server.
		await sleep(3000);
		const t0 = Date.now();
		process.kill(out.pid, "SIGTERM");
		code = await Promise.race([out.exited, sleep(STOP_BOUND_MS + 10_000).then(() => "still running" as const)]);
		stopMs = Date.now() - t0;
	} finally {
		await load.stop();
		proxy.pg.restore();
	}
	console.log(`SIGTERM while PostgreSQL is silent: exited with ${code} after ${stopMs} ms`);
	if (code === "still running") throw new Error(`still running ${stopMs} ms after SIGTERM:\n${out.output().slice(-4000)}`);
	expect([code, stopMs < STOP_BOUND_MS]).toEqual([0, true]);
});
