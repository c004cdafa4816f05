/**
 * One composition root (platform.ts nodeOptions): `npm start` (start.ts) and `npm run runner` (moleculer-runner with
 * moleculer.config.ts) build the same node. Each is started here as a real process with the production event stream
 * (EVENT_STREAM=nats) on a PostgreSQL database of its own: a create reaches the tenant's webhook (the relay that feeds
 * the stream from the outbox is part of the node either way), and the embedded cache keeps its login failure counters
 * in DATA_DIR/cache.json. Skips with a message when NATS or PostgreSQL does not answer (fails under REQUIRE_SERVERS=1).
 */
import { existsSync, readFileSync } from "fs";
import path from "path";
import { needServers } from "../helpers/platform";
import { client, dropNatsStreams, startNode, stopNode, testDeployment, waitForHttp, type ChildNode, type Entry } from "../helpers/nodes";
import { freePort } from "../helpers/ports";
import { testDatabase } from "../helpers/pg";
import { eventually } from "../helpers/wait";
import { webhookReceiver, type WebhookReceiver } from "../helpers/webhook-receiver";

const servers = needServers(["NATS", 4222], ["PostgreSQL", 5432]);

let receiver: WebhookReceiver | undefined;
beforeAll(async () => {
	if (servers.up) receiver = await webhookReceiver();
});
afterAll(() => receiver?.close());

const ENTRIES: Entry[] = ["start", "runner"];

servers.test.each(ENTRIES)(
	"a node started by %s delivers a create's change event to the webhook over EVENT_STREAM=nats and persists the cache",
	async (entry) => {
		const d = testDeployment();
		const db = await testDatabase();
		if (!db) throw new Error("PostgreSQL answered but no test database could be made");
		let node: ChildNode | undefined;
		try {
			const port = await freePort();
			node = startNode(
				entry,
				{
					PORT: String(port),
					EVENT_STREAM: "nats",
					STREAM_URL: "nats://127.0.0.1:4222",
					NAMESPACE: d.namespace,
					DATABASE_URL: db.url,
					JWT_SECRET: d.jwtSecret,
					AES_SECRET: d.aesSecret,
					WEBHOOK_ALLOW_PRIVATE: "1",
				},
				undefined,
				entry,
			);
			const url = `http://127.0.0.1:${port}`;
			await waitForHttp(`${url}/status`, [node], { timeoutMs: 120_000 });
			const gw = client(url);
			const root = JSON.parse(readFileSync(path.join(node.dataDir, "bootstrap.json"), "utf8"));

			// A failed login is counted in the embedded cache, which keeps its counters in DATA_DIR/cache.json.
			const wrong = await gw("POST", "/auth/token", { body: { grant_type: "password", client_id: root.client_id, username: root.username, password: "not-the-password" } });
			expect(wrong.status).toBe(401);
			const cacheFile = path.join(node.dataDir, "cache.json");
			const saved = await eventually(
				async () => (existsSync(cacheFile) ? Object.keys(JSON.parse(readFileSync(cacheFile, "utf8"))) : []),
				(keys) => keys.some((k) => k.startsWith("auth:fail:")),
				5000,
			);
			expect(saved.some((k) => k.startsWith("auth:fail:"))).toBe(true);

			const login = await gw("POST", "/auth/token", { body: { grant_type: "password", client_id: root.client_id, username: root.username, password: root.password } });
			expect(login.status).toBe(200);
			const token = login.body.data.access_token as string;
			const hook = receiver!.url(`/${entry}`);
			const cfg = await gw("POST", "/context/configs", { token, body: { key: "CQRS", eid: root.client_id, value: { webhook: hook } } });
			expect(cfg.status).toBe(200);
			const note = await gw("POST", "/content/notes", { token, body: { title: `made under ${entry}` } });
			expect(note.status).toBe(200);
			const events = await eventually(
				async () => receiver!.received.filter((e) => e.topic === "content.notes" && e.op === "c" && e.id === note.body.data.id),
				(es) => es.length >= 1,
				30_000,
			);
			expect(events[0].after.title).toBe(`made under ${entry}`);
		} finally {
			await stopNode(node);
			await db.drop().catch(() => undefined);
			await dropNatsStreams(d.namespace).catch(() => undefined);
		}
	},
	240_000,
);
