/**
 * The failed-login limit (docs/security.md "Failed logins": 10 failures of one account from one IP within 15 minutes;
 * 100 of a client from one IP, test/integration/auth-login-blocks.test.ts), through HTTP on two gateways: node A runs
 * every service and a gateway, node B only a gateway; they talk over an in-process transporter and share the platform
 * cache, as gateways share Redis in production.
 */
import { randomBytes } from "crypto";
import { bootPlatform, type TestPlatform } from "../helpers/platform";
import { withStatusProbe } from "../helpers/status-probe";
import { clearLoginFailures, errorBody, kvOf, LeakWatch, rootAccountCounter, ttlOf } from "../helpers/auth";
import { secondGateway, type SecondGateway } from "../helpers/gateways";

const LIMITED = errorBody(429, "too many failed login attempts for this account from this IP");
const INVALID = errorBody(401, "username or password is invalid");

let a: TestPlatform;
let gwB: SecondGateway;
let w: LeakWatch;
let wb: LeakWatch;
/** A request through gateway B. */
let onB: TestPlatform["http"];
/** The root user's account counter from 127.0.0.1. */
let COUNTER = "";

const login = (extra: Record<string, unknown> = {}) => ({ grant_type: "password", client_id: a.root.client_id, username: a.root.username, password: a.root.password, ...extra });
const clientCredential = (extra: Record<string, unknown> = {}) => ({ grant_type: "client_credential", client_id: a.root.client_id, client_secret: a.root.client_secret, ...extra });

beforeAll(async () => {
	const id = randomBytes(4).toString("hex");
	a = await bootPlatform({ transporter: "Fake", namespace: `auth-limit-${id}`, nodeId: `a-${id}` });
	gwB = await secondGateway(a);
	w = new LeakWatch(a);
	wb = new LeakWatch(a);
	onB = gwB.via(wb.http);
	COUNTER = rootAccountCounter(a);
	for (const x of [w, wb]) {
		x.secret(a.root.password, "root password", true);
		x.secret(a.root.client_secret, "root client secret");
	}
});
afterAll(async () => {
	await gwB?.stop();
	await a?.cleanup();
});
beforeEach(() => clearLoginFailures(a));
withStatusProbe(() => a.url);

test("both gateways serve the platform", async () => {
	expect(gwB.node.url).not.toBe(a.url);
	expect((await w.http("POST", "/auth/token", { body: login() })).status).toBe(200);
	expect((await onB("POST", "/auth/token", { body: login() })).status).toBe(200);
});

test("10 wrong passwords of one account → the 11th attempt, even with the right password, gets 429 on every gateway", async () => {
	for (let i = 0; i < 10; i++) {
		const r = await w.http("POST", "/auth/token", { body: login({ password: `wrong-password-${i}` }) });
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
		await onB("POST", "/auth/token", { body: login({ response_type: "code" }) }),
	]) {
		expect(r.status).toBe(429);
		expect(r.body).toEqual(LIMITED);
	}
	// Other accounts of the same client from the same IP are not blocked: the client's own secret, an unknown user.
	expect((await onB("POST", "/auth/token", { body: clientCredential() })).status).toBe(200);
	expect((await w.http("POST", "/auth/token", { body: login({ username: "nobody" }) })).body).toEqual(INVALID);
});

test("10 wrong client secrets block the client's secret from that IP on every gateway, not its users' logins", async () => {
	for (let i = 0; i < 10; i++) expect((await w.http("POST", "/auth/token", { body: clientCredential({ client_secret: `wrong-${i}` }) })).status).toBe(401);
	expect((await onB("POST", "/auth/token", { body: clientCredential() })).body).toEqual(LIMITED);
	// A secret presented by HTTP Basic or in the body of any grant is a guess of the same secret.
	expect((await w.http("POST", "/auth/token", { body: login({ client_secret: a.root.client_secret }) })).body).toEqual(LIMITED);
	expect((await onB("POST", "/auth/token", { body: login() })).status).toBe(200);
});

test("failures through different gateways add up", async () => {
	for (let i = 0; i < 10; i++) {
		const r =
			i % 2 ? await onB("POST", "/auth/token", { body: login({ password: `wrong-${i}` }) }) : await w.http("POST", "/auth/token", { body: login({ password: `wrong-${i}` }) });
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
	expect(await kvOf(a).keys("auth:fail:")).toEqual([]);
	expect((await w.http("POST", "/auth/token", { body: login() })).status).toBe(200);
});

test("no response of this suite contained a password, a client secret or a password hash", () => {
	expect(w.leaks()).toEqual([]);
	expect(wb.leaks()).toEqual([]);
});
