/**
 * Sagas across processes:
 * - over NATS, essential (and the gateway) on one node and content on another: a staged write applied on the
 *   content node records its stage on the essential node, and abort undoes it there (skipped with a message when
 *   NATS is not answering, failing under REQUIRE_SERVERS=1);
 * - the platform killed (SIGKILL) with a saga in flight and started again after its expiry compensates it at start.
 */
// jest-solo: a cluster of node processes of its own, stopped, killed or cut off on a schedule (test/run.mjs)
import { mkdtempSync, readFileSync, rmSync } from "fs";
import os from "os";
import path from "path";
import { DOMAINS } from "../../catalog";
import { dataDirHoldingOutbox, needServers } from "../helpers/platform";
import { client, crashNode, startNode, stopNode, testDeployment, waitForHttp, type ChildNode } from "../helpers/nodes";
import { freeOpsOffset, freePort } from "../helpers/ports";
import { holdNodeOutbox, nodeOutboxRecords } from "../helpers/node-store";
import { pgTemplate, seedEmbeddedPg } from "../helpers/pg-template";
import { WORKER_PORTS } from "../../workers";

/** NATS, for the blocks that need it: decided when the file loads, so jest reports their tests as skipped without it. */
const servers = needServers(["NATS", 4222]);

jest.setTimeout(150_000);

const NATS = "nats://127.0.0.1:4222";
const H = (saga: string) => ({ "x-saga-session": saga });

async function login(http: ReturnType<typeof client>, dataDir: string): Promise<string> {
	const root = JSON.parse(readFileSync(path.join(dataDir, "bootstrap.json"), "utf8"));
	const r = await http("POST", "/auth/token", { body: { grant_type: "password", client_id: root.client_id, username: root.username, password: root.password } });
	expect(r.status).toBe(200);
	return r.body.data.access_token;
}

async function until<T>(what: string, fn: () => Promise<T | null | undefined | false>, ms: number): Promise<T> {
	const end = Date.now() + ms;
	for (;;) {
		const v = await fn().catch(() => null);
		if (v) return v;
		if (Date.now() > end) throw new Error(`${what}: not within ${ms} ms`);
		await new Promise((r) => setTimeout(r, 200));
	}
}

servers.describe("a saga across two processes over NATS", () => {
	let up = false;
	let a: ChildNode | undefined;
	let b: ChildNode | undefined;
	let http: ReturnType<typeof client>;

	beforeAll(async () => {
		up = servers.up;
		if (!up) return;
		const d = testDeployment();
		const port = await freePort();
		const offset = await freeOpsOffset();
		const shared = { TRANSPORTER: NATS, NAMESPACE: d.namespace, JWT_SECRET: d.jwtSecret, AES_SECRET: d.aesSecret, OPS_PORT_OFFSET: String(offset) };
		const onA = ["api", ...DOMAINS.map((x) => x.name).filter((n) => n !== "content"), ...Object.keys(WORKER_PORTS)];
		a = startNode("essential", { ...shared, SERVICES: onA.join(","), PORT: String(port) });
		b = startNode("content", { ...shared, SERVICES: "content" });
		http = client(`http://127.0.0.1:${port}`);
		await waitForHttp(`http://127.0.0.1:${port}/status`, [a, b]);
	});
	afterAll(async () => {
		await Promise.all([stopNode(a), stopNode(b)]);
	});

	test("staged writes on the content node are recorded on the essential node and undone by abort", async () => {
		const token = await login(http, a!.dataDir);
		// The content node answers once it sees the auth node (its grant index comes from there): 503 until then.
		const pre = await until(
			"the content node ready",
			async () => {
				const r = await http("POST", "/content/notes", { token, body: { title: "remote-pre", content: "before" } });
				return r.status === 200 ? r : null;
			},
			30_000,
		);
		const s = await http("POST", "/essential/sagas/start", { token, body: { ttl: 60 } });
		expect(s.status).toBe(200);
		const saga = s.body.data.id;
		const created = await http("POST", "/content/notes", { token, headers: H(saga), body: { title: "remote-created" } });
		expect(created.status).toBe(200);
		expect(created.headers.get("x-saga-session")).toBe(saga);
		const patched = await http("PATCH", `/content/notes/${pre.body.data.id}`, { token, headers: H(saga), body: { content: "during" } });
		expect(patched.status).toBe(200);
		const stages = await http("GET", `/essential/saga-stages?query=${encodeURIComponent(JSON.stringify({ saga }))}`, { token });
		expect(stages.body.total).toBe(2);
		expect(stages.body.items.every((st: any) => st.bucket === "content/notes" && st.state === "done")).toBe(true);
		const ab = await http("GET", `/essential/sagas/${saga}/abort`, { token });
		expect(ab.status).toBe(200);
		expect(ab.body.data.state).toBe("ABORTED");
		expect((await http("GET", `/content/notes/${created.body.data.id}`, { token })).status).toBe(404);
		expect((await http("GET", `/content/notes/${pre.body.data.id}`, { token })).body.data).toEqual(pre.body.data);
		// The committed / aborted check runs on the essential node for a write on the content node.
		const late = await http("POST", "/content/notes", { token, headers: H(saga), body: { title: "too late" } });
		expect(late.body).toEqual({ statusCode: 409, message: `saga ${saga} is not in flight`, error: "Conflict" });
	});
});

describe("a saga in flight when the platform is killed", () => {
	let node: ChildNode | undefined;
	const dataDir = mkdtempSync(path.join(os.tmpdir(), "saga-crash-"));
	afterAll(async () => {
		await stopNode(node);
		rmSync(dataDir, { recursive: true, force: true });
	});

	test("is compensated at the next start, after its expiry", async () => {
		const d = testDeployment();
		const port = await freePort();
		const offset = await freeOpsOffset();
		// Without the workers that need the embedded PostgreSQL (logger, dispatcher): not what this test is about.
		const services = ["api", ...DOMAINS.map((x) => x.name), ...Object.keys(WORKER_PORTS).filter((w) => w !== "logger" && w !== "dispatcher")];
		const env = { DATA_DIR: dataDir, PORT: String(port), OPS_PORT_OFFSET: String(offset), JWT_SECRET: d.jwtSecret, AES_SECRET: d.aesSecret, SERVICES: services.join(",") };
		node = startNode("crash", env);
		const http = client(`http://127.0.0.1:${port}`);
		await waitForHttp(`http://127.0.0.1:${port}/status`, [node]);
		const token = await login(http, dataDir);
		const pre = await http("POST", "/content/notes", { token, body: { title: "crash-pre" } });
		const s = await http("POST", "/essential/sagas/start", { token, body: { ttl: 5 } });
		const saga = s.body.data.id;
		const created = await http("POST", "/content/notes", { token, headers: H(saga), body: { title: "crash-created" } });
		expect(created.status).toBe(200);
		const removed = await http("DELETE", `/content/notes/${pre.body.data.id}`, { token, headers: H(saga) });
		expect(removed.status).toBe(200);
		await crashNode(node);
		await stopNode(node); // the data stays in dataDir (given by this test)
		// Down past the saga's expiry.
		await new Promise((r) => setTimeout(r, Math.max(0, Date.parse(s.body.data.expires_at) - Date.now() + 1000)));
		node = startNode("crash-again", env);
		await waitForHttp(`http://127.0.0.1:${port}/status`, [node]);
		const startedAt = Date.now();
		const token2 = await login(http, dataDir);
		const done = await until(
			"ABORTED after restart",
			async () => {
				const r = await http("GET", `/essential/sagas/${saga}`, { token: token2 });
				return r.body?.data?.state === "ABORTED" ? r.body.data : null;
			},
			15_000,
		);
		expect(done.abort_reason).toBe("expiry");
		expect(Date.now() - startedAt).toBeLessThan(15_000);
		expect((await http("GET", `/content/notes/${created.body.data.id}`, { token: token2 })).status).toBe(404);
		expect((await http("GET", `/content/notes/${pre.body.data.id}`, { token: token2 })).body.data).toEqual(pre.body.data);
	});
});

/** The change events a node's own outbox holds, in order (its embedded PostgreSQL's). */
async function outboxEvents(node: ChildNode): Promise<Array<{ id: string; op: string; topic: string; after?: any }>> {
	return (await nodeOutboxRecords(node)).map((r) => r.event as any);
}

/** The watchers' SAGA_SCAN_MS in "two watcher processes over NATS". */
const SCAN_MS = 500;

servers.describe("two watcher processes over NATS", () => {
	let up = false;
	const nodes: ChildNode[] = [];
	let http: ReturnType<typeof client>;
	let main: ChildNode;

	beforeAll(async () => {
		up = servers.up;
		if (!up) return;
		const d = testDeployment();
		const port = await freePort();
		// The watchers scan for expired sagas every 500 ms instead of 2 s (SAGA_SCAN_MS, docs/sagas.md): the expiry is
		// noticed sooner, and the rounds both watchers run after the compensation come 4 times as often.
		const shared = { TRANSPORTER: NATS, NAMESPACE: d.namespace, JWT_SECRET: d.jwtSecret, AES_SECRET: d.aesSecret, SAGA_SCAN_MS: String(SCAN_MS) };
		const workers = Object.keys(WORKER_PORTS).filter((w) => w !== "watcher");
		// The outbox keeps every event: the test reads the main node's outbox (held from its PostgreSQL's start, before
		// the test's writes).
		const dataDir = dataDirHoldingOutbox();
		if (await pgTemplate()) seedEmbeddedPg(dataDir, undefined);
		main = startNode("main", {
			...shared,
			DATA_DIR: dataDir,
			SERVICES: ["api", ...DOMAINS.map((x) => x.name), ...workers].join(","),
			PORT: String(port),
			OPS_PORT_OFFSET: String(await freeOpsOffset()),
		});
		nodes.push(main);
		for (const n of ["watcher-1", "watcher-2"]) nodes.push(startNode(n, { ...shared, SERVICES: "watcher", OPS_PORT_OFFSET: String(await freeOpsOffset()) }));
		http = client(`http://127.0.0.1:${port}`);
		await waitForHttp(`http://127.0.0.1:${port}/status`, nodes);
		await holdNodeOutbox(main);
	});
	afterAll(async () => {
		await Promise.all(nodes.map((n) => stopNode(n)));
		if (main) rmSync(main.dataDir, { recursive: true, force: true });
	});

	test("each expired saga is compensated once: one undo event per document, one ABORTED change per saga", async () => {
		const token = await login(http, main.dataDir);
		const sagas: string[] = [];
		const created: string[] = [];
		const pre: string[] = [];
		for (let i = 0; i < 5; i++) {
			const s = (await http("POST", "/essential/sagas/start", { token, body: { ttl: 5 } })).body.data.id;
			sagas.push(s);
			const n = await http("POST", "/content/notes", { token, body: { title: `pre ${i}` } });
			pre.push(n.body.data.id);
			created.push((await http("POST", "/content/notes", { token, headers: H(s), body: { title: `staged ${i}` } })).body.data.id);
			expect((await http("PATCH", `/content/notes/${n.body.data.id}`, { token, headers: H(s), body: { content: "staged" } })).status).toBe(200);
		}
		await until(
			"all compensated",
			async () => {
				const r = await http("GET", `/essential/sagas?query=${encodeURIComponent(JSON.stringify({ id: { $in: sagas }, state: "ABORTED" }))}`, { token });
				return r.body.total === sagas.length;
			},
			25_000,
		);
		// Both watchers keep scanning: a few more rounds (at least as many as 4.5 s at the default 2 s), then count.
		await new Promise((r) => setTimeout(r, 3 * SCAN_MS));
		const events = await outboxEvents(main);
		for (const id of created) expect(events.filter((e) => e.id === id).map((e) => e.op)).toEqual(["c", "d"]);
		for (const id of pre) expect(events.filter((e) => e.id === id).map((e) => e.op)).toEqual(["c", "u", "u"]);
		for (const s of sagas) expect(events.filter((e) => e.id === s && e.after?.state === "ABORTED")).toHaveLength(1);
		for (const id of pre) expect((await http("GET", `/content/notes/${id}`, { token })).body.data.content).toBeUndefined();
	});
});
