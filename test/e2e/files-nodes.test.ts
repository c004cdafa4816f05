/**
 * Files across nodes: the gateway (SERVICES=api) and the domains (every domain service) as two processes over NATS,
 * each with its own DATA_DIR. The upload's parts cross the transporter as Moleculer streams into the special node's
 * blob store (DATA_DIR/files of that node only), and the download's content streams back. Skips when NATS is down.
 */
// jest-solo: a cluster of node processes of its own, stopped, killed or cut off on a schedule (test/run.mjs)
import { existsSync, readFileSync } from "fs";
import path from "path";
import { createHash } from "crypto";
import { needServers } from "../helpers/platform";
import { ALL_DOMAINS, client, startNode, stopNode, testDeployment, waitForHttp, type ChildNode } from "../helpers/nodes";
import { freeOpsOffset, freePort } from "../helpers/ports";
import { streamedUpload } from "../helpers/upload";

const servers = needServers(["NATS", 4222]);

jest.setTimeout(90_000);

const NATS = "nats://127.0.0.1:4222";
const MiB = 1024 * 1024;
let up = false;
let api: ChildNode | undefined;
let dom: ChildNode | undefined;
let gateway: string;
let token: string;

beforeAll(async () => {
	up = servers.up;
	if (!up) return;
	const d = testDeployment();
	const port = await freePort();
	const offset = await freeOpsOffset();
	const shared = { TRANSPORTER: NATS, NAMESPACE: d.namespace, JWT_SECRET: d.jwtSecret, AES_SECRET: d.aesSecret, OPS_PORT_OFFSET: String(offset) };
	api = startNode("api", { ...shared, SERVICES: "api", PORT: String(port) });
	dom = startNode("domain", { ...shared, SERVICES: ALL_DOMAINS });
	gateway = `http://127.0.0.1:${port}`;
	await waitForHttp(`${gateway}/status`, [api, dom]);
	const root = JSON.parse(readFileSync(path.join(dom.dataDir, "bootstrap.json"), "utf8"));
	const r = await client(gateway)("POST", "/auth/token", { body: { grant_type: "password", client_id: root.client_id, username: root.username, password: root.password } });
	token = r.body.data.access_token;
});

afterAll(async () => {
	await Promise.all([stopNode(api), stopNode(dom)]);
});

servers.test("a 6 MiB upload through the gateway node lands in the special node's store; download and Range come back; 413 over the limit", async () => {
	const size = 6 * MiB;
	const r = await streamedUpload(`${gateway}/special/files/upload`, token, size, { fill: 0x63 });
	expect(r.status).toBe(200);
	const f = r.body.items[0];
	expect(f.size).toBe(size);
	expect(f.sha256).toBe(createHash("sha256").update(Buffer.alloc(size, 0x63)).digest("hex"));
	expect(existsSync(path.join(dom!.dataDir, "files", f.id))).toBe(true);
	expect(existsSync(path.join(api!.dataDir, "files", f.id))).toBe(false);

	const whole = await fetch(`${gateway}/special/files/${f.id}/download`, { headers: { authorization: `Bearer ${token}` } });
	expect(whole.status).toBe(200);
	expect(
		createHash("sha256")
			.update(Buffer.from(await whole.arrayBuffer()))
			.digest("hex"),
	).toBe(f.sha256);
	const part = await fetch(`${gateway}/special/files/${f.id}/download`, { headers: { authorization: `Bearer ${token}`, range: "bytes=100-104" } });
	expect([part.status, await part.text(), part.headers.get("content-range")]).toEqual([206, "ccccc", `bytes 100-104/${size}`]);

	const over = await streamedUpload(`${gateway}/special/files/upload`, token, 8 * MiB + 1);
	expect(over.body).toEqual({ statusCode: 413, message: "file is larger than 8388608 bytes", error: "Payload Too Large" });
});
