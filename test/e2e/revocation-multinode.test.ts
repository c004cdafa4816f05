/**
 * Revocation and authority changes on every node at once: two gateway nodes (A and B, SERVICES=api each) and
 * one domain node over the local NATS, with Redis as the shared cache (own REDIS_PREFIX per run). Each gateway
 * warms its local caches first, so a pass proves the change reached it, not that it had never looked.
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
let B: ReturnType<typeof client>;
let root: { client_id: string; username: string; password: string; domain: string; user_id: string };
let shared: Record<string, string>;

beforeAll(async () => {
	up = servers.up;
	if (!up) return;
	const [portA, portB] = [await freePort(), await freePort()];
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
	const gwB = startNode("gateway-b", { ...shared, SERVICES: "api", PORT: String(portB) });
	nodes = [dom, gwA, gwB];
	await Promise.all([waitForHttp(`http://127.0.0.1:${portA}/status`, nodes), waitForHttp(`http://127.0.0.1:${portB}/status`, nodes)]);
	A = client(`http://127.0.0.1:${portA}`);
	B = client(`http://127.0.0.1:${portB}`);
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

async function login(via: ReturnType<typeof client>, username = root.username, password = root.password) {
	return via("POST", "/auth/token", { body: { grant_type: "password", client_id: root.client_id, username, password } });
}

async function token(via: ReturnType<typeof client>, username?: string, password?: string): Promise<string> {
	const r = await login(via, username, password);
	if (r.status !== 200) throw new Error(`login failed: ${r.status} ${r.text}`);
	return r.body.data.access_token;
}

live("both gateways use Redis as the cache", async () => {
	for (const gw of [A, B]) {
		const s = await gw("GET", "/status");
		expect(s.status).toBe(200);
		expect(s.body.info.cache).toEqual({ status: "up" });
	}
});

live("a JWT from gateway A works on B; logout on A makes it fail with 401 on B at once", async () => {
	const jwt = await token(A);
	// Warm both gateways: verified token and session state are now cached locally on each.
	for (const gw of [A, B]) {
		expect((await gw("GET", "/auth/verify", { token: jwt })).status).toBe(200);
		expect((await gw("GET", "/content/notes", { token: jwt })).status).toBe(200);
	}
	const out = await A("GET", "/auth/logout", { token: jwt });
	expect(out.status).toBe(200);
	expect(out.body).toEqual({ result: "OK" });
	const onB = await B("GET", "/content/notes", { token: jwt });
	expect(onB.status).toBe(401);
	expect(onB.body).toMatchObject({ statusCode: 401, error: "Unauthorized" });
	expect((await B("GET", "/auth/verify", { token: jwt })).status).toBe(401);
	expect((await A("GET", "/content/notes", { token: jwt })).status).toBe(401);
	// The blacklist is in Redis under this deployment's prefix, where a gateway started later would find it.
	const raw = new Redis(REDIS);
	try {
		const keys = await raw.keys(`${deployment.redisPrefix}auth:blacklist:*`);
		expect(keys.length).toBeGreaterThanOrEqual(1);
	} finally {
		raw.disconnect();
	}
});

live("a gateway started after a logout and an APT delete rejects both: the revocations live in the shared stores", async () => {
	const jwt = await token(B);
	const apt = await A("POST", "/auth/apts", { token: jwt, body: { name: "before-c" } });
	expect(apt.status).toBe(200);
	const kept = await A("POST", "/auth/apts", { token: jwt, body: { name: "kept" } });
	expect(kept.status).toBe(200);
	expect((await A("DELETE", `/auth/apts/${apt.body.data.id}`, { token: jwt })).status).toBe(200);
	expect((await B("GET", "/auth/logout", { token: jwt })).status).toBe(200);
	// C missed every broadcast: only Redis can tell it that the session is gone.
	const portC = await freePort();
	const gwC = startNode("gateway-c", { ...shared, SERVICES: "api", PORT: String(portC) });
	nodes.push(gwC);
	await waitForHttp(`http://127.0.0.1:${portC}/status`, nodes);
	const C = client(`http://127.0.0.1:${portC}`);
	expect((await C("GET", "/content/notes", { token: jwt })).status).toBe(401);
	expect((await C("GET", "/content/notes", { token: apt.body.data.token })).status).toBe(401);
	// An APT has a session of its own: the creator's logout leaves it working.
	expect((await C("GET", "/content/notes", { token: kept.body.data.token })).status).toBe(200);
	// A fresh login works on C (it is a working gateway, not one that refuses everything).
	expect((await C("GET", "/content/notes", { token: await token(C) })).status).toBe(200);
	await stopNode(gwC);
	nodes = nodes.filter((n) => n !== gwC);
});

live("an APT created on A works on B; DELETE on B makes it fail on A at once", async () => {
	const jwt = await token(A);
	const created = await A("POST", "/auth/apts", { token: jwt, body: { name: "multi-node" } });
	expect(created.status).toBe(200);
	const apt: string = created.body.data.token;
	expect(apt).toMatch(/^APT-/);
	// Warm both gateways' APT caches.
	for (const gw of [B, A]) {
		const v = await gw("GET", "/auth/verify", { token: apt });
		expect(v.status).toBe(200);
		expect(v.body.data).toMatchObject({ type: "access", cid: root.client_id, uid: root.user_id });
		expect((await gw("GET", "/content/notes", { token: apt })).status).toBe(200);
	}
	const del = await B("DELETE", `/auth/apts/${created.body.data.id}`, { token: jwt });
	expect(del.status).toBe(200);
	const onA = await A("GET", "/content/notes", { token: apt });
	expect(onA.status).toBe(401);
	expect((await A("GET", "/auth/verify", { token: apt })).status).toBe(401);
	expect((await B("GET", "/content/notes", { token: apt })).status).toBe(401);
	// The JWT that created it is another session: unaffected.
	expect((await A("GET", "/content/notes", { token: jwt })).status).toBe(200);
});

live("a grant change takes effect through every gateway at once: 403, then 200 right after the grant, 403 right after DELETE", async () => {
	const rootJwt = await token(A);
	const username = `user-${deployment.id}`;
	const password = `pw-${deployment.id}-Secret!`;
	const user = await A("POST", "/identity/users", { token: rootJwt, body: { username, password } });
	expect(user.status).toBe(200);
	const uid: string = user.body.data.id;
	const userJwt = await token(B, username, password);

	// No grant yet: the scope (whole) passes, the grant layer refuses, through both gateways.
	for (const gw of [B, A]) {
		const r = await gw("GET", "/content/notes", { token: userJwt });
		expect(r.status).toBe(403);
	}

	const grant = await A("POST", "/auth/grants", { token: rootJwt, body: { subject: `${uid}@${root.domain}`, action: "read", object: "content:notes" } });
	expect(grant.status).toBe(200);
	const onB = await B("GET", "/content/notes", { token: userJwt });
	expect(onB.status).toBe(200);
	expect(onB.body).toEqual({ items: [], total: 0 });
	expect((await A("GET", "/content/notes", { token: userJwt })).status).toBe(200);
	// Read only: writing is still refused.
	expect((await B("POST", "/content/notes", { token: userJwt, body: { title: "x" } })).status).toBe(403);

	const del = await B("DELETE", `/auth/grants/${grant.body.data.id}`, { token: rootJwt });
	expect(del.status).toBe(200);
	expect((await A("GET", "/content/notes", { token: userJwt })).status).toBe(403);
	expect((await B("GET", "/content/notes", { token: userJwt })).status).toBe(403);

	// And back: a restore is a change too.
	const restored = await A("PUT", `/auth/grants/${grant.body.data.id}/restore`, { token: rootJwt });
	expect(restored.status).toBe(200);
	expect((await B("GET", "/content/notes", { token: userJwt })).status).toBe(200);
});

// Last: it blocks the root user's logins from 127.0.0.1 for this deployment (its own Redis prefix) for 15 minutes.
live("failed logins are counted across gateways: failures on A and B add up to 429 on B", async () => {
	const wrong = (gw: ReturnType<typeof client>) => login(gw, root.username, "not-the-password");
	for (let i = 0; i < 6; i++) expect((await wrong(A)).status).toBe(401);
	for (let i = 0; i < 4; i++) expect((await wrong(B)).status).toBe(401);
	const raw = new Redis(REDIS);
	try {
		expect(await raw.get(`${deployment.redisPrefix}auth:fail:acct:${root.client_id}:user.${root.user_id}:127.0.0.1`)).toBe("10");
	} finally {
		raw.disconnect();
	}
	// The eleventh attempt, even with the right password, is refused on either gateway.
	const limited = await login(B);
	expect(limited.status).toBe(429);
	expect(limited.body).toEqual({ statusCode: 429, message: "too many failed login attempts for this account from this IP", error: "Too Many Requests" });
	expect((await login(A)).status).toBe(429);
});
