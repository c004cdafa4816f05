/**
 * A domain node SIGKILLed between a write and its acknowledgement, and at random points under ~100 writes/s, loses
 * no acknowledged write and no change event (issue 14, "Done when"). The production mode: EVENT_STREAM=nats over
 * the local NATS JetStream, documents and outbox on PostgreSQL (a database of its own), Redis as the shared cache;
 * a gateway, a node with every other domain, the content node (the one killed, restarted under its NODE_ID) and a
 * workers node (dispatcher, logger) that pushes webhooks to a receiver here (WEBHOOK_ALLOW_PRIVATE=1).
 *
 * With an Idempotency-Key (docs/contracts.md "Retries and concurrent writers"): a client that retries every 5xx, 409 and cut
 * connection with its key, through two gateways, while content replicas die (after their commit, and at random
 * points), ends with one 200 per key and exactly one document per key.
 *
 * Contract checked: every acknowledged (200) create is stored once; every stored note (acknowledged or not) has
 * one change event: one `webhook-id` at the receiver (deliveries are at least once; receivers de-duplicate by that
 * header), one change row in the audit; every acknowledged create has its one request row (status 200). Skips with a
 * message when NATS, Redis or PostgreSQL do not answer (fails under REQUIRE_SERVERS=1).
 */
// jest-solo: a cluster of node processes of its own, stopped, killed or cut off on a schedule (test/run.mjs)
import { randomBytes } from "crypto";
import { createServer, type Server } from "http";
import { readFileSync } from "fs";
import path from "path";
import { Client } from "pg";
import { DOMAINS } from "../../catalog";
import { needServers } from "../helpers/platform";
import { client, clusterSettings, crashNode, dropNatsStreams, dropRedisPrefix, startNode, stopNode, testDeployment, waitForHttp, type ChildNode } from "../helpers/nodes";
import { freeOpsOffset, freePort } from "../helpers/ports";
import { testDatabase, type TestDatabase } from "../helpers/pg";
import { eventually, sleep, waitFor } from "../helpers/wait";

const servers = needServers(["NATS", 4222], ["Redis", 6379], ["PostgreSQL", 5432]);
/** Creates per second of the load. */
const RATE = 100;
/** The longest a load of this file runs, whatever happens to the test that started it. */
const LOAD_LIMIT_MS = 240_000;

jest.setTimeout(400_000);

const deployment = testDeployment();
const CRASH_TITLE = `crash-after-commit-${deployment.id}`;
let db: TestDatabase | undefined;
let pg: Client | undefined;
let receiver: Server | undefined;
const nodes: Record<string, ChildNode> = {};
let contentEnv: Record<string, string>;
let shared: Record<string, string>;
let contentStatus: string;
let http: ReturnType<typeof client>;
let token: string;
/** Webhook deliveries received: document id → op → the webhook-ids seen (a redelivery repeats its id). */
const received = new Map<string, Map<string, Set<string>>>();
let deliveries = 0;

function onDelivery(body: string, webhookId: string): void {
	const ev = JSON.parse(body) as { id: string; op: string; topic: string };
	if (ev.topic !== "content.notes") return;
	deliveries++;
	const ops = received.get(ev.id) ?? new Map<string, Set<string>>();
	received.set(ev.id, ops);
	const ids = ops.get(ev.op) ?? new Set<string>();
	ops.set(ev.op, ids);
	ids.add(webhookId);
}

/**
 * The content node, started again under the same NODE_ID (the gateway sends to it again at once); ready when its
 * own /status answers (asked directly: through the gateway a probe could wait on a call to the dead instance).
 */
async function startContent(): Promise<void> {
	nodes.content = startNode("content", contentEnv);
	await waitForHttp(contentStatus, [nodes.content], { timeoutMs: 90_000 });
}

async function killContent(): Promise<void> {
	await crashNode(nodes.content);
	await stopNode(nodes.content);
}

beforeAll(async () => {
	if (!servers.up) return;
	db = await testDatabase();
	if (!db) return;
	const hookPort = await freePort();
	receiver = createServer((req, res) => {
		let body = "";
		req.on("data", (c) => (body += c));
		req.on("end", () => {
			onDelivery(body, String(req.headers["webhook-id"] ?? ""));
			res.writeHead(204).end();
		});
	});
	await new Promise<void>((r) => receiver!.listen(hookPort, "127.0.0.1", r));
	const port = await freePort();
	shared = {
		...clusterSettings(deployment, db.url),
		EVENT_STREAM: "nats",
		STREAM_ACK_WAIT_MS: "2000",
		OPS_PORT_OFFSET: String(await freeOpsOffset()),
	};
	const others = DOMAINS.map((d) => d.name)
		.filter((n) => n !== "content")
		.join(",");
	nodes.core = startNode("core", { ...shared, SERVICES: others });
	nodes.api = startNode("api", { ...shared, SERVICES: "api", PORT: String(port) });
	nodes.workers = startNode("workers", { ...shared, SERVICES: "dispatcher,logger", SERVICE_PORTS: "0", WEBHOOK_ALLOW_PRIVATE: "1" });
	// The content node's own /status on a port offset of its own.
	const contentPort = DOMAINS.find((d) => d.name === "content")!.restPort;
	const contentOffset = await freeOpsOffset([contentPort]);
	contentStatus = `http://127.0.0.1:${contentPort + contentOffset}/status`;
	contentEnv = { ...shared, SERVICES: "content", OPS_PORT_OFFSET: String(contentOffset), NODE_ID: `content-${deployment.id}`, TEST_CRASH_AFTER_COMMIT: CRASH_TITLE };
	nodes.content = startNode("content", contentEnv);
	http = client(`http://127.0.0.1:${port}`);
	await waitForHttp(`http://127.0.0.1:${port}/status`, Object.values(nodes), { timeoutMs: 180_000 });
	const root = JSON.parse(readFileSync(path.join(nodes.core.dataDir, "bootstrap.json"), "utf8"));
	const login = await http("POST", "/auth/token", { body: { grant_type: "password", client_id: root.client_id, username: root.username, password: root.password } });
	expect(login.status).toBe(200);
	token = login.body.data.access_token;
	const hook = await http("POST", "/context/configs", { token, body: { key: "CQRS", value: { webhook: `http://127.0.0.1:${hookPort}/hook` } } });
	expect(hook.status).toBe(200);
	// The dispatcher pushes what is written once it knows the config: wait for a first delivery.
	const first = await http("POST", "/content/notes", { token, body: { title: "first" } });
	expect(first.status).toBe(200);
	await eventually(async () => received.has(first.body.data.id), Boolean, 60_000);
	pg = new Client({ connectionString: db.url });
	await pg.connect();
}, 300_000);

afterAll(async () => {
	await pg?.end();
	await Promise.all(Object.values(nodes).map((n) => stopNode(n)));
	receiver?.close();
	await db?.drop();
	if (servers.up) {
		await dropNatsStreams(deployment.namespace);
		await dropRedisPrefix("redis://127.0.0.1:6379", deployment.redisPrefix);
	}
});

const notes = async (): Promise<Map<string, number>> =>
	new Map((await pg!.query(`select id, count(*)::int as n from "docs/content/notes" group by id`)).rows.map((r) => [r.id as string, r.n as number]));

/** Audit rows per document id: change rows (`c`) and request rows of successful creates. */
async function audited(): Promise<{ changes: Map<string, number>; requests: Map<string, number> }> {
	const count = async (sql: string) => new Map((await pg!.query(sql)).rows.map((r) => [r.document_id as string, r.n as number]));
	return {
		changes: await count(
			`select document_id, count(*)::int as n from audit_entries where kind = 'change' and op = 'c' and service = 'content' and collection = 'notes' group by 1`,
		),
		requests: await count(`select document_id, count(*)::int as n from audit_entries where kind = 'request' and action = 'content.notes.create' and status = 200 group by 1`),
	};
}

/**
 * Waits until every stored note has its delivery and its change row (and every acknowledged one its request row),
 * then checks each exactly once.
 */
async function expectEverythingOnce(acked: string[]): Promise<void> {
	const docs = await notes();
	const done = await eventually(
		async () => ({ ...(await audited()) }),
		(a) => [...docs.keys()].every((id) => received.get(id)?.has("c") && a.changes.has(id)) && acked.every((id) => a.requests.has(id)),
		120_000,
	);
	for (const id of acked) expect([id, docs.get(id)]).toEqual([id, 1]);
	for (const id of docs.keys()) {
		expect([id, received.get(id)?.get("c")?.size]).toEqual([id, 1]);
		expect([id, done.changes.get(id)]).toEqual([id, 1]);
	}
	for (const id of acked) expect([id, done.requests.get(id)]).toEqual([id, 1]);
	// No event, change row or request row for a write that is not stored.
	for (const id of received.keys()) expect([id, docs.has(id)]).toEqual([id, true]);
	for (const id of done.changes.keys()) expect([id, docs.has(id)]).toEqual([id, true]);
}

servers.test("killed between the commit and the reply: the write is not acknowledged, yet stored once with its one event", async () => {
	const exited = nodes.content.exited;
	const r = await http("POST", "/content/notes", { token, body: { title: CRASH_TITLE } }).catch((err) => ({ status: 0, body: String(err) }));
	// The node died after its commit: its reply never left (the gateway answers an error, never 200).
	expect(r.status).not.toBe(200);
	expect(r.status === 0 || r.status >= 500).toBe(true);
	await Promise.race([exited, sleep(5000)]);
	expect(nodes.content.child.signalCode ?? nodes.content.child.exitCode).not.toBeNull();
	await killContent();
	await startContent();
	const stored = await pg!.query(`select id from "docs/content/notes" where doc->>'title' = $1`, [CRASH_TITLE]);
	expect(stored.rows).toHaveLength(1);
	await expectEverythingOnce([]);
	expect(received.get(stored.rows[0].id)?.get("c")?.size).toBe(1);
});

/** POSTs `body` under `key` until an answer that is not 5xx, 409 or a cut connection, alternating `gateways`; the answer. */
async function retried(gateways: Array<ReturnType<typeof client>>, key: string, body: unknown, retries: { n: number }, limitMs = 120_000) {
	const until = Date.now() + limitMs;
	for (let i = 0; ; i++) {
		const r = await gateways[i % gateways.length]("POST", "/content/notes", { token, body, headers: { "Idempotency-Key": key } }).catch(() => ({
			status: 0,
			body: undefined,
			headers: new Headers(),
		}));
		if (r.status !== 0 && r.status < 500 && r.status !== 409) return r;
		retries.n++;
		if (Date.now() > until) throw new Error(`key ${key}: still ${r.status} after ${limitMs} ms`);
		await sleep(200 + Math.floor(Math.random() * 300));
	}
}

servers.test("Idempotency-Key: retried through two gateways while content replicas die, one document per key", async () => {
	// A second gateway and a second content replica on the same database.
	const port2 = await freePort();
	nodes.api2 = startNode("api2", { ...shared, SERVICES: "api", PORT: String(port2) });
	const contentPort = DOMAINS.find((d) => d.name === "content")!.restPort;
	const offset2 = await freeOpsOffset([contentPort]);
	const content2Env = { ...contentEnv, OPS_PORT_OFFSET: String(offset2), NODE_ID: `content2-${deployment.id}` };
	const content2Status = `http://127.0.0.1:${contentPort + offset2}/status`;
	nodes.content2 = startNode("content2", content2Env);
	await waitForHttp(content2Status, [nodes.content2], { timeoutMs: 90_000 });
	await waitForHttp(`http://127.0.0.1:${port2}/status`, [nodes.api2], { timeoutMs: 90_000 });
	const gateways = [http, client(`http://127.0.0.1:${port2}`)];
	const run = randomBytes(4).toString("hex");
	const countOf = async (prefix: string) =>
		new Map(
			(await pg!.query(`select doc->>'description' as k, count(*)::int as n from "docs/content/notes" where doc->>'description' like $1 group by 1`, [`${prefix}%`])).rows.map(
				(r) => [r.k as string, r.n as number],
			),
		);

	// 1. A replica that dies after its commit: the retry (through the other gateway) gets the stored document back.
	const retries = { n: 0 };
	const crashKey = `crash-${run}`;
	const crashed = await retried(gateways, crashKey, { title: CRASH_TITLE, description: crashKey }, retries);
	expect([crashed.status, crashed.headers.get("idempotent-replayed")]).toEqual([200, "true"]);
	expect((await countOf(crashKey)).get(crashKey)).toBe(1);
	const stored = await pg!.query(`select id from "docs/content/notes" where doc->>'description' = $1`, [crashKey]);
	expect(crashed.body.data.id).toBe(stored.rows[0].id);
	for (const [name, status, env] of [
		["content", contentStatus, contentEnv],
		["content2", content2Status, content2Env],
	] as const)
		if (nodes[name].child.exitCode !== null || nodes[name].child.signalCode !== null) {
			await stopNode(nodes[name]);
			nodes[name] = startNode(name, env);
			await waitForHttp(status, [nodes[name]], { timeoutMs: 90_000 });
		}

	// 2. 40 keyed creates/s for about 20 s while a replica is killed and restarted three times; every key retried until answered.
	const keys: string[] = [];
	const answers: Array<Promise<{ status: number }>> = [];
	const start = Date.now();
	let stop = false;
	// The load ends by itself too: a test that failed or timed out must not go on making keys (and memory) forever.
	const load = (async () => {
		while (!stop && Date.now() - start < LOAD_LIMIT_MS) {
			while (keys.length < ((Date.now() - start) / 1000) * 40) {
				const k = `load-${run}-${keys.length}`;
				keys.push(k);
				answers.push(retried(gateways, k, { title: `idem-${run}`, description: k }, retries));
			}
			await sleep(10);
		}
	})();
	for (let i = 0; i < 3; i++) {
		await sleep(2000 + Math.floor(Math.random() * 3000));
		const [name, status, env] = i % 2 ? (["content2", content2Status, content2Env] as const) : (["content", contentStatus, contentEnv] as const);
		await crashNode(nodes[name]);
		await stopNode(nodes[name]);
		nodes[name] = startNode(name, env);
		await waitForHttp(status, [nodes[name]], { timeoutMs: 90_000 });
	}
	await sleep(2000);
	stop = true;
	await load;
	const statuses = (await Promise.all(answers)).map((r) => r.status);
	const docs = await countOf(`load-${run}-`);
	console.log(`idempotent retries: ${keys.length} keys, ${retries.n} retries, ${docs.size} documents, ${[...docs.values()].filter((n) => n > 1).length} keys written twice`);
	for (const st of statuses) expect(st).toBe(200);
	expect(retries.n).toBeGreaterThan(0);
	expect(docs.size).toBe(keys.length);
	for (const k of keys) expect([k, docs.get(k)]).toEqual([k, 1]);
	await stopNode(nodes.content2);
	await stopNode(nodes.api2);
	delete nodes.content2;
	delete nodes.api2;
});

servers.test("killed at random points under ~100 writes/s, restarted each time: no acknowledged write or event lost", async () => {
	const acked: string[] = [];
	let lastAck = 0;
	const statuses = new Map<number, number>();
	let stop = false;
	const inflight = new Set<Promise<void>>();
	// Open loop at 100 creates/s by the clock, whatever the answers take (a stalled request does not slow the others).
	const start = Date.now();
	let sent = 0;
	const fire = () => {
		const i = sent++;
		const p = http("POST", "/content/notes", { token, body: { title: `load-${i}` } })
			.then((r) => {
				statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
				if (r.status !== 200) return;
				acked.push(r.body.data.id);
				lastAck = Date.now();
			})
			.catch(() => void statuses.set(0, (statuses.get(0) ?? 0) + 1))
			.finally(() => inflight.delete(p));
		inflight.add(p);
	};
	const load = (async () => {
		while (!stop && Date.now() - start < LOAD_LIMIT_MS) {
			while (sent < ((Date.now() - start) / 1000) * RATE) fire();
			await sleep(5);
		}
	})();
	// Three kills at random points while writes are being acknowledged, each followed by a restart.
	const kills = 3;
	const t0 = Date.now();
	for (let k = 0; k < kills; k++) {
		const since = Date.now();
		await waitFor(() => lastAck > since, "writes acknowledged again", 60_000);
		await sleep(500 + Math.floor(Math.random() * 2500));
		await killContent();
		await startContent();
	}
	const since = Date.now();
	await waitFor(() => lastAck > since, "writes acknowledged after the last restart", 60_000);
	await sleep(1000);
	stop = true;
	const seconds = (Date.now() - t0) / 1000;
	await load;
	// Calls sent to a killed instance end at the broker's request timeout (30 s).
	await Promise.all([...inflight]);
	console.log(
		`write-kill under load: ${kills} kills in ${seconds.toFixed(1)} s of load, ${sent} creates sent, ${acked.length} acknowledged, answers ${JSON.stringify(Object.fromEntries(statuses))}`,
	);
	expect(sent / seconds).toBeGreaterThan(0.8 * RATE);
	expect(acked.length).toBeGreaterThan(100);
	// Answers are 200, or a 5xx / cut connection while the node is down: never a 4xx for a valid create.
	for (const s of statuses.keys()) expect(s === 200 || s === 0 || s >= 500).toBe(true);
	await expectEverythingOnce(acked);
	expect(deliveries).toBeGreaterThanOrEqual(acked.length);
});
