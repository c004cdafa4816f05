/**
 * Two dispatcher instances share the webhook work and deliver each event once. Four nodes over the local NATS
 * (EVENT_STREAM=nats: JetStream consumer groups): an api node, a domain node (every domain, and the relay that feeds
 * the stream), and two dispatcher nodes (SERVICES=dispatcher each) on one real PostgreSQL schema of their own (their
 * shared delivery queue), Redis under a prefix of their own, a namespace of their own. Each dispatcher answers
 * /status and /metrics on its own ops port (4010 + its OPS_PORT_OFFSET).
 *
 * What shows which dispatcher did what: a delivery row is leased (`locked_by` = the node id) while a dispatcher
 * works on it, and the lease is cleared when the row is settled, so the row alone cannot tell. The test adds an
 * audit trigger to its own schema's `deliveries` table (test-side instrumentation, not platform code) that records
 * every lease taken and every settle with the node that held the lease.
 *
 * The crash: one dispatcher is SIGKILLed (its whole process group) while it holds a request the receiver has read
 * but not answered yet, and while writes go on. The lease of a crashed dispatcher lasts 60 s (LEASE_SEC, fixed);
 * instead of waiting it out, the test moves the dead node's lease expiry to now (what 60 s would do), once
 * PostgreSQL has closed the dead node's sessions (they carry its node id as application_name). The other
 * dispatcher then finishes everything; the one request the dead node had sent without recording its answer comes
 * again with the same webhook-id and body: the at-least-once case a receiver de-duplicates by webhook-id.
 *
 * Skips with a message when NATS, Redis or PostgreSQL is down (fails under REQUIRE_SERVERS=1).
 */
// jest-solo: a cluster of node processes of its own, stopped, killed or cut off on a schedule (test/run.mjs)
import http from "http";
import { readFileSync } from "fs";
import path from "path";
import { connect } from "nats";
import { Pool } from "pg";
import { DOMAINS } from "../../catalog";
import { WORKER_PORTS } from "../../workers";
import { webhookId } from "../../workers/dispatcher/signature";
import { needServers } from "../helpers/platform";
import { ALL_DOMAINS, client, crashNode, dropNatsStreams, dropRedisPrefix, startNode, stopNode, testDeployment, waitForHttp, type ChildNode } from "../helpers/nodes";
import { DOMAIN_SPEC_PORTS, freeOpsOffset, freePort } from "../helpers/ports";
import { sleep } from "../helpers/wait";

/** The servers these tests need: decided when the file loads, so jest reports the tests as skipped without them. */
const servers = needServers(["NATS", 4222], ["Redis", 6379], ["PostgreSQL", 5432]);

// Bounds: 40 s to start, 25 s per test, 20 s to clean up; every wait also ends by the file's deadline (80 s).
jest.setTimeout(25_000);
const DEADLINE = Date.now() + 80_000;

const NATS = "nats://127.0.0.1:4222";
const REDIS = "redis://127.0.0.1:6379";
const PG = "postgres://postgres@127.0.0.1:5432/test";
const deployment = testDeployment();
const SCHEMA = `dispatch2_${deployment.id}`;
const DISPATCHER_PORT = WORKER_PORTS.dispatcher;

interface Hit {
	webhookId: string;
	text: string;
	body: any;
	at: number;
}

/** A webhook receiver on 127.0.0.1: records each complete request; answers 200, or holds its answers while `hold`. */
class Receiver {
	hits: Hit[] = [];
	hold = false;
	private held: http.ServerResponse[] = [];
	private server?: http.Server;
	port = 0;

	async start(): Promise<void> {
		const server = http.createServer((req, res) => {
			const chunks: Buffer[] = [];
			req.on("data", (c) => chunks.push(c));
			req.on("end", () => {
				const text = Buffer.concat(chunks).toString("utf8");
				let body: any;
				try {
					body = JSON.parse(text);
				} catch {
					body = undefined;
				}
				this.hits.push({ webhookId: String(req.headers["webhook-id"]), text, body, at: Date.now() });
				if (this.hold) this.held.push(res);
				else res.writeHead(200, { "content-type": "text/plain" }).end("ok");
			});
		});
		// Idle keep-alive connections stay open for the whole run: no reset race on a reused socket.
		server.keepAliveTimeout = 60_000;
		await new Promise<void>((resolve, reject) => {
			server.once("error", reject);
			server.listen(0, "127.0.0.1", () => resolve());
		});
		this.server = server;
		this.port = (server.address() as { port: number }).port;
	}

	/** Webhook ids whose answer is being held. */
	heldIds(): Set<string> {
		const ids = new Set<string>();
		for (const res of this.held) ids.add(String(res.req.headers["webhook-id"]));
		return ids;
	}

	/** Answers every held request (those whose sender is gone answer into a closed socket). */
	release(): void {
		this.hold = false;
		for (const res of this.held.splice(0)) {
			try {
				res.writeHead(200, { "content-type": "text/plain" }).end("ok");
			} catch {
				/* the sender is gone */
			}
		}
	}

	async stop(): Promise<void> {
		this.release();
		const s = this.server;
		this.server = undefined;
		if (!s) return;
		s.closeAllConnections();
		await new Promise<void>((resolve) => s.close(() => resolve()));
	}

	url(): string {
		return `http://127.0.0.1:${this.port}/hook`;
	}

	/** The content.notes events of the given documents, in arrival order (repeats included). */
	notes(ids: Set<string>): Hit[] {
		return this.hits.filter((h) => h.body?.topic === "content.notes" && ids.has(h.body.id));
	}
}

/** First arrival per webhook-id (what a receiver that de-duplicates by webhook-id keeps), in arrival order. */
function firstArrivals(hits: Hit[]): Hit[] {
	const seen = new Set<string>();
	return hits.filter((h) => !seen.has(h.webhookId) && !!seen.add(h.webhookId));
}

const countBy = <T>(xs: T[], key: (x: T) => string) => {
	const m = new Map<string, number>();
	for (const x of xs) m.set(key(x), (m.get(key(x)) ?? 0) + 1);
	return m;
};
const repeated = (m: Map<string, number>) => [...m].filter(([, n]) => n > 1);
const eventKey = (h: Hit) => `${h.body.id}|${h.body.op}|${h.body.ts_ms}`;

/** Ops per document in arrival order. */
function opsByDoc(hits: Hit[]): Record<string, string[]> {
	const out: Record<string, string[]> = {};
	for (const h of hits) (out[h.body.id] ??= []).push(h.body.op);
	return out;
}

async function until<T>(what: string, fn: () => Promise<T | undefined | null | false> | T | undefined | null | false, timeoutMs = 20_000, every = 50): Promise<T> {
	const end = Math.min(Date.now() + timeoutMs, DEADLINE);
	for (;;) {
		const v = await fn();
		if (v) return v as T;
		if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
		await sleep(every);
	}
}

let up = false;
let admin: Pool | undefined;
const rx = new Receiver();
let nodes: ChildNode[] = [];
let dispA: ChildNode;
let dispB: ChildNode;
const NODE_A = `dispatcher-a-${deployment.id}`;
const NODE_B = `dispatcher-b-${deployment.id}`;
let portA: number;
let portB: number;
let gw: ReturnType<typeof client>;
let root: { client_id: string; username: string; password: string };
let token: string;

const q = <T = any>(text: string, params?: unknown[]) => admin!.query(text, params).then((r) => r.rows as T[]);

/** The shared store: the test's own schema. A dispatcher's sessions carry its node id as application_name. */
const DATABASE_URL = `${PG}?options=${encodeURIComponent(`-c search_path=${SCHEMA}`)}`;
const tagged = (nodeId: string) => `${DATABASE_URL}&application_name=${nodeId}`;
const sessionsOf = async (nodeId: string) => (await q<{ n: number }>("select count(*)::int as n from pg_stat_activity where application_name = $1", [nodeId]))[0].n;

/** Deliveries settled (`what` = the new status) or leased (`claim`) per node, from the test's audit trigger. */
async function leaseLog(deliveryIds?: string[]): Promise<Array<{ delivery_id: string; node: string; what: string }>> {
	return deliveryIds
		? q(`select delivery_id::text, node, what from ${SCHEMA}.test_lease_log where delivery_id = any($1::bigint[]) order by id`, [deliveryIds])
		: q(`select delivery_id::text, node, what from ${SCHEMA}.test_lease_log order by id`);
}

beforeAll(async () => {
	up = servers.up;
	if (!up) return;
	admin = new Pool({ connectionString: PG, max: 3 });
	await admin.query(`create schema ${SCHEMA}`);
	await rx.start();

	// One offset keeps the domain node's ops ports and both dispatcher ports free; the dispatchers differ by one.
	const offset = await freeOpsOffset([...DOMAIN_SPEC_PORTS, DISPATCHER_PORT, DISPATCHER_PORT + 1]);
	portA = DISPATCHER_PORT + offset;
	portB = DISPATCHER_PORT + offset + 1;
	const gwPort = await freePort();
	const shared = {
		TRANSPORTER: NATS,
		EVENT_STREAM: "nats",
		// A crashed consumer's unacknowledged event goes to the other instance after this (default 10 s).
		STREAM_ACK_WAIT_MS: "2000",
		NAMESPACE: deployment.namespace,
		REDIS_URL: REDIS,
		REDIS_PREFIX: deployment.redisPrefix,
		DATABASE_URL: DATABASE_URL,
		JWT_SECRET: deployment.jwtSecret,
		AES_SECRET: deployment.aesSecret,
		WEBHOOK_ALLOW_PRIVATE: "1",
		WEBHOOK_RETRY_SCHEDULE: "0,0.2,0.4,0.8,1,1,1,1",
		OPS_PORT_OFFSET: String(offset),
	};
	const dom = startNode("domain", { ...shared, SERVICES: ALL_DOMAINS });
	const api = startNode("api", { ...shared, SERVICES: "api", PORT: String(gwPort) });
	dispA = startNode("dispatcher-a", { ...shared, SERVICES: "dispatcher", NODE_ID: NODE_A, DATABASE_URL: tagged(NODE_A) });
	dispB = startNode("dispatcher-b", { ...shared, SERVICES: "dispatcher", NODE_ID: NODE_B, DATABASE_URL: tagged(NODE_B), OPS_PORT_OFFSET: String(offset + 1) });
	nodes = [dom, api, dispA, dispB];
	const ready = { timeoutMs: 30_000 };
	await Promise.all([
		waitForHttp(`http://127.0.0.1:${portA}/status`, nodes, ready),
		waitForHttp(`http://127.0.0.1:${portB}/status`, nodes, ready),
		waitForHttp(`http://127.0.0.1:${gwPort}/status`, nodes, ready),
	]);
	gw = client(`http://127.0.0.1:${gwPort}`);
	root = JSON.parse(readFileSync(path.join(dom.dataDir, "bootstrap.json"), "utf8"));
	const login = await gw("POST", "/auth/token", { body: { grant_type: "password", client_id: root.client_id, username: root.username, password: root.password } });
	if (login.status !== 200) throw new Error(`root login failed: ${login.status} ${login.text}`);
	token = login.body.data.access_token;

	// The dispatchers migrate the shared schema at start; then the audit trigger (see the header) goes on the queue.
	await until("the deliveries table", async () => (await q(`select to_regclass('${SCHEMA}.deliveries') is not null as ok`))[0].ok);
	await admin.query(`
		create table ${SCHEMA}.test_lease_log (id bigserial primary key, delivery_id bigint not null, node text not null, what text not null, at timestamptz not null default clock_timestamp());
		create function ${SCHEMA}.test_lease_log() returns trigger language plpgsql as $$
		begin
			if new.locked_by is not null and new.locked_by is distinct from old.locked_by then
				insert into ${SCHEMA}.test_lease_log (delivery_id, node, what) values (new.id, new.locked_by, 'claim');
			end if;
			if old.locked_by is not null and new.locked_by is null then
				insert into ${SCHEMA}.test_lease_log (delivery_id, node, what) values (new.id, old.locked_by, new.status);
			end if;
			return new;
		end $$;
		create trigger test_lease_log after update on ${SCHEMA}.deliveries for each row execute function ${SCHEMA}.test_lease_log();
	`);
	// The writer of configs (the domain node) knows both dispatchers' listeners before the tests write one: a /status
	// answer says the node has announced itself, not that every other node has processed the announcement yet.
	const contextOps = DOMAINS.find((d) => d.name === "context")!.restPort + offset;
	await until(
		"both dispatchers in the domain node's registry",
		async () => counter((await metricsOf(contextOps)).text, "moleculer_registry_event_endpoints_total_value", /event="context\.cqrs\.changed"/) >= 2,
	);
}, 40_000);

afterAll(async () => {
	await Promise.all(nodes.map((n) => stopNode(n)));
	await rx.stop();
	if (!up) return;
	// Each step on its own: one failing leaves the others done.
	const step = (what: string, p: Promise<unknown>) => p.catch((err) => console.warn(`cleanup: ${what} failed: ${(err as Error).message}`));
	await step(
		`drop schema ${SCHEMA}`,
		admin!.query(`drop schema if exists ${SCHEMA} cascade`).finally(() => admin!.end()),
	);
	await step("delete the JetStream streams", dropNatsStreams(deployment.namespace));
	await step("delete the Redis keys", dropRedisPrefix(REDIS, deployment.redisPrefix));
}, 20_000);

const live = (name: string, fn: () => Promise<void>) =>
	servers.test(name, async () => {
		await fn();
	});

const metricsOf = async (port: number) => {
	const r = await fetch(`http://127.0.0.1:${port}/metrics`, { signal: AbortSignal.timeout(5000) });
	return { status: r.status, type: r.headers.get("content-type"), text: await r.text() };
};

/** A sample (counter or gauge) of one node's own metrics registry, summed over the label sets that match. */
function counter(text: string, name: string, match: RegExp): number {
	let sum = 0;
	for (const line of text.split("\n")) if (line.startsWith(`${name}{`) && match.test(line)) sum += Number(line.slice(line.lastIndexOf(" ") + 1));
	return sum;
}

live("each dispatcher node answers /status and /metrics on its own port; the gateway reports the dispatcher", async () => {
	expect(portA).not.toBe(portB);
	for (const [port, nodeId] of [
		[portA, NODE_A],
		[portB, NODE_B],
	] as const) {
		const s = await fetch(`http://127.0.0.1:${port}/status`, { signal: AbortSignal.timeout(5000) });
		expect(s.status).toBe(200);
		expect(await s.json()).toEqual({ status: "ok", info: { "event stream": { status: "up" }, "relational store": { status: "up" } } });
		const m = await metricsOf(port);
		expect(m.status).toBe(200);
		expect(m.type).toMatch(/^text\/plain; version=0\.0\.4/);
		expect(m.text).toMatch(/^# TYPE \S+ (counter|gauge|histogram)$/m);
		// Connected to the transporter (a gauge of this node's registry).
		expect(m.text).toMatch(/^moleculer_transit_connected\{[^}]*\} 1$/m);
		// The node's own registry: every sample carries its node id, and only its own (peers appear only as the
		// `target_node_id` of its pings and the `peer` of its clock skew).
		const ids = new Set([...m.text.matchAll(/[{,]node_id="([^"]+)"/g)].map((x) => x[1]));
		expect([...ids]).toEqual([nodeId]);
	}
	// Both on the one PostgreSQL schema, each with sessions of its own.
	expect(await sessionsOf(NODE_A)).toBeGreaterThan(0);
	expect(await sessionsOf(NODE_B)).toBeGreaterThan(0);
	const g = await gw("GET", "/status");
	expect(g.status).toBe(200);
	expect(g.body.status).toBe("ok");
	expect(g.body.info).toMatchObject({ "service:dispatcher": { status: "up" }, "relational store": { status: "up" }, "event stream": { status: "up" } });
	for (const d of DOMAINS) expect(g.body.info[`service:${d.name}`]).toEqual({ status: "up" });
	// The stream is JetStream's, with the dispatcher group the two instances share.
	const nc = await connect({ servers: "127.0.0.1:4222" });
	try {
		const jsm = await nc.jetstreamManager();
		const group = await jsm.consumers.info(`${deployment.namespace}_platform_changes`, "dispatcher");
		expect(group.config.deliver_policy).toBe("all");
	} finally {
		await nc.close();
	}
});

let configId: string;
const firstBatch = new Set<string>();

live("200 changes: every event reaches the receiver exactly once, in per-document order, and both dispatchers delivered a share", async () => {
	const reg = await gw("POST", "/context/configs", { token, body: { key: "CQRS", eid: root.client_id, value: { webhook: rx.url() } } });
	expect(reg.status).toBe(200);
	configId = reg.body.data.id;
	// The registration's own change is the webhook's first event; each dispatcher node received the CQRS_CHANGED
	// broadcast (its own /metrics), so neither routes with a cached "no webhook" from before.
	await until("the config's own creation event", () => rx.hits.some((h) => h.body?.topic === "context.configs" && h.body.id === configId));
	for (const port of [portA, portB])
		await until(`the CQRS broadcast at :${port}`, async () => counter((await metricsOf(port)).text, "moleculer_event_received_total", /event="context\.cqrs\.changed"/) >= 1);

	const created = await gw("POST", "/content/notes/bulk", { token, body: { items: Array.from({ length: 100 }, (_, i) => ({ title: `n${i}`, content: "bulk" })) } });
	expect(created.status).toBe(200);
	const ids: string[] = created.body.items.map((d: { id: string }) => d.id);
	expect(ids).toHaveLength(100);
	ids.forEach((id) => firstBatch.add(id));
	const patched = ids.slice(0, 60);
	const query = encodeURIComponent(JSON.stringify({ id: { $in: patched } }));
	const bp = await gw("PATCH", `/content/notes/bulk?query=${query}`, { token, body: { content: "patched" } });
	expect(bp.body).toEqual({ total: 60 });
	const deleted = ids.slice(40, 80);
	for (let i = 0; i < deleted.length; i += 10)
		for (const r of await Promise.all(deleted.slice(i, i + 10).map((id) => gw("DELETE", `/content/notes/${id}`, { token })))) expect(r.status).toBe(200);
	const expected: Record<string, string[]> = {};
	for (const id of ids) expected[id] = ["c", ...(patched.includes(id) ? ["u"] : []), ...(deleted.includes(id) ? ["d"] : [])];

	await until("200 note events at the receiver", () => firstArrivals(rx.notes(firstBatch)).length >= 200, 30_000);
	await until("no pending delivery", async () => (await q(`select count(*)::int as n from ${SCHEMA}.deliveries where status = 'pending'`))[0].n === 0);
	await sleep(300); // a repeat would show up meanwhile

	const hits = rx.notes(firstBatch);
	expect(hits.length).toBe(200);
	// Exactly once: by webhook-id, and by the event itself (document, op, time).
	expect(repeated(countBy(hits, (h) => h.webhookId))).toEqual([]);
	expect(repeated(countBy(hits, eventKey))).toEqual([]);
	expect(repeated(countBy(rx.hits, (h) => h.webhookId))).toEqual([]);
	// Everything written, in each document's order.
	expect(opsByDoc(hits)).toEqual(expected);

	// The queue: one row per event, all delivered at the first attempt; both nodes settled a share of them.
	const rows = await q<{ id: string; event_id: string; status: string; attempts: number }>(
		`select id::text, event_id, status, attempts from ${SCHEMA}.deliveries where topic = 'content.notes' and document_id = any($1)`,
		[ids],
	);
	expect(rows.length).toBe(200);
	expect(rows.filter((r) => r.status !== "delivered" || r.attempts !== 1)).toEqual([]);
	expect(new Set(rows.map((r) => webhookId(r.event_id, root.client_id)))).toEqual(new Set(hits.map((h) => h.webhookId)));
	const settles = (await leaseLog(rows.map((r) => r.id))).filter((l) => l.what !== "claim");
	expect(settles.every((l) => l.what === "delivered")).toBe(true);
	expect(settles.length).toBe(200);
	const byNode = countBy(settles, (l) => l.node);
	expect([...byNode.keys()].sort()).toEqual([NODE_A, NODE_B]);
	expect(byNode.get(NODE_A)).toBeGreaterThan(0);
	expect(byNode.get(NODE_B)).toBeGreaterThan(0);
	console.info(`200 changes: 200 deliveries, ${byNode.get(NODE_A)} by ${NODE_A}, ${byNode.get(NODE_B)} by ${NODE_B}`);
});

live("a dispatcher SIGKILLed mid-request while writes go on: nothing is lost; the one unanswered request comes again with its webhook-id", async () => {
	if (!configId) throw new Error("needs the webhook of the previous test");
	const docs = new Set<string>();
	const expected: Record<string, string[]> = {};
	let killed = false;
	let roundsAfterKill = 0;
	let rounds = 0;
	// The writer: 4 notes created in bulk, patched in bulk, 2 deleted: 10 events a round, until 5 rounds after the kill.
	const writer = (async () => {
		while (roundsAfterKill < 5) {
			if (++rounds > 80) throw new Error("the kill never happened");
			const c = await gw("POST", "/content/notes/bulk", { token, body: { items: Array.from({ length: 4 }, (_, i) => ({ title: `r${rounds}-${i}` })) } });
			if (c.status !== 200) throw new Error(`bulk create: ${c.status} ${c.text}`);
			const ids: string[] = c.body.items.map((d: { id: string }) => d.id);
			ids.forEach((id) => docs.add(id));
			const p = await gw("PATCH", `/content/notes/bulk?query=${encodeURIComponent(JSON.stringify({ id: { $in: ids } }))}`, { token, body: { content: `round ${rounds}` } });
			if (p.status !== 200 || p.body.total !== 4) throw new Error(`bulk patch: ${p.status} ${p.text}`);
			for (const id of ids.slice(0, 2)) {
				const d = await gw("DELETE", `/content/notes/${id}`, { token });
				if (d.status !== 200) throw new Error(`delete: ${d.status} ${d.text}`);
			}
			for (const [i, id] of ids.entries()) expected[id] = i < 2 ? ["c", "u", "d"] : ["c", "u"];
			if (killed) roundsAfterKill++;
			await sleep(100);
		}
	})();
	writer.catch(() => undefined);

	// Both at work first; then the receiver holds its answers until B has a request in flight that it has read.
	await until("three rounds written", () => rounds >= 3);
	rx.hold = true;
	const inFlightAtB = await until(
		"a request of dispatcher B read but not answered",
		async () => {
			const leased = await q<{ id: string; event_id: string; client_id: string }>(
				`select id::text, event_id, client_id from ${SCHEMA}.deliveries where locked_by = $1 and status = 'pending'`,
				[NODE_B],
			);
			const held = rx.heldIds();
			return leased.some((r) => held.has(webhookId(r.event_id, r.client_id))) && leased;
		},
		15_000,
		10,
	);
	expect(await sessionsOf(NODE_B)).toBeGreaterThan(0);
	await crashNode(dispB);
	killed = true;
	const killedAt = Date.now();
	// A statement B sent before it died still runs; once PostgreSQL has closed B's sessions, B changes nothing more.
	await until("the dead node's PostgreSQL sessions closed", async () => (await sessionsOf(NODE_B)) === 0, 10_000, 20);
	const settledByB = (await leaseLog()).filter((l) => l.node === NODE_B && l.what === "delivered").length;

	// What the dead node still held; the 60 s lease is moved to now instead of being waited out.
	const orphans = await q<{ id: string; event_id: string; client_id: string }>(
		`update ${SCHEMA}.deliveries set locked_until = now() - interval '1 second' where locked_by = $1 and status = 'pending' returning id::text, event_id, client_id`,
		[NODE_B],
	);
	expect(orphans.length).toBeGreaterThanOrEqual(1);
	expect(orphans.map((o) => o.id)).toEqual(expect.arrayContaining(inFlightAtB.filter((r) => rx.heldIds().has(webhookId(r.event_id, r.client_id))).map((r) => r.id)));
	const orphanIds = new Set(orphans.map((o) => webhookId(o.event_id, o.client_id)));
	rx.release();

	await writer;
	const total = Object.values(expected).reduce((n, ops) => n + ops.length, 0);
	await until(`${total} note events at the receiver`, () => firstArrivals(rx.notes(docs)).length >= total, 30_000);
	await until("no pending delivery", async () => (await q(`select count(*)::int as n from ${SCHEMA}.deliveries where status = 'pending'`))[0].n === 0);
	await sleep(300);

	const hits = rx.notes(docs);
	const firsts = firstArrivals(hits);
	// Nothing lost, in each document's order (first arrival per webhook-id, as a de-duplicating receiver sees it).
	expect(firsts.length).toBe(total);
	expect(opsByDoc(firsts)).toEqual(expected);
	// One webhook-id per event and one event per webhook-id.
	const idsPerEvent = new Map<string, Set<string>>();
	for (const h of hits) (idsPerEvent.get(eventKey(h)) ?? idsPerEvent.set(eventKey(h), new Set()).get(eventKey(h))!).add(h.webhookId);
	expect([...idsPerEvent.values()].filter((s) => s.size !== 1)).toEqual([]);
	expect(idsPerEvent.size).toBe(total);
	// Repeats: only what the dead node had sent without recording the answer, at most twice, byte for byte the same.
	const all = rx.hits.filter((h) => !firstBatch.has(h.body?.id));
	const repeats = repeated(countBy(all, (h) => h.webhookId));
	expect(repeats.length).toBeGreaterThanOrEqual(1); // the held request of B
	for (const [id, n] of repeats) {
		expect(orphanIds.has(id)).toBe(true);
		expect(n).toBe(2);
		expect(new Set(all.filter((h) => h.webhookId === id).map((h) => h.text)).size).toBe(1);
	}
	// The first batch stayed exactly once.
	expect(repeated(countBy(rx.notes(firstBatch), (h) => h.webhookId))).toEqual([]);

	// The queue: one row per event, all delivered; after the kill only A settled, including every orphan.
	const rows = await q<{ id: string; status: string }>(`select id::text, status from ${SCHEMA}.deliveries where topic = 'content.notes' and document_id = any($1)`, [[...docs]]);
	expect(rows.length).toBe(total);
	expect(rows.filter((r) => r.status !== "delivered")).toEqual([]);
	const log = await leaseLog();
	const orphanLog = log.filter((l) => orphans.some((o) => o.id === l.delivery_id) && l.what === "delivered");
	expect(orphanLog.map((l) => l.node)).toEqual(orphans.map(() => NODE_A));
	const bLater = log.filter((l) => l.node === NODE_B && l.what === "delivered").length;
	expect(bLater).toBe(settledByB);
	const stats = await q<{ status: string; n: number }>(`select status, count(*)::int as n from ${SCHEMA}.deliveries group by status order by status`);
	expect(stats).toEqual([{ status: "delivered", n: expect.any(Number) }]);

	// The stream group consumed everything: nothing pending or unacknowledged.
	const nc = await connect({ servers: "127.0.0.1:4222" });
	try {
		const jsm = await nc.jetstreamManager();
		const group = await jsm.consumers.info(`${deployment.namespace}_platform_changes`, "dispatcher");
		expect({ pending: group.num_pending, unacked: group.num_ack_pending }).toEqual({ pending: 0, unacked: 0 });
	} finally {
		await nc.close();
	}
	// The survivor still answers on its port.
	expect((await fetch(`http://127.0.0.1:${portA}/status`, { signal: AbortSignal.timeout(5000) })).status).toBe(200);
	console.info(
		`crash: ${total} events, ${orphans.length} lease(s) orphaned by ${NODE_B}, ${repeats.length} repeated request(s) (same webhook-id), ` +
			`${rounds} rounds, done ${Date.now() - killedAt} ms after the kill`,
	);
});
