/**
 * Request audit survives its logger (issue 14 item 7): a gateway node (the gateway and every domain) under request
 * load, and the logger in a process of its own, SIGKILLed and restarted in the middle. Every request answered
 * gets exactly one audit row (one per unique path; no request id twice). Three times: embedded
 * (EVENT_STREAM=outbox, the spool beside the outbox on a PostgreSQL document store of its own), over the local NATS
 * JetStream (EVENT_STREAM=nats) and on Redis Streams (EVENT_STREAM=redis), each in a namespace of its own. Each
 * skips with a message when a server it needs (PostgreSQL, NATS, Redis) does not answer.
 */
// jest-solo: a cluster of node processes of its own, stopped, killed or cut off on a schedule (test/run.mjs)
import { randomBytes } from "crypto";
import { readFileSync } from "fs";
import path from "path";
import { Client } from "pg";
import { needServers } from "../helpers/platform";
import { ALL_DOMAINS, client, crashNode, dropNatsStreams, dropRedisPrefix, startNode, stopNode, testDeployment, waitForHttp, type ChildNode } from "../helpers/nodes";
import { freePort } from "../helpers/ports";
import { testDatabase, type TestDatabase } from "../helpers/pg";
import { eventually, sleep } from "../helpers/wait";

const pgOnly = needServers(["PostgreSQL", 5432]);
const withNats = needServers(["PostgreSQL", 5432], ["NATS", 4222]);
const withRedis = needServers(["PostgreSQL", 5432], ["Redis", 6379]);
const REDIS_URL = "redis://127.0.0.1:6379";

jest.setTimeout(240_000);

const started: ChildNode[] = [];
const databases: TestDatabase[] = [];
const namespaces: string[] = [];
/** Redis key prefixes of the Redis run: its cache prefix and its streams (`<namespace>.platform.*`). */
const redisPrefixes: string[] = [];

afterAll(async () => {
	await Promise.all(started.map((n) => stopNode(n)));
	for (const d of databases) await d.drop().catch(() => undefined);
	for (const prefix of redisPrefixes) await dropRedisPrefix(REDIS_URL, prefix);
	for (const ns of namespaces) await dropNatsStreams(ns);
});

function node(name: string, env: Record<string, string>): ChildNode {
	const n = startNode(name, env);
	started.push(n);
	return n;
}

/**
 * Load on the gateway (each request a path of its own), the logger killed after 2 s and started again 2 s later,
 * load for 8 s in all; then every answered request must have its one row.
 */
async function scenario(env: Record<string, string>): Promise<void> {
	const db = await testDatabase();
	if (!db) return;
	databases.push(db);
	const port = await freePort();
	const shared = { ...env, DATABASE_URL: db.url, JWT_SECRET: randomBytes(32).toString("base64url"), AES_SECRET: randomBytes(32).toString("base64url") };
	const gateway = node("gateway", { ...shared, SERVICES: `api,${ALL_DOMAINS}`, PORT: String(port) });
	const loggerEnv = { ...shared, SERVICES: "logger", SERVICE_PORTS: "0" };
	let logger = node("logger", loggerEnv);
	const base = `http://127.0.0.1:${port}`;
	await waitForHttp(`${base}/status`, [gateway, logger], { timeoutMs: 120_000 });
	const http = client(base);
	const root = JSON.parse(readFileSync(path.join(gateway.dataDir, "bootstrap.json"), "utf8"));
	const login = await http("POST", "/auth/token", { body: { grant_type: "password", client_id: root.client_id, username: root.username, password: root.password } });
	expect(login.status).toBe(200);
	const token = login.body.data.access_token as string;

	const tag = randomBytes(4).toString("hex");
	const answered: string[] = [];
	let stop = false;
	const worker = async (w: number) => {
		for (let i = 0; !stop; i++) {
			// A 24-hex id no document has: an authenticated read answered 404 by the domain, one path per request.
			const id = `${tag}${w.toString(16).padStart(2, "0")}${i.toString(16).padStart(14, "0")}`;
			const r = await http("GET", `/content/notes/${id}`, { token }).catch(() => null);
			if (r) {
				expect(r.status).toBe(404);
				answered.push(id);
			}
		}
	};
	const load = Promise.all([0, 1, 2, 3].map(worker));
	await sleep(1500);
	const beforeKill = answered.length;
	await crashNode(logger);
	await sleep(1500);
	logger = node("logger-again", loggerEnv);
	await sleep(2500);
	stop = true;
	await load;

	const pg = new Client({ connectionString: db.url });
	await pg.connect();
	try {
		const rows = await eventually(
			async () =>
				(
					await pg.query<{ document_id: string; request_id: string; status: number }>(
						"select document_id, request_id, status from audit_entries where kind = 'request' and document_id like $1",
						[`${tag}%`],
					)
				).rows,
			(r) => r.length >= answered.length,
			90_000,
		);
		const perId = new Map<string, number>();
		for (const r of rows) perId.set(r.document_id, (perId.get(r.document_id) ?? 0) + 1);
		const missing = answered.filter((id) => !perId.has(id));
		const twice = [...perId].filter(([, n]) => n > 1);
		expect({ missing: missing.length, twice: twice.length }).toEqual({ missing: 0, twice: 0 });
		expect(rows).toHaveLength(answered.length);
		expect(new Set(rows.map((r) => r.request_id)).size).toBe(rows.length);
		expect(rows.every((r) => r.status === 404)).toBe(true);
		expect(beforeKill).toBeGreaterThan(20);
		console.log(`${env.EVENT_STREAM}: ${answered.length} requests (${beforeKill} before the kill), each audited once`);
	} finally {
		await pg.end();
	}
	await stopNode(logger);
	await stopNode(gateway);
}

pgOnly.test("embedded (outbox): the logger SIGKILLed and restarted under load; every request audited once", async () => {
	const d = testDeployment();
	await scenario({ EVENT_STREAM: "outbox", DOCUMENT_STORE: "postgres", NAMESPACE: d.namespace });
});

withNats.test("over NATS JetStream: the logger SIGKILLed and restarted under load; every request audited once", async () => {
	const d = testDeployment();
	namespaces.push(d.namespace);
	await scenario({ EVENT_STREAM: "nats", TRANSPORTER: "nats://127.0.0.1:4222", NAMESPACE: d.namespace, STREAM_ACK_WAIT_MS: "2000" });
});

withRedis.test("over Redis Streams: the logger SIGKILLed and restarted under load; every request audited once", async () => {
	const d = testDeployment();
	redisPrefixes.push(d.redisPrefix, `${d.namespace}.`);
	await scenario({ EVENT_STREAM: "redis", REDIS_URL, REDIS_PREFIX: d.redisPrefix, NAMESPACE: d.namespace, STREAM_ACK_WAIT_MS: "2000" });
});
