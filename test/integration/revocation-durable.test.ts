/**
 * Revocation holds whatever the cache loses (issue 9 items 3a-3d; docs/contracts.md "Tenants", last lines, and "Tokens
 * and sessions"), through HTTP on the embedded default:
 * - a logged-out JWT and a deleted APT stay refused after a restart (the embedded cache starts empty: the session
 *   record in identity/sessions is what refuses them), and the login failure counter survives the restart;
 * - a deleted APT (or a closed session) cannot be restored;
 * - deactivating, deleting or changing the password of a user, or deactivating or deleting a client, revokes their
 *   access tokens, refresh tokens and APTs at once;
 * - an APT created with a strict token is strict; an APT lives at most 365 days.
 */
import { readFileSync, statSync } from "fs";
import path from "path";
import { bootPlatform, type TestPlatform } from "../helpers/platform";
import { apiKey, createClient, createUser, errorBody, kvOf, rootAccountCounter, tokenOf } from "../helpers/auth";
import { blacklistKey } from "../../authority/authenticate";
import { drained } from "../helpers/stream";

let p: TestPlatform;
let http: TestPlatform["http"];
let rootJwt: string;

const REVOKED = errorBody(401, "session is revoked");
const rootLogin = (extra: Record<string, unknown> = {}) => ({
	grant_type: "password",
	client_id: p.root.client_id,
	username: p.root.username,
	password: p.root.password,
	...extra,
});
const DAY = 24 * 3600 * 1000;

beforeAll(async () => {
	p = await bootPlatform({ trustProxy: true });
	http = p.http;
	rootJwt = await p.rootToken();
});
afterAll(async () => {
	await p?.cleanup();
});

async function restart() {
	await p.restart();
	rootJwt = await p.rootToken();
}

async function newApt(token: string, body: Record<string, unknown> = {}, headers?: Record<string, string>): Promise<{ id: string; token: string; strict: boolean }> {
	const r = await http("POST", "/auth/apts", { token, headers, body: { name: "apt", ...body } });
	if (r.status !== 200) throw new Error(`APT creation failed: ${r.status} ${r.text}`);
	return r.body.data;
}

describe("after a restart of the embedded platform (its cache starts empty)", () => {
	test("a logged-out JWT is still refused: 401 session is revoked", async () => {
		const t = await tokenOf(http, rootLogin());
		expect((await http("GET", "/auth/verify", { token: t.access_token })).status).toBe(200);
		expect((await http("GET", "/auth/logout", { token: t.access_token })).status).toBe(200);
		expect((await http("GET", "/auth/verify", { token: t.access_token })).body).toEqual(REVOKED);
		// The watcher re-sets the blacklist from the session's change event: let it finish before the restart.
		await drained(p.cfg);
		await restart();
		// Nothing of the revocation is left in the cache: only the durable session record can refuse it.
		expect(await kvOf(p).get(blacklistKey(t.session))).toBeNull();
		const r = await http("GET", "/content/notes", { token: t.access_token });
		expect(r.status).toBe(401);
		expect(r.body).toEqual(REVOKED);
		expect((await http("GET", "/auth/verify", { token: t.access_token })).body).toEqual(REVOKED);
		// And the refresh token of that session is refused too.
		const ref = await http("POST", "/auth/token", { body: { grant_type: "refresh_token", client_id: p.root.client_id, refresh_token: t.refresh_token } });
		expect(ref.status).toBe(401);
		expect(ref.body).toEqual(REVOKED);
		// A fresh login works (a working platform, not one that refuses everything).
		expect((await http("GET", "/content/notes", { token: rootJwt })).status).toBe(200);
	});

	test("the cache losing a blacklist entry does not revive the session (durable check on a cache miss)", async () => {
		const t = await tokenOf(http, rootLogin());
		expect((await http("GET", "/auth/logout", { token: t.access_token })).status).toBe(200);
		await restart();
		await kvOf(p).del(blacklistKey(t.session));
		expect((await http("GET", "/content/notes", { token: t.access_token })).body).toEqual(REVOKED);
	});

	test("a deleted APT is still refused", async () => {
		const apt = await newApt(rootJwt);
		expect((await http("GET", "/content/notes", { token: apt.token })).status).toBe(200);
		expect((await http("DELETE", `/auth/apts/${apt.id}`, { token: rootJwt })).status).toBe(200);
		expect((await http("GET", "/content/notes", { token: apt.token })).status).toBe(401);
		await restart();
		const r = await http("GET", "/content/notes", { token: apt.token });
		expect(r.status).toBe(401);
		expect(r.body).toEqual(errorBody(401));
		expect((await http("GET", "/auth/verify", { token: apt.token })).status).toBe(401);
	});

	test("the login failure counter survives: 10 failures, restart, the 11th attempt (right password) is 429", async () => {
		const headers = { "x-forwarded-for": "198.51.100.23" };
		for (let i = 0; i < 10; i++) {
			const r = await http("POST", "/auth/token", { headers, body: rootLogin({ password: "wrong-password" }) });
			expect(r.body).toEqual(errorBody(401, "username or password is invalid"));
		}
		await restart();
		const file = path.join(p.dataDir, "cache.json");
		expect(statSync(file).mode & 0o777).toBe(0o600);
		// Only the failure counters are kept there (no leases, no cached APT records).
		const kept = Object.keys(JSON.parse(readFileSync(file, "utf8")));
		expect(kept).toContain(rootAccountCounter(p, "198.51.100.23"));
		expect(kept.every((k) => k.startsWith("auth:fail:"))).toBe(true);
		const r = await http("POST", "/auth/token", { headers, body: rootLogin() });
		expect(r.status).toBe(429);
		expect(r.body).toEqual(errorBody(429, "too many failed login attempts for this account from this IP"));
		// Counted per IP: another address logs in.
		expect((await http("POST", "/auth/token", { headers: { "x-forwarded-for": "198.51.100.24" }, body: rootLogin() })).status).toBe(200);
	});
});

describe("no revival", () => {
	test("PUT /auth/apts/:id/restore of a deleted APT → 400; the APT stays refused", async () => {
		const apt = await newApt(rootJwt);
		expect((await http("DELETE", `/auth/apts/${apt.id}`, { token: rootJwt })).status).toBe(200);
		const r = await http("PUT", `/auth/apts/${apt.id}/restore`, { token: rootJwt });
		expect(r.status).toBe(400);
		expect(r.body).toEqual(errorBody(400, "a revoked APT cannot be restored; create a new one"));
		expect((await http("GET", "/content/notes", { token: apt.token })).status).toBe(401);
		// Still deleted.
		expect((await http("GET", `/auth/apts/${apt.id}`, { token: rootJwt })).status).toBe(404);
	});

	test("PUT /identity/sessions/:id/restore of a logged-out session → 400; its token stays refused", async () => {
		const t = await tokenOf(http, rootLogin());
		expect((await http("GET", "/auth/logout", { token: t.access_token })).status).toBe(200);
		const r = await http("PUT", `/identity/sessions/${t.session}/restore`, { token: rootJwt });
		expect(r.status).toBe(400);
		expect(r.body).toEqual(errorBody(400, "a revoked session cannot be restored; log in again"));
		await kvOf(p).del(blacklistKey(t.session));
		await restart();
		expect((await http("GET", "/auth/verify", { token: t.access_token })).body).toEqual(REVOKED);
	});
});

describe("user and client changes revoke at once", () => {
	let n = 0;
	/** A user of the root client with a grant to create APTs, its tokens and an APT, all checked working. */
	async function userWithTokens() {
		const username = `revoked-${++n}-${Date.now().toString(36)}`;
		const password = `pw-${n}-Secret-long!`;
		const user = await createUser(http, rootJwt, { username, password });
		const g = await http("POST", "/auth/grants", { token: rootJwt, body: { subject: `${user.id}@${p.root.domain}`, action: "manage", object: "auth:apts" } });
		expect(g.status).toBe(200);
		const t = await tokenOf(http, { grant_type: "password", client_id: p.root.client_id, username, password });
		const apt = await newApt(t.access_token);
		for (const token of [t.access_token, apt.token]) expect((await http("GET", "/auth/verify", { token })).status).toBe(200);
		return { user, username, password, t, apt };
	}

	async function expectAllRefused(u: Awaited<ReturnType<typeof userWithTokens>>) {
		const a = await http("GET", "/auth/verify", { token: u.t.access_token });
		expect(a.body).toEqual(REVOKED);
		const apt = await http("GET", "/auth/verify", { token: u.apt.token });
		expect(apt.body).toEqual(REVOKED);
		const r = await http("POST", "/auth/token", { body: { grant_type: "refresh_token", client_id: p.root.client_id, refresh_token: u.t.refresh_token } });
		expect(r.status).toBe(401);
		expect(r.body).toEqual(REVOKED);
	}

	test("user set INACTIVE → its access token, refresh token and APT are refused", async () => {
		const u = await userWithTokens();
		expect((await http("PATCH", `/identity/users/${u.user.id}`, { token: rootJwt, body: { status: "INACTIVE" } })).status).toBe(200);
		await expectAllRefused(u);
		// Set ACTIVE again: the old sessions stay closed; a new login works.
		expect((await http("PATCH", `/identity/users/${u.user.id}`, { token: rootJwt, body: { status: "ACTIVE" } })).status).toBe(200);
		await expectAllRefused(u);
		expect((await http("POST", "/auth/token", { body: { grant_type: "password", client_id: p.root.client_id, username: u.username, password: u.password } })).status).toBe(200);
	});

	test("user soft-deleted → refused", async () => {
		const u = await userWithTokens();
		expect((await http("DELETE", `/identity/users/${u.user.id}`, { token: rootJwt })).status).toBe(200);
		await expectAllRefused(u);
	});

	test("user destroyed → refused", async () => {
		const u = await userWithTokens();
		expect((await http("DELETE", `/identity/users/${u.user.id}/destroy`, { token: rootJwt })).status).toBe(200);
		await expectAllRefused(u);
	});

	test("user given a new password → refused; the new password logs in", async () => {
		const u = await userWithTokens();
		expect((await http("PATCH", `/identity/users/${u.user.id}`, { token: rootJwt, body: { password: "a-brand-new-Secret-9" } })).status).toBe(200);
		await expectAllRefused(u);
		expect(
			(await http("POST", "/auth/token", { body: { grant_type: "password", client_id: p.root.client_id, username: u.username, password: "a-brand-new-Secret-9" } })).status,
		).toBe(200);
	});

	test("a patch that changes neither status nor password revokes nothing", async () => {
		const u = await userWithTokens();
		expect((await http("PATCH", `/identity/users/${u.user.id}`, { token: rootJwt, body: { tags: ["x"] } })).status).toBe(200);
		for (const token of [u.t.access_token, u.apt.token]) expect((await http("GET", "/auth/verify", { token })).status).toBe(200);
	});

	/**
	 * A client of its own, its client_credential token, and a user of the root client logging in through it (the
	 * client lists the root client as a coworker), with refresh token and an APT made through that client.
	 */
	async function clientWithUser(tag: string) {
		const domain = `${tag}-${Date.now().toString(36)}.test`;
		const c = await createClient(http, rootJwt, { name: tag, scopes: ["whole"], domains: [domain], coworkers: [p.root.client_id] });
		const cc = await tokenOf(http, { grant_type: "client_credential", client_id: c.id, client_secret: c.secret });
		const username = `${tag}-user-${Date.now().toString(36)}`;
		const password = "client-user-Secret-1";
		const user = await createUser(http, rootJwt, { username, password });
		// The user may create APTs under the client's domain: the operator grants in any registered domain.
		const g = await http("POST", "/auth/grants", { token: rootJwt, body: { subject: `${user.id}@${domain}`, action: "manage", object: "auth:apts" } });
		expect(g.status).toBe(200);
		const t = await tokenOf(http, { grant_type: "password", client_id: c.id, username, password });
		const apt = await newApt(t.access_token);
		const other = await tokenOf(http, { grant_type: "password", client_id: p.root.client_id, username, password });
		for (const token of [cc.access_token, t.access_token, apt.token, other.access_token]) expect((await http("GET", "/auth/verify", { token })).status).toBe(200);
		return { c, cc, t, apt, other };
	}

	async function expectClientRefused(x: Awaited<ReturnType<typeof clientWithUser>>) {
		for (const token of [x.cc.access_token, x.t.access_token, x.apt.token]) {
			const r = await http("GET", "/auth/verify", { token });
			expect(r.body).toEqual(REVOKED);
		}
		const r = await http("POST", "/auth/token", { body: { grant_type: "refresh_token", client_id: x.c.id, refresh_token: x.t.refresh_token } });
		expect(r.status).toBe(401);
		expect(r.body).toEqual(REVOKED);
		// The same user's session through another client is not the client's: it keeps working.
		expect((await http("GET", "/auth/verify", { token: x.other.access_token })).status).toBe(200);
	}

	test("client set INACTIVE → the tokens and APTs of its users (and its own) are refused", async () => {
		const x = await clientWithUser("inactive");
		expect((await http("PATCH", `/domain/clients/${x.c.id}`, { token: rootJwt, body: { status: "INACTIVE" } })).status).toBe(200);
		await expectClientRefused(x);
	});

	test("client deleted → refused", async () => {
		const x = await clientWithUser("deleted");
		expect((await http("DELETE", `/domain/clients/${x.c.id}`, { token: rootJwt })).status).toBe(200);
		await expectClientRefused(x);
	});
});

describe("APT limits", () => {
	test("an APT created with a strict token is strict, whatever the body says", async () => {
		const strict = (await tokenOf(http, rootLogin({ strict: true }))).access_token;
		const key = apiKey(p, { cid: p.root.client_id, client_id: p.root.client_id, expiration_date: Date.now() + 3600_000 });
		const apt = await newApt(strict, { strict: false }, { "x-api-key": key });
		expect(apt.strict).toBe(true);
		const r = await http("GET", "/content/notes", { token: apt.token });
		expect(r.status).toBe(403);
		expect(r.body).toEqual(errorBody(403, "strict token must have valid api-key"));
		expect((await http("GET", "/content/notes", { token: apt.token, headers: { "x-api-key": key } })).status).toBe(200);
		// A non-strict token still makes non-strict APTs by default.
		expect((await newApt(rootJwt)).strict).toBe(false);
	});

	test("expires_at beyond 365 days → 400; within → 200", async () => {
		const r = await http("POST", "/auth/apts", { token: rootJwt, body: { name: "too long", expires_at: Date.now() + 366 * DAY } });
		expect(r.status).toBe(400);
		expect(r.body).toEqual(errorBody(400, "expires_at must be within 365 days"));
		const far = await http("POST", "/auth/apts", { token: rootJwt, body: { name: "2100", expires_at: Date.parse("2100-01-01T00:00:00Z") } });
		expect(far.body).toEqual(errorBody(400, "expires_at must be within 365 days"));
		expect((await http("POST", "/auth/apts", { token: rootJwt, body: { name: "ok", expires_at: Date.now() + 364 * DAY } })).status).toBe(200);
	});
});
