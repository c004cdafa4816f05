/**
 * Issue 25 item 3: live cursors over several gateway nodes. Two gateways (SERVICES=api) and one domain node over the
 * local NATS, documents and the outbox in one PostgreSQL database: a live cursor on either gateway sees changes
 * written through the other, decided with the caller's view there too; a gateway that restarts lets its clients
 * resume by Last-Event-ID without a gap; a gateway without a shared store or the domain services refuses `live`.
 * Skips with a message when NATS, Redis or PostgreSQL is down (fails under REQUIRE_SERVERS=1).
 */
// jest-solo: a cluster of node processes of its own, stopped, killed or cut off on a schedule (test/run.mjs)
import { readFileSync } from "fs";
import path from "path";
import { needServers } from "../helpers/platform";
import { ALL_DOMAINS, client, clusterSettings, dropRedisPrefix, startNode, stopNode, testDeployment, waitForHttp, type ChildNode } from "../helpers/nodes";
import { freeOpsOffset, freePort } from "../helpers/ports";
import { testDatabase, type TestDatabase } from "../helpers/pg";
import { openStream, type LiveStream } from "../helpers/live-sse";

const servers = needServers(["NATS", 4222], ["Redis", 6379], ["PostgreSQL", 5432]);
jest.setTimeout(240_000);

let db: TestDatabase | undefined;
let deployment: ReturnType<typeof testDeployment>;
const nodes: Record<string, ChildNode> = {};
const ports: Record<string, number> = {};
let shared: Record<string, string>;
const open: LiveStream[] = [];
let token: string;
let other: string;
let otherId: string;

const url = (gw: "g1" | "g2") => `http://127.0.0.1:${ports[gw]}`;
const http = (gw: "g1" | "g2") => client(url(gw));
const startGateway = (gw: "g1" | "g2") => (nodes[gw] = startNode(gw, { ...shared, SERVICES: "api", PORT: String(ports[gw]) }));

async function live(gw: "g1" | "g2", t: string, headers: Record<string, string> = {}): Promise<LiveStream> {
	const s = await openStream(`${url(gw)}/content/notes/cursor?live=true`, { authorization: `Bearer ${t}`, ...headers });
	open.push(s);
	return s;
}
const change = (s: LiveStream, id: string, op: string, ms = 5000) => s.waitFor((f) => f.event === "change" && JSON.parse(f.data).id === id && JSON.parse(f.data).op === op, ms);

beforeAll(async () => {
	if (!servers.up) return;
	db = await testDatabase();
	if (!db) return;
	deployment = testDeployment();
	shared = clusterSettings(deployment, db.url);
	ports.g1 = await freePort();
	ports.g2 = await freePort();
	nodes.domain = startNode("domain", { ...shared, SERVICES: ALL_DOMAINS, OPS_PORT_OFFSET: String(await freeOpsOffset()) });
	startGateway("g1");
	startGateway("g2");
	await waitForHttp(`${url("g1")}/status`, Object.values(nodes), { timeoutMs: 150_000 });
	await waitForHttp(`${url("g2")}/status`, Object.values(nodes), { timeoutMs: 150_000 });
	const root = JSON.parse(readFileSync(path.join(nodes.domain.dataDir, "bootstrap.json"), "utf8"));
	const login = async (username: string, password: string) =>
		(await http("g1")("POST", "/auth/token", { body: { grant_type: "password", client_id: root.client_id, username, password } })).body.data.access_token as string;
	token = await login(root.username, root.password);
	const u = await http("g1")("POST", "/identity/users", { token, body: { username: "live-other", password: "pw-live-other-Secret1", subjects: [] } });
	otherId = u.body.data.id;
	await http("g1")("POST", "/auth/grants", { token, body: { subject: `${otherId}@${root.domain}`, action: "read", object: "content:notes" } });
	other = await login("live-other", "pw-live-other-Secret1");
}, 240_000);

afterAll(async () => {
	for (const s of open) s.close();
	await Promise.all(Object.values(nodes).map((n) => stopNode(n)));
	if (deployment) await dropRedisPrefix("redis://127.0.0.1:6379", deployment.redisPrefix).catch(() => undefined);
	await db?.drop();
});

servers.test("a live cursor on one gateway sees changes written through the other, within the caller's view", async () => {
	const s1 = await live("g1", token);
	const s2 = await live("g2", other);
	await Promise.all([s1, s2].map((s) => s.waitFor((f) => f.event === "live")));
	const t0 = performance.now();
	const n = (await http("g2")("POST", "/content/notes", { token, body: { title: "via g2" } })).body.data;
	const f = await change(s1, n.id, "enter");
	console.log(`change written through g2 reached the live cursor on g1 after ${Math.round(f.at - t0)} ms`);
	expect(JSON.parse(f.data).data).toEqual((await http("g1")("GET", `/content/notes/${n.id}`, { token })).body.data);
	// Shared with the other user through g1: it enters that user's view on g2; unshared, it leaves.
	await http("g1")("PATCH", `/content/notes/${n.id}`, { token, body: { shares: [otherId] } });
	await change(s2, n.id, "enter");
	await http("g1")("PATCH", `/content/notes/${n.id}`, { token, body: { shares: [] } });
	await change(s2, n.id, "leave");
	const secret = (await http("g1")("POST", "/content/notes", { token, body: { title: "root only" } })).body.data;
	await change(s1, secret.id, "enter");
	const marker = (await http("g1")("POST", "/content/notes", { token, body: { title: "marker", shares: [otherId] } })).body.data;
	await change(s2, marker.id, "enter");
	expect(s2.text()).not.toContain(secret.id);
});

servers.test("a gateway that restarts: its clients resume by Last-Event-ID without a gap", async () => {
	const s = await live("g2", token);
	await s.waitFor((f) => f.event === "live");
	const a = (await http("g1")("POST", "/content/notes", { token, body: { title: "before restart" } })).body.data;
	const last = await change(s, a.id, "enter");
	await stopNode(nodes.g2);
	const during = (await http("g1")("POST", "/content/notes", { token, body: { title: "while g2 is down" } })).body.data;
	await http("g1")("PATCH", `/content/notes/${a.id}`, { token, body: { title: "patched while down" } });
	startGateway("g2");
	await waitForHttp(`${url("g2")}/status`, [nodes.g2, nodes.domain], { timeoutMs: 120_000 });
	const r = await live("g2", token, { "last-event-id": last.id! });
	expect(r.status).toBe(200);
	await change(r, a.id, "update");
	expect(r.changes().map((c) => [c.id, c.op])).toEqual([
		[during.id, "enter"],
		[a.id, "update"],
	]);
	expect(r.changes()[1].data!.title).toBe("patched while down");
});
