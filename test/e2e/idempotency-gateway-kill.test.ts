/**
 * A gateway killed (SIGKILL) with keyed writes in flight: the key's lease belonged to a node that is gone, so a retry
 * gets its answer within 5 s (docs/production.md, "Idempotency-Key leases"), not a 409 `in progress` until the dead
 * gateway's lease would have run out. Two cases: the only gateway, restarted under its NODE_ID (a new instance of the
 * same node), and another gateway of the cluster that saw the first one go. Each key ends with exactly one document.
 *
 * The production mode: NATS transporter, documents on PostgreSQL (a database of its own), Redis as the shared cache;
 * gateways `api` and `api2`, the content node (stopped with SIGSTOP so the writes are in flight at the gateway when it
 * is killed, then resumed: they commit under the dead gateway's attempts) and a node with every other domain. Skips
 * with a message when NATS, Redis or PostgreSQL do not answer (fails under REQUIRE_SERVERS=1).
 */
// jest-solo: a cluster of node processes of its own, stopped, killed or cut off on a schedule (test/run.mjs)
import { readFileSync } from "fs";
import path from "path";
import { connect } from "nats";
import { Client } from "pg";
import { DOMAINS } from "../../catalog";
import { needServers } from "../helpers/platform";
import { client, clusterSettings, crashNode, dropNatsStreams, dropRedisPrefix, startNode, stopNode, testDeployment, waitForHttp, type ChildNode } from "../helpers/nodes";
import { freeOpsOffset, freePort } from "../helpers/ports";
import { testDatabase, type TestDatabase } from "../helpers/pg";
import { sleep, waitForValue } from "../helpers/wait";

const servers = needServers(["NATS", 4222], ["Redis", 6379], ["PostgreSQL", 5432]);
/** Keyed creates in flight at the kill. */
const KEYS = 5;
/** The bound of the issue: a retry answered within this after its gateway is known gone. */
const ANSWER_MS = 5_000;

jest.setTimeout(400_000);

const deployment = testDeployment();
let db: TestDatabase | undefined;
let pg: Client | undefined;
const nodes: Record<string, ChildNode> = {};
let shared: Record<string, string>;
let apiEnv: Record<string, string>;
let apiUrl: string;
let api2Url: string;
let token: string;

beforeAll(async () => {
	if (!servers.up) return;
	db = await testDatabase();
	if (!db) return;
	shared = { ...clusterSettings(deployment, db.url), OPS_PORT_OFFSET: String(await freeOpsOffset()) };
	const others = DOMAINS.map((d) => d.name)
		.filter((n) => n !== "content")
		.join(",");
	const [port, port2] = [await freePort(), await freePort()];
	apiUrl = `http://127.0.0.1:${port}`;
	api2Url = `http://127.0.0.1:${port2}`;
	apiEnv = { ...shared, SERVICES: "api", PORT: String(port), NODE_ID: `api-${deployment.id}` };
	nodes.core = startNode("core", { ...shared, SERVICES: others });
	nodes.content = startNode("content", { ...shared, SERVICES: "content", OPS_PORT_OFFSET: String(await freeOpsOffset([DOMAINS.find((d) => d.name === "content")!.restPort])) });
	nodes.api = startNode("api", apiEnv);
	nodes.api2 = startNode("api2", { ...shared, SERVICES: "api", PORT: String(port2), NODE_ID: `api2-${deployment.id}` });
	await waitForHttp(`${apiUrl}/status`, Object.values(nodes), { timeoutMs: 180_000 });
	await waitForHttp(`${api2Url}/status`, Object.values(nodes), { timeoutMs: 180_000 });
	const root = JSON.parse(readFileSync(path.join(nodes.core.dataDir, "bootstrap.json"), "utf8"));
	const login = await client(apiUrl)("POST", "/auth/token", { body: { grant_type: "password", client_id: root.client_id, username: root.username, password: root.password } });
	expect(login.status).toBe(200);
	token = login.body.data.access_token;
	// Both gateways reach the content node (and the key records' table exists) before the cases start.
	for (const url of [apiUrl, api2Url])
		expect((await client(url)("POST", "/content/notes", { token, body: { title: "warm" }, headers: { "Idempotency-Key": `warm-${url}` } })).status).toBe(200);
	pg = new Client({ connectionString: db.url });
	await pg.connect();
}, 300_000);

afterAll(async () => {
	await pg?.end();
	for (const n of Object.values(nodes)) {
		try {
			process.kill(-n.pid, "SIGCONT");
		} catch {
			/* gone */
		}
	}
	await Promise.all(Object.values(nodes).map((n) => stopNode(n)));
	await db?.drop();
	if (servers.up) {
		await dropNatsStreams(deployment.namespace);
		await dropRedisPrefix("redis://127.0.0.1:6379", deployment.redisPrefix);
	}
});

const signal = (n: ChildNode, sig: NodeJS.Signals) => process.kill(-n.pid, sig);

/** Notes per description: one per key is the contract. */
const notesOf = async (prefix: string) =>
	new Map(
		(await pg!.query(`select doc->>'description' as k, count(*)::int as n from "docs/content/notes" where doc->>'description' like $1 group by 1`, [`${prefix}%`])).rows.map(
			(r) => [r.k as string, r.n as number],
		),
	);

/**
 * Counts the create requests for this run's notes that gateways publish on the deployment's NATS subjects (Moleculer's
 * `MOL-<namespace>.REQ.<node>`, JSON packets). A claimed record alone does not prove its call left the gateway: the
 * claim commits before the call is published, and a kill between the two leaves a key whose first attempt never ran
 * (its retry then writes the note itself, which is the contract too, but not the replay the first case asserts).
 */
async function requestTap(run: string) {
	const nc = await connect({ servers: "127.0.0.1:4222" });
	let seen = 0;
	nc.subscribe(`MOL-${deployment.namespace}.>`, {
		callback: (_err, m) => {
			const packet = m.string();
			if (packet.includes('"content.notes.create"') && packet.includes(run)) seen++;
		},
	});
	await nc.flush();
	return { seen: () => seen, close: () => nc.close() };
}

/**
 * Sends KEYS keyed creates through the gateway `api` while the content node is stopped, waits until their records are
 * claimed (`running`) and their calls are on NATS (the writes are in flight between the gateway and the content
 * node), then kills `api` and resumes the content node.
 */
async function inFlightAtKill(run: string): Promise<{ keys: string[]; killedAt: number }> {
	const keys = Array.from({ length: KEYS }, (_, i) => `${run}-${i}`);
	const tap = await requestTap(run);
	signal(nodes.content, "SIGSTOP");
	try {
		const gw = client(apiUrl);
		const sent = Date.now();
		for (const k of keys) void gw("POST", "/content/notes", { token, body: { title: run, description: k }, headers: { "Idempotency-Key": k } }).catch(() => undefined);
		const claimed = async () =>
			(
				await pg!.query(
					`select count(*)::int as n from "docs/_idempotency" where doc->>'state' = 'running' and doc->>'action' = 'content.notes.create' and (doc->>'at')::bigint >= $1`,
					[sent],
				)
			).rows[0].n as number;
		await waitForValue("the keyed writes claimed at the gateway", async () => (await claimed()) >= KEYS, 20_000);
		await waitForValue("the keyed writes published to the content node", async () => tap.seen() >= KEYS, 20_000);
		await crashNode(nodes.api);
	} finally {
		signal(nodes.content, "SIGCONT");
		await tap.close();
	}
	return { keys, killedAt: Date.now() };
}

/** Retries `key` through `gw` every 200 ms until an answer that is not a 409, a 5xx or a cut connection. */
async function retry(gw: ReturnType<typeof client>, key: string, run: string, limitMs = 60_000) {
	const until = Date.now() + limitMs;
	const seen: number[] = [];
	for (;;) {
		const r = await gw("POST", "/content/notes", { token, body: { title: run, description: key }, headers: { "Idempotency-Key": key } }).catch(() => ({
			status: 0,
			body: undefined,
			headers: new Headers(),
		}));
		seen.push(r.status);
		if (r.status !== 0 && r.status < 500 && r.status !== 409) return { ...r, at: Date.now(), seen, replayed: r.headers.get("idempotent-replayed") };
		if (Date.now() > until) throw new Error(`key ${key}: answers ${seen.join(",")} for ${limitMs} ms`);
		await sleep(200);
	}
}

servers.test("the only gateway killed and restarted under its NODE_ID: each retry gets its answer within 5 s, one document per key", async () => {
	const run = `restarted-${deployment.id}`;
	const { keys } = await inFlightAtKill(run);
	await stopNode(nodes.api);
	nodes.api = startNode("api", apiEnv);
	await waitForHttp(`${apiUrl}/status`, [nodes.api], { timeoutMs: 120_000 });
	const gw = client(apiUrl);
	const started = Date.now();
	const answers = await Promise.all(keys.map((k) => retry(gw, k, run)));
	const took = Math.max(...answers.map((a) => a.at - started));
	console.log(`retries after the restart answered in ${took} ms; answers seen: ${answers.map((a) => `${a.seen.join(",")}${a.replayed ? " (replayed)" : ""}`).join(" | ")}`);
	// Each key's note, replayed: the write its first attempt committed, re-read (the decision was taken on the content node).
	for (const [i, a] of answers.entries()) expect([a.status, a.replayed, a.body?.data?.description]).toEqual([200, "true", keys[i]]);
	expect(took).toBeLessThan(ANSWER_MS);
	const docs = await notesOf(`${run}-`);
	for (const k of keys) expect([k, docs.get(k)]).toEqual([k, 1]);
});

servers.test("a gateway killed while another serves: retries through the other gateway get their answers within 5 s of the kill, one document per key", async () => {
	const run = `other-${deployment.id}`;
	const { keys, killedAt: killed } = await inFlightAtKill(run);
	const answers = await Promise.all(keys.map((k) => retry(client(api2Url), k, run)));
	const took = Math.max(...answers.map((a) => a.at - killed));
	console.log(
		`retries through the other gateway answered ${took} ms after the kill; answers seen: ${answers.map((a) => `${a.seen.join(",")}${a.replayed ? " (replayed)" : ""}`).join(" | ")}`,
	);
	// Each key's note: replayed (its first attempt committed) or, had the retry taken the key over first, written by it.
	for (const [i, a] of answers.entries()) expect([a.status, a.body?.data?.description]).toEqual([200, keys[i]]);
	expect(took).toBeLessThan(ANSWER_MS);
	const docs = await notesOf(`${run}-`);
	for (const k of keys) expect([k, docs.get(k)]).toEqual([k, 1]);
	await stopNode(nodes.api);
	nodes.api = startNode("api", apiEnv);
	await waitForHttp(`${apiUrl}/status`, [nodes.api], { timeoutMs: 120_000 });
});
