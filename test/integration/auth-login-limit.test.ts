/**
 * The failed-login limit (spec: Errors 429, Limits; CONTRACTS.md: 10 failures from one IP within 15 minutes), through
 * HTTP on two gateways: node A runs every service and a gateway, node B only a gateway; they talk over an in-process
 * transporter and share the platform cache, as gateways share Redis in production.
 */
import { randomBytes } from "crypto";
import { rmSync } from "fs";
import { bootPlatform, siblingDataDir, type TestPlatform } from "../helpers/platform";
import { withStatusProbe } from "../helpers/status-probe";
import { errorBody, kvOf, LeakWatch, ttlOf } from "../helpers/auth";
import { startPlatform, type Platform } from "../../platform";

const LIMITED = errorBody(429, "too many failed login attempts from this IP");
const INVALID = errorBody(401, "username or password is invalid");
const COUNTER = "auth:fail:127.0.0.1";

let a: TestPlatform;
let gwB: Platform;
let w: LeakWatch;
let wb: LeakWatch;
let dirB = "";

const login = (extra: Record<string, unknown> = {}) => ({ grant_type: "password", client_id: a.root.client_id, username: a.root.username, password: a.root.password, ...extra });
const clientCredential = (extra: Record<string, unknown> = {}) => ({ grant_type: "client_credential", client_id: a.root.client_id, client_secret: a.root.client_secret, ...extra });

beforeAll(async () => {
	const id = randomBytes(4).toString("hex");
	a = await bootPlatform({ transporter: "Fake", namespace: `auth-limit-${id}`, nodeId: `a-${id}` });
	dirB = siblingDataDir(a.dataDir);
	gwB = await startPlatform({ ...a.cfg, dataDir: dirB, services: ["api"], nodeId: `b-${id}`, port: 0 });
	await gwB.broker.waitForServices(["auth", "identity", "domain"], 10_000);
	w = new LeakWatch(a);
	wb = new LeakWatch(a);
	for (const x of [w, wb]) {
		x.secret(a.root.password, "root password", true);
		x.secret(a.root.client_secret, "root client secret");
	}
});
afterAll(async () => {
	await gwB?.stop();
	await a?.cleanup();
	if (dirB) rmSync(dirB, { recursive: true, force: true });
});
beforeEach(() => kvOf(a).del(COUNTER));
withStatusProbe(() => a.url);

/** A request through gateway B: the platform's http helper reads its `url` at call time. */
async function onB(method: string, path: string, opts: Parameters<TestPlatform["http"]>[2] = {}) {
	const saved = a.url;
	a.url = gwB.url!;
	try {
		return await wb.http(method, path, opts);
	} finally {
		a.url = saved;
	}
}

test("both gateways serve the platform", async () => {
	expect(gwB.url).not.toBe(a.url);
	expect((await w.http("POST", "/auth/token", { body: login() })).status).toBe(200);
	expect((await onB("POST", "/auth/token", { body: login() })).status).toBe(200);
});

test("10 failures from one IP → the 11th attempt, even with the right password, gets 429 on every gateway", async () => {
	const failures = [
		...Array.from({ length: 6 }, () => login({ password: "wrong-password" })),
		login({ username: "nobody" }),
		login({ client_id: "0123456789abcdef01234567" }),
		clientCredential({ client_secret: "wrong-secret" }),
		clientCredential({ client_secret: "another-wrong-secret" }),
	];
	for (const body of failures) {
		const r = await w.http("POST", "/auth/token", { body });
		expect(r.status).toBe(401);
		expect(r.body).toEqual(INVALID);
	}
	// The counter lives in the shared cache, with the 15-minute window.
	expect(await kvOf(a).get(COUNTER)).toBe("10");
	const ttl = await ttlOf(kvOf(a), COUNTER);
	expect(ttl).not.toBeNull();
	expect(ttl!).toBeGreaterThan(14 * 60_000);
	expect(ttl!).toBeLessThanOrEqual(15 * 60_000);

	for (const r of [
		await w.http("POST", "/auth/token", { body: login() }),
		await onB("POST", "/auth/token", { body: login() }),
		await w.http("POST", "/auth/token", { body: clientCredential() }),
		await onB("POST", "/auth/token", { body: login({ response_type: "code" }) }),
		await w.http("POST", "/auth/token", { body: { grant_type: "authorization_code", client_id: a.root.client_id, code: "any-code-at-all-aaaaaaaaaaaaaaaaaaaa" } }),
	]) {
		expect(r.status).toBe(429);
		expect(r.body).toEqual(LIMITED);
	}
});

test("failures through different gateways add up", async () => {
	for (let i = 0; i < 10; i++) {
		const r = i % 2 ? await onB("POST", "/auth/token", { body: login({ password: `wrong-${i}` }) }) : await w.http("POST", "/auth/token", { body: login({ password: `wrong-${i}` }) });
		expect(r.status).toBe(401);
	}
	expect(await kvOf(a).get(COUNTER)).toBe("10");
	expect((await w.http("POST", "/auth/token", { body: login() })).body).toEqual(LIMITED);
	expect((await onB("POST", "/auth/token", { body: login() })).body).toEqual(LIMITED);
});

test("9 failures still let the right password in; the block ends with the counter's window", async () => {
	for (let i = 0; i < 9; i++) expect((await onB("POST", "/auth/token", { body: login({ password: "wrong" }) })).status).toBe(401);
	expect((await w.http("POST", "/auth/token", { body: login() })).status).toBe(200);
	expect((await w.http("POST", "/auth/token", { body: login({ password: "wrong" }) })).status).toBe(401);
	expect((await onB("POST", "/auth/token", { body: login() })).body).toEqual(LIMITED);
	// The window passing is the cache entry expiring: the next login works on both gateways.
	await kvOf(a).del(COUNTER);
	expect((await w.http("POST", "/auth/token", { body: login() })).status).toBe(200);
	expect((await onB("POST", "/auth/token", { body: login() })).status).toBe(200);
});

test("a counter another gateway left in the shared cache blocks this one", async () => {
	await kvOf(a).set(COUNTER, "10", 60_000);
	expect((await onB("POST", "/auth/token", { body: login() })).body).toEqual(LIMITED);
	expect((await w.http("POST", "/auth/token", { body: login() })).body).toEqual(LIMITED);
});

test("malformed token requests (400) are not failed logins", async () => {
	for (let i = 0; i < 12; i++) expect((await w.http("POST", "/auth/token", { body: { grant_type: "password", client_id: a.root.client_id, username: "root" } })).status).toBe(400);
	expect(await kvOf(a).get(COUNTER)).toBeNull();
	expect((await w.http("POST", "/auth/token", { body: login() })).status).toBe(200);
});

test("no response of this suite contained a password, a client secret or a password hash", () => {
	expect(w.leaks()).toEqual([]);
	expect(wb.leaks()).toEqual([]);
});
