/**
 * docker-compose.yml's topology without Docker: five processes over the real NATS (transporter and JetStream change
 * stream, EVENT_STREAM=nats), Redis and PostgreSQL (DOCUMENT_STORE=postgres, a database of its own per run): the
 * gateway; the content domain on two replicas; identity, auth and every other domain on one node (the gateway's
 * /status waits for all fourteen); the seven workers on one node. Each replica answers /status and /metrics on its
 * own ops port (two offsets, as two containers would each have the spec port). A tenant user logs in, writes and
 * reads notes through both replicas, the tenant's webhook gets every change of its own notes and none of another
 * tenant's, and the logger's audit (in the shared PostgreSQL) has every request. Skips with a message when NATS,
 * Redis or PostgreSQL does not answer (fails under REQUIRE_SERVERS=1).
 */
// jest-solo: a cluster of node processes of its own, stopped, killed or cut off on a schedule (test/run.mjs)
import { readdirSync, readFileSync } from "fs";
import path from "path";
import { connect } from "nats";
import { Client } from "pg";
import { DOMAINS } from "../../catalog";
import { WORKER_PORTS } from "../../workers";
import { needServers } from "../helpers/platform";
import { client, dropNatsStreams, dropRedisPrefix, startNode, stopNode, testDeployment, waitForHttp, type ChildNode } from "../helpers/nodes";
import { DOMAIN_SPEC_PORTS, freeOpsOffset, freePort } from "../helpers/ports";
import { testDatabase, type TestDatabase } from "../helpers/pg";
import { eventually } from "../helpers/wait";
import { webhookReceiver, type WebhookReceiver } from "../helpers/webhook-receiver";

const servers = needServers(["NATS", 4222], ["Redis", 6379], ["PostgreSQL", 5432]);

jest.setTimeout(60_000);

const REDIS = "redis://127.0.0.1:6379";
const CONTENT = DOMAINS.find((d) => d.name === "content")!.restPort;
const d = testDeployment();
const TENANT_DOMAIN = `acme-${d.id}.example`;

let db: TestDatabase | undefined;
let pgc: Client | undefined;
const nodes: Record<string, ChildNode> = {};
let gw: ReturnType<typeof client>;
let gwPort = 0;
let offset = 0;
/** Ops ports of the two content replicas: the spec port under two offsets. */
let replicaPorts: [number, number];
let rootToken = "";
let tenantId = "";
let userToken = "";

/** The tenant's webhook receiver: every change event it is sent. */
let receiver: WebhookReceiver | undefined;
let received: any[] = [];

beforeAll(async () => {
	if (!servers.up) return;
	db = await testDatabase();
	if (!db) return;
	receiver = await webhookReceiver();
	received = receiver.received;
	offset = await freeOpsOffset([...DOMAIN_SPEC_PORTS, ...Object.values(WORKER_PORTS), CONTENT + 1]);
	replicaPorts = [CONTENT + offset, CONTENT + offset + 1];
	gwPort = await freePort();
	const shared = {
		TRANSPORTER: "nats://127.0.0.1:4222",
		EVENT_STREAM: "nats",
		STREAM_URL: "nats://127.0.0.1:4222",
		DOCUMENT_STORE: "postgres",
		DATABASE_URL: db.url,
		REDIS_URL: REDIS,
		REDIS_PREFIX: d.redisPrefix,
		NAMESPACE: d.namespace,
		JWT_SECRET: d.jwtSecret,
		AES_SECRET: d.aesSecret,
		OPS_PORT_OFFSET: String(offset),
	};
	const core = DOMAINS.map((x) => x.name)
		.filter((n) => n !== "content")
		.join(",");
	nodes.core = startNode("core", { ...shared, SERVICES: core });
	nodes.api = startNode("api", { ...shared, SERVICES: "api", PORT: String(gwPort) });
	nodes.contentA = startNode("content-a", { ...shared, SERVICES: "content" });
	nodes.contentB = startNode("content-b", { ...shared, SERVICES: "content", OPS_PORT_OFFSET: String(offset + 1) });
	nodes.workers = startNode("workers", { ...shared, SERVICES: Object.keys(WORKER_PORTS).join(","), WEBHOOK_ALLOW_PRIVATE: "1" });
	gw = client(`http://127.0.0.1:${gwPort}`);
	await waitForHttp(`http://127.0.0.1:${gwPort}/status`, Object.values(nodes), { timeoutMs: 150_000 });
	pgc = new Client({ connectionString: db.url });
	await pgc.connect();
}, 180_000);

afterAll(async () => {
	await Promise.all(Object.values(nodes).map((n) => stopNode(n)));
	await receiver?.close();
	await pgc?.end();
	if (!db) return;
	const step = (what: string, p: Promise<unknown>) => p.catch((err) => console.warn(`cleanup: ${what} failed: ${(err as Error).message}`));
	await step("drop the database", db.drop());
	await step("delete the Redis keys", dropRedisPrefix(REDIS, d.redisPrefix));
	await step("delete the JetStream streams", dropNatsStreams(d.namespace));
}, 30_000);

/** Calls content.notes.<action> counted by one replica's own metrics registry. */
async function servedBy(port: number, action: string): Promise<number> {
	const text = await (await fetch(`http://127.0.0.1:${port}/metrics`, { signal: AbortSignal.timeout(5000) })).text();
	const re = new RegExp(`^moleculer_request_total\\{[^}]*action="content\\.notes\\.${action}"[^}]*\\} (\\d+)$`, "gm");
	return [...text.matchAll(re)].reduce((n, m) => n + Number(m[1]), 0);
}

servers.test("the gateway's /status is 200 with all fourteen domains and seven workers up, each replica on its own port", async () => {
	const s = await gw("GET", "/status");
	expect(s.status).toBe(200);
	expect(s.body.status).toBe("ok");
	for (const x of DOMAINS) expect([x.name, s.body.info[`service:${x.name}`]]).toEqual([x.name, { status: "up" }]);
	for (const w of Object.keys(WORKER_PORTS)) expect([w, s.body.info[`service:${w}`]]).toEqual([w, { status: "up" }]);
	expect(s.body.info["event stream"]).toEqual({ status: "up" });
	for (const port of [...replicaPorts, WORKER_PORTS.logger + offset, DOMAINS.find((x) => x.name === "identity")!.restPort + offset]) {
		const r = await fetch(`http://127.0.0.1:${port}/status`, { signal: AbortSignal.timeout(5000) });
		expect([port, r.status]).toEqual([port, 200]);
	}
	// The change stream is JetStream's, under this deployment's namespace.
	const nc = await connect({ servers: "127.0.0.1:4222" });
	try {
		const info = await (await nc.jetstreamManager()).streams.info(`${d.namespace}_platform_changes`);
		expect(info.config.subjects).toEqual([`${d.namespace}.platform.changes`]);
	} finally {
		await nc.close();
	}
});

servers.test("a tenant user logs in through the gateway (root seeded by the identity+auth node)", async () => {
	const root = JSON.parse(readFileSync(path.join(nodes.core.dataDir, "bootstrap.json"), "utf8"));
	// Only the node running auth seeds: no other node wrote root credentials.
	for (const n of [nodes.api, nodes.contentA, nodes.contentB, nodes.workers]) expect(() => readFileSync(path.join(n.dataDir, "bootstrap.json"))).toThrow(/ENOENT/);
	const login = await gw("POST", "/auth/token", { body: { grant_type: "password", client_id: root.client_id, username: root.username, password: root.password } });
	expect(login.status).toBe(200);
	rootToken = login.body.data.access_token;
	const acme = await gw("POST", "/domain/clients", {
		token: rootToken,
		body: { name: "Acme", domains: [TENANT_DOMAIN], scopes: ["manage:identity:users", "manage:content", "manage:context:configs"] },
	});
	expect(acme.status).toBe(200);
	tenantId = acme.body.data.id;
	const grant = (subject: string, object: string) => gw("POST", "/auth/grants", { token: rootToken, body: { subject, action: "manage", object } });
	expect((await grant(`${tenantId}@${TENANT_DOMAIN}`, "identity:users")).status).toBe(200);
	for (const object of ["content:notes", "context:configs"]) expect((await grant(`@editor@${TENANT_DOMAIN}`, object)).status).toBe(200);
	const cc = await gw("POST", "/auth/token", { body: { grant_type: "client_credentials", client_id: tenantId, client_secret: acme.body.data.secret } });
	expect(cc.status).toBe(200);
	const user = await gw("POST", "/identity/users", { token: cc.body.data.access_token, body: { username: "ada", password: "Ada-Lovelace-1815!", subjects: ["@editor"] } });
	expect(user.status).toBe(200);
	const wrong = await gw("POST", "/auth/token", { body: { grant_type: "password", client_id: tenantId, username: "ada", password: "not-her-password" } });
	expect(wrong.status).toBe(401);
	const ada = await gw("POST", "/auth/token", { body: { grant_type: "password", client_id: tenantId, username: "ada", password: "Ada-Lovelace-1815!" } });
	expect(ada.status).toBe(200);
	userToken = ada.body.data.access_token;
});

servers.test("the user's notes go through both content replicas; its webhook gets each change, the audit each request", async () => {
	expect(userToken).not.toBe("");
	const hook = receiver!.url();
	const cfg = await gw("POST", "/context/configs", { token: userToken, body: { key: "CQRS", value: { webhook: hook } } });
	expect(cfg.status).toBe(200);
	const before = await Promise.all(replicaPorts.map((p) => servedBy(p, "create")));
	// Another tenant's write (root's), ahead of the user's in the stream (handled in order): it never reaches this
	// tenant's webhook, which has had it by the time the user's events arrived.
	const other = await gw("POST", "/content/notes", { token: rootToken, body: { title: "root's own" } });
	expect(other.status).toBe(200);
	const ids: string[] = [];
	for (let i = 0; i < 12; i++) {
		const r = await gw("POST", "/content/notes", { token: userToken, body: { title: `note ${i}` } });
		expect([i, r.status]).toEqual([i, 200]);
		ids.push(r.body.data.id);
	}
	for (const [i, id] of ids.entries()) {
		const r = await gw("GET", `/content/notes/${id}`, { token: userToken });
		expect([r.status, r.body.data.id, r.body.data.title]).toEqual([200, id, `note ${i}`]);
	}
	const list = await gw("GET", `/content/notes?pagination=${encodeURIComponent(JSON.stringify({ limit: 50 }))}`, { token: userToken });
	expect(list.status).toBe(200);
	expect(list.body.total).toBe(12);

	// The gateway balanced the creates over both replicas (each counts what it served in its own registry).
	const after = await Promise.all(replicaPorts.map((p) => servedBy(p, "create")));
	const served = after.map((n, i) => n - before[i]);
	expect(served[0] + served[1]).toBe(13);
	expect(served[0]).toBeGreaterThan(0);
	expect(served[1]).toBeGreaterThan(0);

	const events = await eventually(
		async () => received.filter((e) => e.topic === "content.notes" && e.op === "c"),
		(es) => es.length >= 12,
		30_000,
	);
	expect(events.map((e) => e.id).sort()).toEqual([...ids].sort());
	expect(received.some((e) => e.id === other.body.data.id)).toBe(false);

	const rows = await eventually(
		async () =>
			(await pgc!.query("select method, path, status, action, cid from audit_entries where kind = 'request' and cid = $1 and path like '/content/notes%'", [tenantId])).rows,
		(r) => r.length >= 25,
		30_000,
	);
	const seen = (method: string, p: string) => rows.filter((r) => r.method === method && r.path === p && r.status === 200).length;
	for (const id of ids) expect([id, seen("GET", `/content/notes/${id}`)]).toEqual([id, 1]);
	expect(rows.filter((r) => r.method === "POST" && r.path === "/content/notes" && r.action === "content.notes.create" && r.status === 200)).toHaveLength(12);
	expect(seen("GET", "/content/notes")).toBe(1);
});

servers.test("on PostgreSQL the nodes keep no store in DATA_DIR: only the auth node needs a lasting one (the compose file's volumes)", () => {
	const files = Object.fromEntries(Object.entries(nodes).map(([n, node]) => [n, readdirSync(node.dataDir, { recursive: true }).map(String).sort()]));
	// The auth node's root credentials; the publisher's generated VAPID keys (the compose file sets VAPID_*). Uploaded
	// files (DATA_DIR/files of the special domain, without S3) are the other lasting kind; none here.
	expect(files).toEqual({ core: ["bootstrap.json"], api: [], contentA: [], contentB: [], workers: ["vapid.json"] });
});
