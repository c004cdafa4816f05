/**
 * A clean stop under write load (EVENT_STREAM=nats, one node with every service and worker): SIGTERM while notes are
 * being created must end every consumer group before the services its handlers call. Moleculer stops services in
 * parallel; before platform.ts stopped the consumers first, a handler in progress met a stopped service or store
 * (`group observer failed … reading 'indexes'`, `group publisher failed … publisher is stopping`).
 */
import { readFileSync } from "fs";
import path from "path";
import { needServers } from "../helpers/platform";
import { client, dropNatsStreams, startNode, stopNode, testDeployment, waitForHttp, type ChildNode } from "../helpers/nodes";
import { freePort } from "../helpers/ports";
import { sleep } from "../helpers/wait";

const servers = needServers(["NATS", 4222]);
jest.setTimeout(180_000);

const d = testDeployment();
let node: ChildNode | undefined;

afterAll(async () => {
	await stopNode(node);
	if (servers.up) await dropNatsStreams(d.namespace);
});

servers.test("SIGTERM during a burst of creates: exit 0, no consumer group fails on the way down", async () => {
	const port = await freePort();
	node = startNode("whole", {
		TRANSPORTER: "nats://127.0.0.1:4222",
		EVENT_STREAM: "nats",
		NAMESPACE: d.namespace,
		JWT_SECRET: d.jwtSecret,
		AES_SECRET: d.aesSecret,
		SERVICE_PORTS: "0",
		PORT: String(port),
		LOG_LEVEL: "info",
	});
	const base = `http://127.0.0.1:${port}`;
	await waitForHttp(`${base}/status`, [node], { timeoutMs: 120_000 });
	const http = client(base);
	const root = JSON.parse(readFileSync(path.join(node.dataDir, "bootstrap.json"), "utf8"));
	const login = await http("POST", "/auth/token", { body: { grant_type: "password", client_id: root.client_id, username: root.username, password: root.password } });
	expect(login.status).toBe(200);
	const token = login.body.data.access_token as string;

	// Creates still arriving when the signal comes: the workers hold events in progress while the node stops.
	let stopping = false;
	let created = 0;
	const writer = async () => {
		while (!stopping) {
			const r = await http("POST", "/content/notes", { token, body: { title: "n" } }).catch(() => null);
			// Refused once the gateway has closed: no busy loop until the node is gone.
			if (r?.status === 200) created++;
			else await sleep(100);
		}
	};
	const load = Promise.all(Array.from({ length: 8 }, writer));
	await sleep(1500);
	const out = node;
	const code = out.exited;
	await stopNode(out, 30_000);
	stopping = true;
	await load;
	expect(created).toBeGreaterThan(20);
	const log = out.output();
	expect(log.split("\n").filter((l) => /group \S+ failed|Unable to stop/.test(l))).toEqual([]);
	expect(log).toContain("stop: event consumers stopped");
	expect(log).toContain("stop: cache closed");
	// Within the grace period: not SIGKILLed.
	expect(await code).toBe(0);
});
