/**
 * Replicated domains on one PostgreSQL: a gateway, a node with every other domain, and the content domain on two
 * nodes (DOCUMENT_STORE=postgres, one database of its own), over the local NATS with Redis as the shared cache.
 * Writes through either replica land in one store with their events; a replica SIGKILLed under load loses no
 * acknowledged write and no event (each acknowledged id is stored once and has exactly one event; no event
 * without its document), and the survivor serves everything. Skips with a message when NATS, Redis or PostgreSQL
 * do not answer (fails under REQUIRE_SERVERS=1).
 */
// jest-solo: a cluster of node processes of its own, stopped, killed or cut off on a schedule (test/run.mjs)
import { readFileSync, rmSync } from "fs";
import path from "path";
import { Client } from "pg";
import { DOMAINS } from "../../catalog";
import { tempDir } from "../helpers/platform";
import { needServers } from "../helpers/platform";
import { PgStore } from "../../stores";
import { client, clusterSettings, crashNode, startNode, stopNode, testDeployment, waitForHttp, type ChildNode } from "../helpers/nodes";
import { freeOpsOffset, freePort } from "../helpers/ports";
import { testDatabase, type TestDatabase } from "../helpers/pg";

const servers = needServers(["NATS", 4222], ["Redis", 6379], ["PostgreSQL", 5432]);

jest.setTimeout(180_000);

let up = false;
let db: TestDatabase | undefined;
let pgc: Client | undefined;
const nodes: Record<string, ChildNode> = {};
let http: ReturnType<typeof client>;
let token: string;

beforeAll(async () => {
	up = servers.up;
	if (!up) return;
	db = await testDatabase();
	if (!db) return void (up = false);
	// A consumer group that never moves: the outbox keeps every event (consumers on the domain nodes would let the
	// pruner remove what they have passed) for this test to count.
	const scratch = tempDir();
	const offsets = new PgStore({ dataDir: scratch, databaseUrl: db.url }, "_stream_offsets");
	await offsets.connect();
	await offsets.insert({ id: "test-hold", seq: 0 });
	await offsets.disconnect();
	rmSync(scratch, { recursive: true, force: true });
	const d = testDeployment();
	const port = await freePort();
	const offset = await freeOpsOffset();
	const shared = {
		...clusterSettings(d, db.url),
		OPS_PORT_OFFSET: String(offset),
	};
	const others = DOMAINS.map((x) => x.name)
		.filter((n) => n !== "content")
		.join(",");
	nodes.core = startNode("core", { ...shared, SERVICES: others });
	nodes.api = startNode("api", { ...shared, SERVICES: "api", PORT: String(port) });
	// Two replicas of one domain on one host: their ops ports would collide, so they serve none.
	nodes.a = startNode("content-a", { ...shared, SERVICES: "content", SERVICE_PORTS: "0" });
	nodes.b = startNode("content-b", { ...shared, SERVICES: "content", SERVICE_PORTS: "0" });
	http = client(`http://127.0.0.1:${port}`);
	await waitForHttp(`http://127.0.0.1:${port}/status`, Object.values(nodes), { timeoutMs: 120_000 });
	const root = JSON.parse(readFileSync(path.join(nodes.core.dataDir, "bootstrap.json"), "utf8"));
	const login = await http("POST", "/auth/token", { body: { grant_type: "password", client_id: root.client_id, username: root.username, password: root.password } });
	expect(login.status).toBe(200);
	token = login.body.data.access_token;
	pgc = new Client({ connectionString: db.url });
	await pgc.connect();
}, 180_000);

afterAll(async () => {
	await pgc?.end();
	await Promise.all(Object.values(nodes).map((n) => stopNode(n)));
	await db?.drop();
});

/** Per note id: documents stored, and `c` events in the outbox. */
async function stored(): Promise<{ docs: Map<string, number>; events: Map<string, number> }> {
	const docs = new Map<string, number>();
	const events = new Map<string, number>();
	for (const r of (await pgc!.query(`select id, count(*)::int as n from "docs/content/notes" group by id`)).rows) docs.set(r.id, r.n);
	for (const r of (
		await pgc!.query(`select rec->'event'->>'id' as id, count(*)::int as n from "_outbox" where rec->'event'->>'op' = 'c' and rec->'event'->>'topic' = 'content.notes' group by 1`)
	).rows)
		events.set(r.id, r.n);
	return { docs, events };
}

const live = (name: string, fn: () => Promise<void>) =>
	servers.test(name, async () => {
		await fn();
	});

live("writes through two content replicas land in one PostgreSQL, each with its one event", async () => {
	const ids: string[] = [];
	for (let round = 0; round < 6; round++) {
		const rs = await Promise.all(Array.from({ length: 10 }, (_, i) => http("POST", "/content/notes", { token, body: { title: `r${round}-${i}` } })));
		for (const r of rs) {
			expect(r.status).toBe(200);
			ids.push(r.body.data.id);
		}
	}
	const list = await http("GET", `/content/notes?pagination=${encodeURIComponent(JSON.stringify({ limit: 100 }))}`, { token });
	expect(list.status).toBe(200);
	expect(list.body.total).toBe(60);
	const { docs, events } = await stored();
	for (const id of ids) expect([id, docs.get(id), events.get(id)]).toEqual([id, 1, 1]);
});

live("a replica SIGKILLed under load: no acknowledged write or event lost; the survivor serves everything", async () => {
	const acked: string[] = [];
	let failed = 0;
	let stop = false;
	const worker = async (w: number) => {
		for (let i = 0; !stop; i++) {
			const r = await http("POST", "/content/notes", { token, body: { title: `load-${w}-${i}` } }).catch(() => null);
			if (r?.status === 200) acked.push(r.body.data.id);
			else failed++;
		}
	};
	const load = Promise.all([0, 1, 2, 3].map(worker));
	await new Promise((r) => setTimeout(r, 2000));
	await crashNode(nodes.a);
	await new Promise((r) => setTimeout(r, 4000));
	stop = true;
	await load;
	// The survivor serves every request once the broker has dropped the dead node.
	const deadline = Date.now() + 60_000;
	let served = 0;
	while (served < 20 && Date.now() < deadline) {
		const r = await http("POST", "/content/notes", { token, body: { title: "after" } });
		if (r.status === 200) {
			acked.push(r.body.data.id);
			served++;
		} else served = 0;
	}
	expect(served).toBe(20);
	expect(acked.length).toBeGreaterThan(20);
	const { docs, events } = await stored();
	for (const id of acked) expect([id, docs.get(id), events.get(id)]).toEqual([id, 1, 1]);
	// Nothing half-written: every event has its document, every document its event.
	for (const id of events.keys()) expect([id, docs.has(id)]).toEqual([id, true]);
	for (const id of docs.keys()) expect([id, events.get(id)]).toEqual([id, 1]);
	console.log(
		`replica killed under load: ${acked.length} acknowledged, ${failed} failed requests (creates in flight to the killed node are not repeated: docs/production.md, "Failover")`,
	);
});
