/**
 * Dependency outages degrade, they do not fail (issue 14). A gateway, a node with every domain (and the relay) and a
 * dispatcher node, over NATS (transporter and JetStream event stream), Redis (cache) and PostgreSQL (documents,
 * outbox, deliveries): each server is this test's own (test/helpers/servers.ts, free ports), so killing one touches
 * nobody else. For each server in turn: steady traffic (logins with the new token's first request, creates, lists),
 * the server killed for 10 s, started again. Asserted: no 500 ever (503 with Retry-After is allowed while it is
 * down), every acknowledged create's change event reaches the webhook receiver, and once the server is back the
 * platform serves normally within a bound, without any node restarted.
 */
// jest-solo: a cluster of node processes of its own, stopped, killed or cut off on a schedule (test/run.mjs)
import { readFileSync } from "fs";
import path from "path";
import { ALL_DOMAINS, client, eventReceiver, startNode, stopNode, testDeployment, timeToServe, waitForHttp, type ChildNode, type EventReceiver } from "../helpers/nodes";
import { DOMAIN_SPEC_PORTS, freeOpsOffset, freePort } from "../helpers/ports";
import { needServerBinaries, ownNats, ownPostgres, ownRedis, type OwnServer } from "../helpers/servers";

const binaries = needServerBinaries();
import { sleep } from "../helpers/wait";
import { WORKER_PORTS } from "../../workers";

jest.setTimeout(90_000);

const OUTAGE_MS = 10_000;
/** Once the server is back: how long the platform may take to serve every kind of request again. */
const RECOVERY_BOUND_MS = 30_000;
/** Every acknowledged create's event at the receiver within this after recovery. */
const EVENTS_BOUND_MS = 30_000;

/** The webhook: ids of the content.notes documents whose `c` events reached it. */
let receiver: EventReceiver | undefined;

const servers: Record<"redis" | "nats" | "postgres", OwnServer> = {} as never;
let nodes: ChildNode[] = [];
let gw: ReturnType<typeof client>;
let root: { client_id: string; username: string; password: string };

interface Outcome {
	what: string;
	status: number;
	retryAfter: string | null;
	text: string;
}

beforeAll(async () => {
	if (!binaries.up) return;
	receiver = await eventReceiver();
	[servers.redis, servers.nats, servers.postgres] = await Promise.all([ownRedis(), ownNats(), ownPostgres()]);
	const d = testDeployment();
	const offset = await freeOpsOffset([...DOMAIN_SPEC_PORTS, WORKER_PORTS.dispatcher]);
	const port = await freePort();
	const shared = {
		TRANSPORTER: servers.nats.url,
		EVENT_STREAM: "nats",
		STREAM_ACK_WAIT_MS: "2000",
		NAMESPACE: d.namespace,
		JWT_SECRET: d.jwtSecret,
		AES_SECRET: d.aesSecret,
		REDIS_URL: servers.redis.url,
		DOCUMENT_STORE: "postgres",
		DATABASE_URL: servers.postgres.url,
		WEBHOOK_ALLOW_PRIVATE: "1",
		WEBHOOK_RETRY_SCHEDULE: "0,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1",
		OPS_PORT_OFFSET: String(offset),
	};
	const core = startNode("core", { ...shared, SERVICES: ALL_DOMAINS });
	const api = startNode("api", { ...shared, SERVICES: "api", PORT: String(port) });
	const workers = startNode("workers", { ...shared, SERVICES: "dispatcher" });
	nodes = [core, api, workers];
	await waitForHttp(`http://127.0.0.1:${port}/status`, nodes, { timeoutMs: 75_000 });
	await waitForHttp(`http://127.0.0.1:${WORKER_PORTS.dispatcher + offset}/status`, nodes, { timeoutMs: 10_000 });
	gw = client(`http://127.0.0.1:${port}`);
	root = JSON.parse(readFileSync(path.join(core.dataDir, "bootstrap.json"), "utf8"));
	const reg = await gw("POST", "/context/configs", { token: await login(), body: { key: "CQRS", eid: root.client_id, value: { webhook: receiver.url } } });
	expect(reg.status).toBe(200);
}, 90_000);

afterAll(async () => {
	await Promise.all(nodes.map((n) => stopNode(n)));
	await Promise.all(Object.values(servers).map((s) => s?.close()));
	await receiver?.close();
});

async function login(): Promise<string> {
	const r = await gw("POST", "/auth/token", { body: { grant_type: "password", client_id: root.client_id, username: root.username, password: root.password } });
	if (r.status !== 200) throw new Error(`login ${r.status} ${r.text}`);
	return r.body.data.access_token;
}

/**
 * Requests of every kind in three loops until `stop()`: a login followed by the new token's first request; a
 * create; a list. Every answer is kept; creates answered 200 are acknowledged writes.
 */
function traffic(token: string) {
	const outcomes: Outcome[] = [];
	const acked: string[] = [];
	let running = true;
	const record = async (what: string, p: Promise<{ status: number; headers: Headers; text: string; body: any }>) => {
		const r = await p.catch((err) => ({ status: 0, headers: new Headers(), text: String(err), body: undefined }));
		outcomes.push({ what, status: r.status, retryAfter: r.headers.get("retry-after"), text: r.text.slice(0, 300) });
		return r;
	};
	const loop = async (step: (i: number) => Promise<void>) => {
		for (let i = 0; running; i++) {
			await step(i);
			await sleep(100);
		}
	};
	const done = Promise.all([
		loop(async () => {
			const r = await record("login", gw("POST", "/auth/token", { body: { grant_type: "password", client_id: root.client_id, username: root.username, password: root.password } }));
			if (r.status === 200) await record("first request", gw("GET", "/auth/verify", { token: r.body.data.access_token }));
		}),
		loop(async (i) => {
			const r = await record("create", gw("POST", "/content/notes", { token, body: { title: `outage-${i}` } }));
			if (r.status === 200) acked.push(r.body.data.id);
		}),
		loop(async () => {
			await record("list", gw("GET", `/content/notes?pagination=${encodeURIComponent(JSON.stringify({ limit: 5 }))}`, { token }));
		}),
	]);
	return {
		outcomes,
		acked,
		async stop() {
			running = false;
			await done;
		},
	};
}

const summary = (os: Outcome[]) => {
	const m = new Map<string, number>();
	for (const o of os) m.set(`${o.what} ${o.status}`, (m.get(`${o.what} ${o.status}`) ?? 0) + 1);
	return Object.fromEntries([...m].sort());
};

async function outage(name: keyof typeof servers, during?: (fresh: string) => Promise<void>): Promise<void> {
	const token = await login();
	const fresh = await login();
	const load = traffic(token);
	await sleep(1500);
	await servers[name].stop();
	const started = Date.now();
	await during?.(fresh);
	await sleep(Math.max(0, OUTAGE_MS - (Date.now() - started)));
	await servers[name].start();
	const recoveredIn = await timeToServe(gw, root, token, { boundMs: RECOVERY_BOUND_MS, nodes });
	await load.stop();
	const { outcomes, acked } = load;
	console.log(`${name} down ${OUTAGE_MS / 1000} s: recovered in ${recoveredIn} ms; ${acked.length} creates acknowledged; answers ${JSON.stringify(summary(outcomes))}`);
	// No 500, nor any other failure than a 503 that says when to come back.
	const failures = outcomes.filter((o) => o.status !== 200);
	for (const f of failures) expect(f).toEqual({ what: f.what, status: 503, retryAfter: expect.stringMatching(/^[1-9]\d*$/), text: expect.any(String) });
	for (const f of failures) expect(JSON.parse(f.text)).toEqual({ statusCode: 503, message: "service unavailable", error: "Service Unavailable" });
	expect(outcomes.filter((o) => o.status === 200).length).toBeGreaterThan(10);
	// No lost event: every acknowledged create reaches the webhook.
	const until = Date.now() + EVENTS_BOUND_MS;
	const { delivered } = receiver!;
	while (acked.some((id) => !delivered.has(id)) && Date.now() < until) await sleep(250);
	expect(acked.filter((id) => !delivered.has(id))).toEqual([]);
	// Nobody was restarted.
	for (const n of nodes) expect([n.name, n.child.exitCode]).toEqual([n.name, null]);
}

binaries.test("Redis killed for 10 s: no 500, no lost event, recovery without restarting a node", () =>
	outage("redis", async (fresh) => {
		// A token never used before: its session is checked in the durable record, not the cache.
		expect((await gw("GET", "/auth/verify", { token: fresh })).status).toBe(200);
		// Logout closes the session durably; the revocation holds without the cache's blacklist.
		const out = await gw("GET", "/auth/logout", { token: fresh });
		expect([out.status, out.body]).toEqual([200, { result: "OK" }]);
		const after = await gw("GET", "/auth/verify", { token: fresh });
		expect([after.status, after.body]).toEqual([401, { statusCode: 401, message: "session is revoked", error: "Unauthorized" }]);
		// Login needs its failure counter: 503 with Retry-After, never a login past the brute-force bound.
		const l = await gw("POST", "/auth/token", { body: { grant_type: "password", client_id: root.client_id, username: root.username, password: root.password } });
		expect([l.status, l.body, l.headers.get("retry-after")]).toEqual([503, { statusCode: 503, message: "service unavailable", error: "Service Unavailable" }, "2"]);
	}),
);
binaries.test("NATS killed for 10 s: no 500, no lost event, recovery without restarting a node", () => outage("nats"));
binaries.test("PostgreSQL killed for 10 s: no 500, no lost event, recovery without restarting a node", () => outage("postgres"));
