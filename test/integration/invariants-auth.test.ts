/**
 * Authentication invariants between tenants, on both document stores (test/helpers/tenants.ts):
 * - /auth/can with `subjects`: a grants reader asks only about subjects of its own tenant (a grant belongs to its
 *   subject's domain); the operator about any.
 * - A refresh re-reads the user and the client: current roles and groups, the client's current scopes intersected
 *   with what the login asked; a deactivated user or client cannot refresh.
 * - POST /auth/check: failed TOTP checks are limited per session, per user across sessions and per IP, 429 with
 *   Retry-After.
 * - A client secret that is presented (HTTP Basic or body) is verified for every grant type.
 */
import { bootTenancy, ok, type Tenancy, type Tenant } from "../helpers/tenants";
import { withStatusProbe } from "../helpers/status-probe";
import { aesOf, errorBody, payloadOf } from "../helpers/auth";
import { encryptEnvelope } from "../../lib/crypto";
import { totp } from "../../lib/totp";

const HEX = "3132333435363738393031323334353637383930";
const BAD_SECRET = (cid: string) => errorBody(401, `client secret is invalid for client ${cid}`);
const TOTP_SESSION = errorBody(429, "too many failed TOTP checks for this session");
const TOTP_USER = errorBody(429, "too many failed TOTP checks for this user");
const TOTP_IP = errorBody(429, "too many failed TOTP checks from this IP");

/** A code that is none of the codes of the current ±5 periods. */
function wrongCode(): string {
	const valid = new Set(Array.from({ length: 11 }, (_, i) => totp(HEX, Date.now() + (i - 5) * 30_000)));
	let n = 0;
	while (valid.has(String(n).padStart(6, "0"))) n++;
	return String(n).padStart(6, "0");
}

const basic = (id: string, secret: string) => `Basic ${Buffer.from(`${id}:${secret}`).toString("base64")}`;
const words = (s: string) => s.split(" ").filter(Boolean).sort();

describe("auth invariants", () => {
	let T: Tenancy;
	let secret: string;
	/** Each test its own caller IP (TRUST_PROXY): failed logins of one test never reach another's login limit. */
	let ipSeq = 0;
	const nextIp = () => `198.51.100.${++ipSeq}`;
	const from = (ip: string) => ({ "x-forwarded-for": ip });

	const tokenRequest = (body: Record<string, unknown>, ip: string, headers: Record<string, string> = {}) =>
		T.p.http("POST", "/auth/token", { body, headers: { ...from(ip), ...headers } });
	const passwordLogin = async (t: Tenant, username: string, password: string, ip: string, extra: Record<string, unknown> = {}) =>
		(await ok(tokenRequest({ grant_type: "password", client_id: t.client.id, username, password, ...extra }, ip), `login ${username}`)).data;
	const check = (token: string, ip: string, code: string) => T.p.http("POST", "/auth/check", { token, body: { secret, token: code, window: 5 }, headers: from(ip) });

	beforeAll(async () => {
		T = await bootTenancy({ trustProxy: true });
		secret = encryptEnvelope(aesOf(T.p), HEX);
	});
	afterAll(() => T?.cleanup());
	withStatusProbe(() => T.p.url);

	describe("finding 6: /auth/can names only subjects of the caller's tenant", () => {
		const can = (token: string, body: Record<string, unknown>) => T.as(token, "POST", "/auth/can", body, { "x-can-with-policies": "1" });

		test("a tenant admin asking about another tenant's or the operator's subjects → 403, no policies", async () => {
			const foreign = [T.b.admin.subject, `@editor@${T.b.domain}`, `${T.p.root.user_id}@${T.p.root.domain}`, `root@${T.p.root.domain}`];
			for (const s of foreign) {
				const r = await can(T.a.admin.token, { action: "manage", object: "identity:users", subjects: [s] });
				expect(r.status).toBe(403);
				expect(r.body).toEqual(errorBody(403, `subjects: ${s} is not a subject of this tenant`));
			}
			// One foreign entry among own ones is enough to refuse.
			const mixed = await can(T.a.admin.token, { action: "manage", object: "content:notes", subjects: [`@editor@${T.a.domain}`, T.b.member.subject] });
			expect(mixed.body).toEqual(errorBody(403, `subjects: ${T.b.member.subject} is not a subject of this tenant`));
		});

		test("its own tenant's subjects are answered, with their policies; the operator asks about any tenant", async () => {
			const r = await can(T.a.admin.token, { action: "manage", object: "content:notes", subjects: [`@editor@${T.a.domain}`] });
			expect(r.status).toBe(200);
			expect(r.body.data.granted).toBe(true);
			expect(r.body.data.policies).toEqual([{ subject: `@editor@${T.a.domain}`, action: "manage", object: "content:*", field: null, filter: null }]);
			const member = await can(T.a.admin.token, { action: "manage", object: "content:notes", subjects: [T.a.member.subject] });
			expect(member.body).toEqual({ data: { granted: false, policies: [] } });
			const op = await can(T.root, { action: "manage", object: "identity:users", subjects: [T.b.admin.subject] });
			expect(op.status).toBe(200);
			expect(op.body.data.granted).toBe(true);
		});
	});

	describe("finding 7: a refresh re-reads the user and the client", () => {
		const refresh = (t: Tenant, refreshToken: string, ip: string) => tokenRequest({ grant_type: "refresh_token", client_id: t.client.id, refresh_token: refreshToken }, ip);
		const patchClient = (t: Tenant, body: Record<string, unknown>) => ok(T.as(T.root, "PATCH", `/domain/clients/${t.client.id}`, body), "patch client");
		const newUser = async (t: Tenant, username: string, subjects: string[]) => {
			const password = `pw-${username}-Secret1`;
			const doc = (await ok(T.as(t.clientToken, "POST", "/identity/users", { username, password, subjects }), `user ${username}`)).data;
			return { id: doc.id as string, username, password };
		};

		test("a role removed from the user and scopes removed from the client are gone from the refreshed token", async () => {
			const ip = nextIp();
			const u = await newUser(T.a, "refresher", ["@editor", "team-x.example"]);
			const first = await passwordLogin(T.a, u.username, u.password, ip);
			const asked = await passwordLogin(T.a, u.username, u.password, ip, { scopes: ["read:content:notes", "write:content"] });
			expect(words(first.subject)).toContain(`@editor@${T.a.domain}`);
			expect((await T.as(first.access_token, "GET", "/content/notes")).status).toBe(200);
			await ok(T.as(T.a.clientToken, "PATCH", `/identity/users/${u.id}`, { subjects: ["team-x.example"] }), "remove @editor");
			await patchClient(T.a, { scopes: ["read:content"] });
			try {
				const r = await refresh(T.a, first.refresh_token, ip);
				expect(r.status).toBe(200);
				const d = r.body.data;
				expect(d.session).toBe(first.session);
				// Nothing asked at login: all of the client's current scopes.
				expect(d.scope).toBe("read:content");
				expect(words(d.subject)).toEqual(words(`team-x.example@${T.a.domain} ${u.id}@${T.a.domain} refresher@${T.a.domain}`));
				const claims = payloadOf(d.access_token);
				expect(claims).toMatchObject({ scope: "read:content", subject: d.subject, groups: ["team-x.example"] });
				// Without the role, the grants of @editor no longer apply.
				expect((await T.as(d.access_token, "GET", "/content/notes")).status).toBe(403);
				// Asked at login: what was asked, narrowed to what the client holds now.
				const r2 = await refresh(T.a, asked.refresh_token, ip);
				expect(r2.status).toBe(200);
				expect(r2.body.data.scope).toBe("read:content:notes");
				// The next refresh of the rotated token keeps what was asked (never widened).
				await patchClient(T.a, { scopes: ["whole"] });
				const r3 = await refresh(T.a, r2.body.data.refresh_token, ip);
				expect(words(r3.body.data.scope)).toEqual(["read:content:notes", "write:content"]);
			} finally {
				await patchClient(T.a, { scopes: ["whole"] });
			}
		});

		test("subjects narrowed at login stay narrowed; a role added later is not taken by a narrowed token", async () => {
			const ip = nextIp();
			const u = await newUser(T.a, "narrowed", ["team-x.example"]);
			const first = await passwordLogin(T.a, u.username, u.password, ip, { subjects: ["team-x.example"] });
			expect(first.subject).toBe(`team-x.example@${T.a.domain}`);
			await ok(T.as(T.a.clientToken, "PATCH", `/identity/users/${u.id}`, { subjects: ["team-x.example", "@editor"] }), "add @editor");
			const d = (await ok(refresh(T.a, first.refresh_token, ip), "refresh")).data;
			expect(d.subject).toBe(`team-x.example@${T.a.domain}`);
		});

		test("a deactivated user cannot refresh", async () => {
			const ip = nextIp();
			const u = await newUser(T.a, "leaver", []);
			const first = await passwordLogin(T.a, u.username, u.password, ip);
			await ok(T.as(T.a.clientToken, "PATCH", `/identity/users/${u.id}`, { status: "INACTIVE" }), "deactivate");
			const r = await refresh(T.a, first.refresh_token, ip);
			expect(r.status).toBe(401);
			expect(r.body).toEqual(errorBody(401));
		});

		test("a deactivated client cannot refresh (tenant b's client stays inactive: no later test uses it)", async () => {
			const ip = nextIp();
			const first = await passwordLogin(T.b, T.b.member.username, T.b.member.password, ip);
			await patchClient(T.b, { status: "INACTIVE" });
			const r = await refresh(T.b, first.refresh_token, ip);
			expect(r.status).toBe(401);
			expect(r.body).toEqual(errorBody(401));
		});
	});

	describe("finding 9: failed TOTP checks are limited per user and per IP, across sessions", () => {
		const login = async (u: { username: string; password: string }, t: Tenant, ip: string) => (await passwordLogin(t, u.username, u.password, ip)).access_token as string;
		/** `n` wrong codes, each answered NOK. */
		async function guess(token: string, ip: string, n: number) {
			const bad = wrongCode();
			for (let i = 0; i < n; i++) {
				const r = await check(token, ip, bad);
				expect(r.status).toBe(200);
				expect(r.body).toEqual({ result: "NOK" });
			}
		}
		const expectLimited = (r: { status: number; body: unknown; headers: Headers }, body: unknown) => {
			expect(r.body).toEqual(body);
			const after = Number(r.headers.get("retry-after"));
			expect(Number.isInteger(after)).toBe(true);
			expect(after).toBeGreaterThanOrEqual(1);
			expect(after).toBeLessThanOrEqual(900);
		};

		test("per user: logging in again does not give new guesses once 60 failed for the user", async () => {
			const u = T.a.limited;
			const ip1 = nextIp();
			const s1 = await login(u, T.a, ip1);
			await guess(s1, ip1, 30);
			// A new session, from another IP: 30 more, then the user's budget is spent.
			const ip2 = nextIp();
			const s2 = await login(u, T.a, ip2);
			await guess(s2, ip2, 30);
			const ip3 = nextIp();
			const s3 = await login(u, T.a, ip3);
			expectLimited(await check(s3, ip3, wrongCode()), TOTP_USER);
			// The spent session says so first.
			expectLimited(await check(s1, ip1, wrongCode()), TOTP_SESSION);
			// Even the right code, from any session of the user.
			expectLimited(await check(s3, ip3, totp(HEX, Date.now())), TOTP_USER);
			// Another user from the same IP is not affected.
			expect((await check(T.a.member.token, ip3, totp(HEX, Date.now()))).body).toEqual({ result: "OK" });
		});

		test("per IP: 120 failed checks from one IP, whatever the users, then 429 for every user from that IP", async () => {
			const ip = nextIp();
			const users: Array<[Tenant, { username: string; password: string }]> = [
				[T.a, T.a.admin],
				[T.a, T.a.member],
			];
			for (const [t, u] of users) for (let s = 0; s < 2; s++) await guess(await login(u, t, ip), ip, 30);
			// A principal with no failure of its own (tenant a's client), from that IP.
			const r = await check(T.a.clientToken, ip, wrongCode());
			expectLimited(r, TOTP_IP);
			expectLimited(await check(T.a.clientToken, ip, totp(HEX, Date.now())), TOTP_IP);
			// The same principal from another IP is not limited by that IP's count.
			expect((await check(T.a.clientToken, nextIp(), totp(HEX, Date.now()))).body).toEqual({ result: "OK" });
		});
	});

	describe("finding 18: a presented client secret is verified for every grant type", () => {
		test("password grant: a wrong secret by HTTP Basic or in the body → 401 naming the client, like client_credentials; the right one logs in", async () => {
			const ip = nextIp();
			const { id, secret: good } = T.a.client;
			const login = { grant_type: "password", username: T.a.member.username, password: T.a.member.password };
			const cc = await tokenRequest({ grant_type: "client_credentials" }, ip, { authorization: basic(id, "wrong-secret") });
			expect(cc.body).toEqual(BAD_SECRET(id));
			const viaBasic = await tokenRequest(login, ip, { authorization: basic(id, "wrong-secret") });
			expect(viaBasic.status).toBe(401);
			expect(viaBasic.body).toEqual(BAD_SECRET(id));
			const inBody = await tokenRequest({ ...login, client_id: id, client_secret: "wrong-secret" }, ip);
			expect(inBody.body).toEqual(BAD_SECRET(id));
			// Another tenant's secret is a wrong secret too.
			expect((await tokenRequest(login, ip, { authorization: basic(id, T.b.client.secret) })).body).toEqual(BAD_SECRET(id));
			const right = await tokenRequest(login, ip, { authorization: basic(id, good) });
			expect(right.status).toBe(200);
			expect(payloadOf(right.body.data.access_token).uid).toBe(T.a.member.id);
			expect((await tokenRequest({ ...login, client_id: id, client_secret: good }, ip)).status).toBe(200);
			// No secret presented: a password login as before.
			expect((await tokenRequest({ ...login, client_id: id }, ip)).status).toBe(200);
		});

		test("refresh_token and authorization_code: a wrong secret → 401 and the token or code is not spent", async () => {
			const ip = nextIp();
			const { id, secret: good } = T.a.client;
			const first = await passwordLogin(T.a, T.a.member.username, T.a.member.password, ip);
			const refresh = { grant_type: "refresh_token", refresh_token: first.refresh_token };
			expect((await tokenRequest(refresh, ip, { authorization: basic(id, "wrong-secret") })).body).toEqual(BAD_SECRET(id));
			expect((await tokenRequest({ ...refresh, client_id: id, client_secret: "wrong-secret" }, ip)).body).toEqual(BAD_SECRET(id));
			expect((await tokenRequest(refresh, ip, { authorization: basic(id, good) })).status).toBe(200);

			const code = (await passwordLogin(T.a, T.a.member.username, T.a.member.password, ip, { response_type: "code" })).code as string;
			const exchange = { grant_type: "authorization_code", code };
			expect((await tokenRequest(exchange, ip, { authorization: basic(id, "wrong-secret") })).body).toEqual(BAD_SECRET(id));
			const done = await tokenRequest(exchange, ip, { authorization: basic(id, good) });
			expect(done.status).toBe(200);
			expect(payloadOf(done.body.data.access_token).uid).toBe(T.a.member.id);
		});
	});
});
