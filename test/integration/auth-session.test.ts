/**
 * Bearer carriers, rejected tokens and the session lifecycle (logout, blacklist, soft-deleted session record),
 * through HTTP (spec: Authentication > Token kinds, Request validation order, Logout; Session and token lifecycle).
 */
import { bootPlatform, type TestPlatform } from "../helpers/platform";
import { errorBody, forgeJwt, keysOf, LeakWatch, payloadOf, signWith, tokenOf } from "../helpers/auth";

let p: TestPlatform;
let w: LeakWatch;
let http: TestPlatform["http"];

const REQUIRED = errorBody(401, "authorization token is required");
const rootLogin = () => ({ grant_type: "password", client_id: p.root.client_id, username: p.root.username, password: p.root.password });

beforeAll(async () => {
	p = await bootPlatform();
	w = new LeakWatch(p);
	http = w.http;
	w.secret(p.root.password, "root password", true);
	w.secret(p.root.client_secret, "root client secret");
});
afterAll(() => p.cleanup());

describe("bearer carriers", () => {
	test("Authorization header, ?token= and the authorization cookie all authenticate", async () => {
		const { access_token: t, session } = await tokenOf(http, rootLogin());
		const carriers: Array<[string, () => Promise<any>]> = [
			["header", () => http("GET", "/auth/verify", { token: t })],
			["lower-case scheme", () => http("GET", "/auth/verify", { headers: { authorization: `bearer ${t}` } })],
			["query", () => http("GET", `/auth/verify?token=${encodeURIComponent(t)}`)],
			["cookie", () => http("GET", "/auth/verify", { headers: { cookie: `lang=en; authorization=${t}` } })],
			["cookie with scheme", () => http("GET", "/auth/verify", { headers: { cookie: `authorization=${encodeURIComponent(`Bearer ${t}`)}` } })],
		];
		for (const [name, call] of carriers) {
			const r = await call();
			expect({ name, status: r.status }).toEqual({ name, status: 200 });
			expect(r.body.data.session).toBe(session);
		}
		// The same carriers on a collection endpoint.
		expect((await http("GET", "/content/notes", { token: t })).status).toBe(200);
		expect((await http("GET", `/content/notes?token=${encodeURIComponent(t)}`)).status).toBe(200);
		expect((await http("GET", "/content/notes", { headers: { cookie: `authorization=${t}` } })).status).toBe(200);
	});

	test("the header wins over the query parameter and the cookie", async () => {
		const { access_token: t, session } = await tokenOf(http, rootLogin());
		const r = await http("GET", "/auth/verify?token=garbage", { token: t, headers: { cookie: "authorization=garbage" } });
		expect(r.status).toBe(200);
		expect(r.body.data.session).toBe(session);
	});

	test.each([
		["GET", "/auth/verify"],
		["GET", "/auth/logout"],
		["POST", "/auth/check"],
		["POST", "/auth/can"],
		["POST", "/auth/apts"],
		["GET", "/auth/apts"],
		["DELETE", "/auth/apts/0123456789abcdef01234567"],
		["GET", "/auth/grants"],
		["GET", "/content/notes"],
		["POST", "/content/notes"],
		["GET", "/identity/users/0123456789abcdef01234567"],
	])("no bearer on %s %s → 401 authorization token is required", async (method, path) => {
		const r = await http(method, path, method === "POST" ? { body: {} } : {});
		expect(r.status).toBe(401);
		expect(r.body).toEqual(REQUIRED);
	});

	test("an empty or non-Bearer Authorization header, an empty query token or cookie → 401", async () => {
		const { access_token: t } = await tokenOf(http, rootLogin());
		for (const headers of <Array<Record<string, string>>>[
			{ authorization: "" },
			{ authorization: "Bearer" },
			{ authorization: `Basic ${t}` },
			{ authorization: t },
			{ cookie: "authorization=" },
			{ cookie: "other=1" },
		]) {
			const r = await http("GET", "/auth/verify", { headers });
			expect({ headers, status: r.status }).toEqual({ headers, status: 401 });
			expect(r.body).toEqual(errorBody(401));
		}
		expect((await http("GET", "/auth/verify?token=")).status).toBe(401);
	});
});

describe("rejected tokens → 401", () => {
	let good: string;
	let claims: Record<string, unknown>;
	let secret: string;
	beforeAll(async () => {
		good = (await tokenOf(http, rootLogin())).access_token;
		const { iat, exp, ...rest } = payloadOf(good);
		claims = rest;
		secret = keysOf(p).jwtSecret;
	});

	test("control: a token the test signs HS256 with the platform key is accepted", async () => {
		const t = signWith(secret, claims, { expiresIn: 60 });
		expect((await http("GET", "/auth/verify", { token: t })).status).toBe(200);
	});

	test.each([
		["truncated", () => good.slice(0, -6)],
		["header and payload only", () => good.split(".").slice(0, 2).join(".")],
		[
			"tampered payload (scope)",
			() => {
				const [h, , s] = good.split(".");
				return `${h}.${Buffer.from(JSON.stringify({ ...payloadOf(good), scope: "whole extra" })).toString("base64url")}.${s}`;
			},
		],
		[
			"a signature of another token",
			() => {
				const other = signWith(secret, { ...claims, uid: "ffffffffffffffffffffffff" }, { expiresIn: 60 });
				return `${good.split(".").slice(0, 2).join(".")}.${other.split(".")[2]}`;
			},
		],
		["signed with another key", () => signWith("not-the-platform-key", claims, { expiresIn: 60 })],
		["alg none", () => forgeJwt({ alg: "none", typ: "JWT" }, { ...claims, iat: Math.floor(Date.now() / 1000), exp: Math.floor(Date.now() / 1000) + 60 })],
		["alg none with a signature", () => `${forgeJwt({ alg: "none", typ: "JWT" }, { ...claims, exp: Math.floor(Date.now() / 1000) + 60 })}${good.split(".")[2]}`],
		[
			"HS512 with the platform key",
			() => forgeJwt({ alg: "HS512", typ: "JWT" }, { ...claims, iat: Math.floor(Date.now() / 1000), exp: Math.floor(Date.now() / 1000) + 60 }, secret),
		],
		[
			"HS384 with the platform key",
			() => forgeJwt({ alg: "HS384", typ: "JWT" }, { ...claims, iat: Math.floor(Date.now() / 1000), exp: Math.floor(Date.now() / 1000) + 60 }, secret),
		],
		["expired", () => signWith(secret, { ...claims, iat: Math.floor(Date.now() / 1000) - 1000, exp: Math.floor(Date.now() / 1000) - 10 })],
		["not a JWT", () => "eyJnot-a-token"],
		["random text", () => "hello"],
		["an APT-looking string", () => "APT-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"],
	])("%s", async (_name, make) => {
		const t = make();
		const carriers: Array<[string, () => Promise<any>]> = [
			["header /auth/verify", () => http("GET", "/auth/verify", { token: t })],
			["header /content/notes", () => http("GET", "/content/notes", { token: t })],
			["header, a live cursor", () => http("GET", "/content/notes/cursor?live=true", { token: t })],
			["query", () => http("GET", `/auth/verify?token=${encodeURIComponent(t)}`)],
			["cookie", () => http("GET", "/auth/verify", { headers: { cookie: `authorization=${encodeURIComponent(t)}` } })],
		];
		for (const [carrier, call] of carriers) {
			const r = await call();
			expect({ carrier, status: r.status, body: r.body }).toEqual({ carrier, status: 401, body: REQUIRED });
			expect({ carrier, challenge: r.headers.get("www-authenticate") }).toEqual({
				carrier,
				challenge: expect.stringMatching(
					/^Bearer error="invalid_token", error_description="(not a token of this platform|the token has expired|the API token is deleted or expired)"$/,
				),
			});
		}
	});

	test("missing, malformed, expired, signed with another key: the one message; what was wrong in WWW-Authenticate", async () => {
		const now = Math.floor(Date.now() / 1000);
		const cases: Array<[string, Record<string, string>, string]> = [
			["missing", {}, "Bearer"],
			["malformed", { authorization: "Bearer garbage" }, 'Bearer error="invalid_token", error_description="not a token of this platform"'],
			["an APT of the wrong form", { authorization: "Bearer APT-short" }, 'Bearer error="invalid_token", error_description="not a token of this platform"'],
			[
				"expired",
				{ authorization: `Bearer ${signWith(secret, { ...claims, iat: now - 1000, exp: now - 10 })}` },
				'Bearer error="invalid_token", error_description="the token has expired"',
			],
			[
				"signed with another key",
				{ authorization: `Bearer ${signWith("not-the-platform-key", claims, { expiresIn: 60 })}` },
				'Bearer error="invalid_token", error_description="not a token of this platform"',
			],
			[
				"expired and signed with another key",
				{ authorization: `Bearer ${signWith("not-the-platform-key", { ...claims, iat: now - 1000, exp: now - 10 })}` },
				'Bearer error="invalid_token", error_description="not a token of this platform"',
			],
			["an unknown APT", { authorization: `Bearer APT-${"a".repeat(43)}` }, 'Bearer error="invalid_token", error_description="the API token is deleted or expired"'],
		];
		for (const [name, headers, challenge] of cases) {
			for (const path of ["/auth/verify", "/content/notes", "/content/notes/cursor?live=true"]) {
				const r = await http("GET", path, { headers });
				expect({ name, path, status: r.status, body: r.body, challenge: r.headers.get("www-authenticate") }).toEqual({ name, path, status: 401, body: REQUIRED, challenge });
			}
		}
	});
});

describe("logout and the session lifecycle", () => {
	test("logout answers OK; every JWT of the session then gets 401, the refresh token fails; repeating answers OK", async () => {
		const first = await tokenOf(http, rootLogin());
		const second = await tokenOf(http, { grant_type: "refresh_token", client_id: p.root.client_id, refresh_token: first.refresh_token });
		expect(second.session).toBe(first.session);
		const other = await tokenOf(http, rootLogin());
		expect(other.session).not.toBe(first.session);
		// Both JWTs of the session work (and are cached by the gateway) before the logout.
		for (const t of [first.access_token, second.access_token]) expect((await http("GET", "/content/notes", { token: t })).status).toBe(200);

		const out = await http("GET", "/auth/logout", { token: second.access_token });
		expect(out.status).toBe(200);
		expect(out.body).toEqual({ result: "OK" });

		for (const t of [first.access_token, second.access_token]) {
			for (const [m, path] of [
				["GET", "/auth/verify"],
				["GET", "/content/notes"],
				["POST", "/auth/apts"],
			] as const) {
				const r = await http(m, path, { token: t, ...(m === "POST" ? { body: { name: "after logout" } } : {}) });
				expect({ path, status: r.status }).toEqual({ path, status: 401 });
				expect(r.body).toEqual(errorBody(401));
			}
		}
		const refresh = await http("POST", "/auth/token", { body: { grant_type: "refresh_token", client_id: p.root.client_id, refresh_token: second.refresh_token } });
		expect(refresh.status).toBe(401);
		expect(refresh.body).toEqual(errorBody(401));

		// Idempotent, with any JWT of the session.
		for (const t of [second.access_token, first.access_token, second.access_token]) {
			const again = await http("GET", "/auth/logout", { token: t });
			expect(again.status).toBe(200);
			expect(again.body).toEqual({ result: "OK" });
		}
		// Another session of the same user is untouched.
		expect((await http("GET", "/auth/verify", { token: other.access_token })).status).toBe(200);
		expect((await http("POST", "/auth/token", { body: { grant_type: "refresh_token", client_id: p.root.client_id, refresh_token: other.refresh_token } })).status).toBe(200);

		// The session record is soft-deleted: hidden normally, visible with the exclude header, with deleted_at set.
		const hidden = await http("GET", `/identity/sessions/${first.session}`, { token: other.access_token });
		expect(hidden.status).toBe(404);
		const shown = await http("GET", `/identity/sessions/${first.session}`, { token: other.access_token, headers: { "x-exclude-soft-delete-query": "1" } });
		expect(shown.status).toBe(200);
		expect(shown.body.data.id).toBe(first.session);
		expect(typeof shown.body.data.deleted_at).toBe("string");
		expect(Number.isNaN(Date.parse(shown.body.data.deleted_at))).toBe(false);
		expect(shown.body.data.deleted_by).toBe(p.root.user_id);
		expect(shown.body.data).not.toHaveProperty("refresh");
	});

	test("a live session record: uid, cid, domain, ip, expiration; never the refresh hash", async () => {
		const d = await tokenOf(http, rootLogin());
		const r = await http("GET", `/identity/sessions/${d.session}`, { token: d.access_token });
		expect(r.status).toBe(200);
		expect(r.body.data).toMatchObject({ id: d.session, uid: p.root.user_id, cid: p.root.client_id, domain: "root.local", ip: "127.0.0.1", deleted_at: null });
		expect(Date.parse(r.body.data.expiration)).toBeGreaterThan(Date.now() + 86_000_000);
		expect(r.body.data).not.toHaveProperty("refresh");
		const l = await http("GET", `/identity/sessions?query=${encodeURIComponent(JSON.stringify({ id: d.session }))}`, { token: d.access_token });
		expect(l.body.total).toBe(1);
		expect(l.body.items[0]).not.toHaveProperty("refresh");
	});

	test("logout through the query parameter and the cookie; of a client_credential token", async () => {
		const a = await tokenOf(http, rootLogin());
		expect((await http("GET", `/auth/logout?token=${encodeURIComponent(a.access_token)}`)).body).toEqual({ result: "OK" });
		expect((await http("GET", "/auth/verify", { token: a.access_token })).status).toBe(401);
		const b = await tokenOf(http, rootLogin());
		expect((await http("GET", "/auth/logout", { headers: { cookie: `authorization=${b.access_token}` } })).body).toEqual({ result: "OK" });
		expect((await http("GET", "/auth/verify", { token: b.access_token })).status).toBe(401);
		const c = await tokenOf(http, { grant_type: "client_credential", client_id: p.root.client_id, client_secret: p.root.client_secret });
		expect((await http("GET", "/auth/logout", { token: c.access_token })).body).toEqual({ result: "OK" });
		expect((await http("GET", "/auth/verify", { token: c.access_token })).status).toBe(401);
	});

	test("logout with a bad or refresh token → 401", async () => {
		const d = await tokenOf(http, rootLogin());
		for (const t of [d.refresh_token, d.access_token.slice(0, -3), "garbage"]) {
			const r = await http("GET", "/auth/logout", { token: t });
			expect(r.status).toBe(401);
			expect(r.body).toEqual(errorBody(401));
		}
		// The refresh token was not a logout: the session lives.
		expect((await http("GET", "/auth/verify", { token: d.access_token })).status).toBe(200);
	});

	test("after a logout the same user logs in again with a new session", async () => {
		const d = await tokenOf(http, rootLogin());
		await http("GET", "/auth/logout", { token: d.access_token });
		const again = await tokenOf(http, rootLogin());
		expect(again.session).not.toBe(d.session);
		expect((await http("GET", "/auth/verify", { token: again.access_token })).status).toBe(200);
		expect((await http("GET", "/auth/verify", { token: d.access_token })).status).toBe(401);
	});
});

test("no response of this suite contained a password, a client secret or a password hash", () => {
	expect(w.count).toBeGreaterThan(50);
	expect(w.leaks()).toEqual([]);
});
