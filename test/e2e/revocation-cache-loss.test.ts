/**
 * Revocation holds when Redis loses everything (issue 9 item 3a): a domain node and gateway A over the local NATS,
 * Redis as the shared cache under this run's own REDIS_PREFIX. After a logout and an APT delete, every key of
 * that prefix is deleted (as a Redis restarted without persistence would have lost them; never FLUSHALL: the
 * Redis is shared), then gateway C starts: it has seen no broadcast and the cache holds nothing, so only the
 * durable session records can refuse the tokens.
 * Skips with a message when NATS or Redis is down (fails under REQUIRE_SERVERS=1).
 */
// jest-solo: a cluster of node processes of its own, stopped, killed or cut off on a schedule (test/run.mjs)
import { readFileSync } from "fs";
import path from "path";
import Redis from "ioredis";
import { needServers } from "../helpers/platform";
import { ALL_DOMAINS, client, dropRedisPrefix, startNode, stopNode, testDeployment, waitForHttp, type ChildNode } from "../helpers/nodes";
import { freeOpsOffset, freePort } from "../helpers/ports";

/** The servers these tests need: decided when the file loads, so jest reports the tests as skipped without them. */
const servers = needServers(["NATS", 4222], ["Redis", 6379]);

jest.setTimeout(90_000);

const NATS = "nats://127.0.0.1:4222";
const REDIS = "redis://127.0.0.1:6379";
const deployment = testDeployment();
let up = false;
let nodes: ChildNode[] = [];
let A: ReturnType<typeof client>;
let root: { client_id: string; username: string; password: string; domain: string; user_id: string };
let shared: Record<string, string>;

beforeAll(async () => {
	up = servers.up;
	if (!up) return;
	const portA = await freePort();
	shared = {
		TRANSPORTER: NATS,
		NAMESPACE: deployment.namespace,
		REDIS_URL: REDIS,
		REDIS_PREFIX: deployment.redisPrefix,
		JWT_SECRET: deployment.jwtSecret,
		AES_SECRET: deployment.aesSecret,
		OPS_PORT_OFFSET: String(await freeOpsOffset()),
	};
	const dom = startNode("domain", { ...shared, SERVICES: ALL_DOMAINS });
	const gwA = startNode("gateway-a", { ...shared, SERVICES: "api", PORT: String(portA) });
	nodes = [dom, gwA];
	await waitForHttp(`http://127.0.0.1:${portA}/status`, nodes);
	A = client(`http://127.0.0.1:${portA}`);
	root = JSON.parse(readFileSync(path.join(dom.dataDir, "bootstrap.json"), "utf8"));
});

afterAll(async () => {
	await Promise.all(nodes.map((n) => stopNode(n)));
	if (up) await dropRedisPrefix(REDIS, deployment.redisPrefix);
});

const live = (name: string, fn: () => Promise<void>) =>
	servers.test(name, async () => {
		await fn();
	});

async function keysOfPrefix(pattern: string): Promise<string[]> {
	const raw = new Redis(REDIS, { maxRetriesPerRequest: 1 });
	try {
		return await raw.keys(`${deployment.redisPrefix}${pattern}`);
	} finally {
		raw.disconnect();
	}
}

live("a logged-out JWT and a deleted APT stay refused on a gateway started after the cache lost every key", async () => {
	const login = await A("POST", "/auth/token", { body: { grant_type: "password", client_id: root.client_id, username: root.username, password: root.password } });
	expect(login.status).toBe(200);
	const { access_token: jwt, refresh_token: refresh, session } = login.body.data;
	const apt = await A("POST", "/auth/apts", { token: jwt, body: { name: "to-delete" } });
	expect(apt.status).toBe(200);
	expect((await A("GET", "/content/notes", { token: apt.body.data.token })).status).toBe(200);
	expect((await A("DELETE", `/auth/apts/${apt.body.data.id}`, { token: jwt })).status).toBe(200);
	expect((await A("GET", "/auth/logout", { token: jwt })).status).toBe(200);
	expect((await keysOfPrefix("auth:blacklist:*")).length).toBeGreaterThanOrEqual(2);

	// Redis "restarted empty": only this deployment's keys go.
	await dropRedisPrefix(REDIS, deployment.redisPrefix);
	expect(await keysOfPrefix("*")).toEqual([]);

	const portC = await freePort();
	const gwC = startNode("gateway-c", { ...shared, SERVICES: "api", PORT: String(portC) });
	nodes.push(gwC);
	await waitForHttp(`http://127.0.0.1:${portC}/status`, nodes);
	const C = client(`http://127.0.0.1:${portC}`);

	const r = await C("GET", "/content/notes", { token: jwt });
	expect(r.status).toBe(401);
	expect(r.body).toEqual({ statusCode: 401, message: "session is revoked", error: "Unauthorized" });
	const a = await C("GET", "/content/notes", { token: apt.body.data.token });
	expect(a.status).toBe(401);
	expect(a.body).toMatchObject({ statusCode: 401, error: "Unauthorized" });
	const ref = await C("POST", "/auth/token", { body: { grant_type: "refresh_token", client_id: root.client_id, refresh_token: refresh } });
	expect(ref.status).toBe(401);
	expect(ref.body).toEqual({ statusCode: 401, message: "session is revoked", error: "Unauthorized" });
	// The durable answer was put back into the cache for the other nodes.
	expect(await keysOfPrefix(`auth:blacklist:${session}`)).toHaveLength(1);
	// A fresh login works on C (a working gateway, not one that refuses everything).
	const fresh = await C("POST", "/auth/token", { body: { grant_type: "password", client_id: root.client_id, username: root.username, password: root.password } });
	expect(fresh.status).toBe(200);
	expect((await C("GET", "/content/notes", { token: fresh.body.data.access_token })).status).toBe(200);
	await stopNode(gwC);
	nodes = nodes.filter((n) => n !== gwC);
});
