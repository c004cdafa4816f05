/**
 * Scale-out, the smallest case: an api node (SERVICES=api) and a domain node (every domain service) as two
 * processes over the local NATS, each with its own DATA_DIR and the embedded caches. A create/list/cursor round
 * trip goes through the gateway to the domain node; the domain node answers /status and /metrics on its ops
 * ports. Skips with a message when NATS is down (fails under REQUIRE_SERVERS=1).
 */
// jest-solo: a cluster of node processes of its own, stopped, killed or cut off on a schedule (test/run.mjs)
import { existsSync, readFileSync, statSync } from "fs";
import path from "path";
import { DOMAINS } from "../../catalog";
import { parseSse, needServers } from "../helpers/platform";
import { ALL_DOMAINS, client, startNode, stopNode, testDeployment, waitForHttp, type ChildNode } from "../helpers/nodes";
import { freeOpsOffset, freePort } from "../helpers/ports";
import { embeddedPgRuns, nodeStoredText } from "../helpers/node-store";

/** The servers these tests need: decided when the file loads, so jest reports the tests as skipped without them. */
const servers = needServers(["NATS", 4222]);

jest.setTimeout(90_000);

const NATS = "nats://127.0.0.1:4222";
let up = false;
let api: ChildNode | undefined;
let dom: ChildNode | undefined;
let gateway: string;
let offset: number;
let http: ReturnType<typeof client>;
let root: { client_id: string; username: string; password: string; domain: string; user_id: string };
let token: string;

beforeAll(async () => {
	up = servers.up;
	if (!up) return;
	const d = testDeployment();
	const port = await freePort();
	offset = await freeOpsOffset();
	const shared = { TRANSPORTER: NATS, NAMESPACE: d.namespace, JWT_SECRET: d.jwtSecret, AES_SECRET: d.aesSecret, OPS_PORT_OFFSET: String(offset) };
	api = startNode("api", { ...shared, SERVICES: "api", PORT: String(port) });
	dom = startNode("domain", { ...shared, SERVICES: ALL_DOMAINS });
	gateway = `http://127.0.0.1:${port}`;
	http = client(gateway);
	// Ready: the gateway sees every domain service of the other node up.
	await waitForHttp(`${gateway}/status`, [api, dom]);
	root = JSON.parse(readFileSync(path.join(dom.dataDir, "bootstrap.json"), "utf8"));
});

afterAll(async () => {
	await Promise.all([stopNode(api), stopNode(dom)]);
});

const live = (name: string, fn: () => Promise<void>) =>
	servers.test(name, async () => {
		await fn();
	});

live("the gateway's /status reports every domain service of the domain node up", async () => {
	const s = await http("GET", "/status");
	expect(s.status).toBe(200);
	expect(s.body.status).toBe("ok");
	for (const d of DOMAINS) expect(s.body.info[`service:${d.name}`]).toEqual({ status: "up" });
	expect(s.body.info["document store"]).toEqual({ status: "up", kind: "postgres" });
	expect(s.body.info.cache).toEqual({ status: "up" });
});

live("root credentials were seeded on the domain node only (bootstrap.json, mode 0600)", async () => {
	const file = path.join(dom!.dataDir, "bootstrap.json");
	expect(statSync(file).mode & 0o777).toBe(0o600);
	expect(root.client_id).toMatch(/^[0-9a-f]{24}$/);
	expect(existsSync(path.join(api!.dataDir, "bootstrap.json"))).toBe(false);
	const login = await http("POST", "/auth/token", { body: { grant_type: "password", client_id: root.client_id, username: root.username, password: root.password } });
	expect(login.status).toBe(200);
	expect(login.body.data.access_token).toMatch(/^eyJ/);
	token = login.body.data.access_token;
});

live("create, list, get and cursor round trip through the gateway; the documents live on the domain node", async () => {
	const created = [];
	for (const title of ["one", "two", "three"]) {
		const c = await http("POST", "/content/notes", { token, body: { title, content: `note ${title}` } });
		expect(c.status).toBe(200);
		expect(c.body.data).toMatchObject({ title, version: "1.0.0", deleted_at: null });
		created.push(c.body.data);
	}
	const list = await http("GET", "/content/notes", { token });
	expect(list.status).toBe(200);
	expect(list.body).toEqual({ items: created, total: 3 });

	const one = await http("GET", `/content/notes/${created[1].id}`, { token });
	expect(one.body).toEqual({ data: created[1] });

	const s = await http("GET", "/content/notes/cursor", { token, headers: { accept: "text/event-stream" } });
	expect(s.status).toBe(200);
	expect(s.headers.get("content-type")).toMatch(/^text\/event-stream/);
	// Each frame's data is the document (its keys in the store's order, which need not be the create's).
	const frames = parseSse(s.text).map((f) => (f.event ? f : { ...f, data: JSON.parse(f.data) }));
	expect(frames).toEqual([...created.map((d) => ({ id: d.id, data: d })), { event: "end", data: "close" }]);

	const q = encodeURIComponent(JSON.stringify({ limit: 2 }));
	const limited = parseSse((await http("GET", `/content/notes/cursor?pagination=${q}`, { token })).text);
	expect(limited.map((f) => f.id ?? f.event)).toEqual([created[0].id, created[1].id, "end"]);

	// The documents are in the domain node's store (its embedded PostgreSQL); the gateway node holds no collection
	// data: none of them in the PostgreSQL it runs for its own records (Idempotency-Key answers, live cursors' positions).
	const stored = await nodeStoredText(dom!, "content/notes");
	for (const d of created) expect(stored).toContain(d.id);
	expect(existsSync(path.join(api!.dataDir, "content"))).toBe(false);
	const onGateway = embeddedPgRuns(api!) ? await nodeStoredText(api!, "content/notes") : "";
	for (const d of created) expect(onGateway).not.toContain(d.id);
});

live("an error from the remote domain node keeps the spec's shape", async () => {
	const r = await http("GET", "/content/notes/0123456789abcdef01234567", { token });
	expect(r.status).toBe(404);
	expect(r.body).toEqual({ statusCode: 404, message: expect.any(String), error: "Not Found" });
	const bad = await http("POST", "/content/notes", { token, body: { content: "no title" } });
	expect(bad.status).toBe(400);
	expect(bad.body.message).toMatch(/title/);
});

live("the domain node answers /status and /metrics on each domain's spec port (+ OPS_PORT_OFFSET)", async () => {
	for (const name of ["auth", "content", "thing"]) {
		const port = DOMAINS.find((d) => d.name === name)!.restPort + offset;
		const s = await fetch(`http://127.0.0.1:${port}/status`);
		expect([name, s.status]).toEqual([name, 200]);
		expect(await s.json()).toEqual({
			status: "ok",
			info: { "document store": { status: "up", kind: "postgres" }, "event stream": { status: "up" }, cache: { status: "up" } },
		});
	}
	const m = await fetch(`http://127.0.0.1:${DOMAINS.find((d) => d.name === "content")!.restPort + offset}/metrics`);
	expect(m.status).toBe(200);
	const text = await m.text();
	// The domain node's own registry: the creates the gateway called remotely ran here.
	const creates = /^moleculer_request_total\{[^}]*action="content\.notes\.create"[^}]*\} (\d+)$/m.exec(text);
	expect(Number(creates?.[1])).toBeGreaterThanOrEqual(3);
	// The gateway keeps its own: HTTP requests per route.
	const gw = await http("GET", "/metrics");
	expect(gw.text).toMatch(/^gateway_http_requests_total\{[^}]*route="\/content\/notes"[^}]*\} \d+/m);
});
