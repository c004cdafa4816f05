/**
 * POST /auth/token (all four grants) and GET /auth/verify, through HTTP (spec: Authentication > Grant types,
 * Token request/response, Token claims, Errors; docs/contracts.md "Tokens and sessions").
 */
import { bootPlatform, type TestPlatform } from "../helpers/platform";
import { clearLoginFailures, createClient, createUser, errorBody, kvOf, LeakWatch, payloadOf, tokenOf, ttlOf } from "../helpers/auth";
import { sha256Hex } from "../../lib/crypto";

const CLAIMS = ["type", "strict", "cid", "uid", "scope", "domain", "subject", "tz", "lang", "session", "client_id", "iat", "exp"].sort();
const HEX24 = /^[0-9a-f]{24}$/;
const JWT = /^eyJ[A-Za-z0-9_-]+\.eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/;
const ALICE = { username: "alice", email: "alice@example.com", phone: "+15551230001", password: "Alice-Pass-123!", subjects: ["@editor", "staff.example.com"] };

let p: TestPlatform;
let w: LeakWatch;
let http: TestPlatform["http"];
let root: string;
let alice: Record<string, any>;
let acme: { id: string; secret: string };

const sorted = (s: string) => s.split(" ").filter(Boolean).sort();
const rootLogin = (extra: Record<string, unknown> = {}) => ({
	grant_type: "password",
	client_id: p.root.client_id,
	username: p.root.username,
	password: p.root.password,
	...extra,
});
const aliceSubject = (domain: string) => [`@editor@${domain}`, `staff.example.com@${domain}`, `${alice.id}@${domain}`, `alice@${domain}`].sort();

beforeAll(async () => {
	p = await bootPlatform();
	w = new LeakWatch(p);
	http = w.http;
	w.secret(p.root.password, "root password", true);
	w.secret(p.root.client_secret, "root client secret");
	w.secret(ALICE.password, "alice password", true);
	root = (await tokenOf(http, rootLogin())).access_token;
	alice = await createUser(w.revealing, root, ALICE);
	acme = await createClient(w.revealing, root, {
		name: "acme",
		domains: ["acme.test", "acme-eu.test"],
		scopes: ["read:content", "write:content:notes", "read:identity:users"],
		coworkers: [p.root.client_id],
		access_token_ttl: 120,
		refresh_token_ttl: 600,
	});
	w.secret(acme.secret, "acme client secret");
});
afterAll(() => p.cleanup());
// The failed-login limit has its own suite; here the wrong-credential cases must not add up to it.
beforeEach(() => clearLoginFailures(p));

describe("POST /auth/token: request validation", () => {
	const cases: Array<[string, () => Record<string, unknown>, string]> = [
		["grant_type missing", () => ({ client_id: p.root.client_id, username: "root", password: "x" }), "grant_type is required"],
		["password without client_id", () => ({ grant_type: "password", username: "root", password: "x" }), "client_id is required"],
		["password without username", () => ({ grant_type: "password", client_id: p.root.client_id, password: "x" }), "username is required"],
		["password without password", () => ({ grant_type: "password", client_id: p.root.client_id, username: "root" }), "password is required"],
		["refresh_token without client_id", () => ({ grant_type: "refresh_token", refresh_token: "eyJx" }), "client_id is required"],
		["refresh_token without refresh_token", () => ({ grant_type: "refresh_token", client_id: p.root.client_id }), "refresh_token is required"],
		["client_credential without client_id", () => ({ grant_type: "client_credential", client_secret: "s" }), "client_id is required"],
		["client_credential without client_secret", () => ({ grant_type: "client_credential", client_id: p.root.client_id }), "client_secret is required"],
		["authorization_code without client_id", () => ({ grant_type: "authorization_code", code: "c" }), "client_id is required"],
		["authorization_code without code", () => ({ grant_type: "authorization_code", client_id: p.root.client_id }), "code is required"],
	];
	test.each(cases)("%s → 400 with the spec's message", async (_name, body, message) => {
		const r = await http("POST", "/auth/token", { body: body() });
		expect(r.status).toBe(400);
		expect(r.body).toEqual(errorBody(400, message));
	});

	test("an unknown grant_type → 400 naming grant_type", async () => {
		const r = await http("POST", "/auth/token", { body: { grant_type: "implicit", client_id: p.root.client_id } });
		expect(r.status).toBe(400);
		expect(r.body).toEqual(errorBody(400));
		expect(r.body.message).toMatch(/grant_type/);
	});

	const wrongTypes: Array<[string, unknown]> = [
		["grant_type", 1],
		["client_id", 42],
		["username", ["root"]],
		["password", { p: 1 }],
		["strict", "true"],
		["scopes", "whole"],
		["subjects", [1]],
		["coworkers", "x"],
		["domain", true],
	];
	test.each(wrongTypes)("%s of a wrong type → 400 naming the field", async (field, value) => {
		const r = await http("POST", "/auth/token", { body: { ...rootLogin(), [field]: value } });
		expect(r.status).toBe(400);
		expect(r.body).toEqual(errorBody(400));
		expect(r.body.message).toContain(field);
	});

	test("an unknown field → 400 naming it", async () => {
		const r = await http("POST", "/auth/token", { body: { ...rootLogin(), favourite_colour: "blue" } });
		expect(r.status).toBe(400);
		expect(r.body.message).toContain("favourite_colour");
	});

	test("a body that is not an object → 400", async () => {
		for (const raw of ["[1,2]", '"password"', "null"]) {
			const r = await http("POST", "/auth/token", { raw });
			expect(r.status).toBe(400);
			expect(r.body).toEqual(errorBody(400));
		}
	});
});

describe("password grant", () => {
	test("root login: response fields exactly per the spec table", async () => {
		const r = await http("POST", "/auth/token", { body: rootLogin() });
		expect(r.status).toBe(200);
		expect(Object.keys(r.body)).toEqual(["data"]);
		const d = r.body.data;
		expect(Object.keys(d).sort()).toEqual(["access_token", "domain", "expires_in", "refresh_token", "scope", "session", "subject", "token_type"]);
		expect(d.token_type).toBe("Bearer");
		expect(d.access_token).toMatch(JWT);
		expect(d.refresh_token).toMatch(JWT);
		expect(d.expires_in).toBe(900);
		expect(d.scope).toBe("whole");
		expect(d.domain).toBe("root.local");
		expect(sorted(d.subject)).toEqual([`${p.root.user_id}@root.local`, "root@root.local"].sort());
		expect(d.session).toMatch(HEX24);
		const a = payloadOf(d.access_token);
		expect(a.exp - a.iat).toBe(900);
		expect(a).toMatchObject({ type: "access", session: d.session, scope: "whole", subject: d.subject, domain: "root.local" });
		expect(payloadOf(d.refresh_token)).toMatchObject({ type: "refresh", session: d.session });
		const rf = payloadOf(d.refresh_token);
		expect(rf.exp - rf.iat).toBe(86_400);
	});

	test.each([
		["a wrong password", () => rootLogin({ password: "not-the-password" })],
		["an unknown user", () => rootLogin({ username: "nobody-here" })],
		["an unknown client", () => rootLogin({ client_id: "0123456789abcdef01234567" })],
		["a client_id that is not an id", () => rootLogin({ client_id: "root" })],
	])("%s → 401 username or password is invalid", async (_n, body) => {
		const r = await http("POST", "/auth/token", { body: body() });
		expect(r.status).toBe(401);
		expect(r.body).toEqual(errorBody(401, "username or password is invalid"));
	});

	test("a created user's password is write-only: never in create, read or list responses", async () => {
		const g = await http("GET", `/identity/users/${alice.id}`, { token: root });
		expect(g.status).toBe(200);
		expect(g.body.data).toMatchObject({ username: "alice", email: ALICE.email, phone: ALICE.phone, subjects: ALICE.subjects, status: "ACTIVE" });
		expect(g.body.data).not.toHaveProperty("password");
		expect(alice).not.toHaveProperty("password");
		const l = await http("GET", `/identity/users?query=${encodeURIComponent(JSON.stringify({ username: "alice" }))}`, { token: root });
		expect(l.body.total).toBe(1);
		expect(l.body.items[0]).not.toHaveProperty("password");
	});

	test.each([
		["username", () => ALICE.username],
		["email", () => ALICE.email],
		["phone", () => ALICE.phone],
	])("a user logs in with the %s; subject in the form of docs/contracts.md", async (_n, login) => {
		const d = await tokenOf(http, { grant_type: "password", client_id: p.root.client_id, username: login(), password: ALICE.password });
		expect(sorted(d.subject)).toEqual(aliceSubject("root.local"));
		expect(d.scope).toBe("whole");
		expect(payloadOf(d.access_token)).toMatchObject({ uid: alice.id, cid: p.root.client_id, client_id: p.root.client_id });
		// A user is not bound to one client: the same user through another client.
		const viaAcme = await tokenOf(http, { grant_type: "password", client_id: acme.id, username: login(), password: ALICE.password });
		expect(sorted(viaAcme.subject)).toEqual(aliceSubject("acme.test"));
	});

	test("a user's right password through the wrong login form still fails; an INACTIVE user cannot log in", async () => {
		const bob = await createUser(w.revealing, root, { username: "bob", password: "Bob-Pass-456!" });
		w.secret("Bob-Pass-456!", "bob password", true);
		expect((await http("POST", "/auth/token", { body: { grant_type: "password", client_id: p.root.client_id, username: "bob", password: ALICE.password } })).status).toBe(401);
		expect((await http("POST", "/auth/token", { body: { grant_type: "password", client_id: p.root.client_id, username: "bob", password: "Bob-Pass-456!" } })).status).toBe(200);
		const patch = await http("PATCH", `/identity/users/${bob.id}`, { token: root, body: { status: "INACTIVE" } });
		expect(patch.status).toBe(200);
		const r = await http("POST", "/auth/token", { body: { grant_type: "password", client_id: p.root.client_id, username: "bob", password: "Bob-Pass-456!" } });
		expect(r.status).toBe(401);
		expect(r.body).toEqual(errorBody(401, "username or password is invalid"));
	});

	test("expires_in follows the client's access_token_ttl; domain defaults to the client's first", async () => {
		const d = await tokenOf(http, { grant_type: "password", client_id: acme.id, username: "alice", password: ALICE.password });
		expect(d.expires_in).toBe(120);
		expect(d.domain).toBe("acme.test");
		const a = payloadOf(d.access_token);
		expect(a.exp - a.iat).toBe(120);
		const rf = payloadOf(d.refresh_token);
		expect(rf.exp - rf.iat).toBe(600);
		// No scopes requested: all of the client's.
		expect(sorted(d.scope)).toEqual(["read:content", "read:identity:users", "write:content:notes"]);
	});

	test("requested scopes are intersected with the client's", async () => {
		const d = await tokenOf(http, {
			grant_type: "password",
			client_id: acme.id,
			username: "alice",
			password: ALICE.password,
			scopes: ["read:content:notes", "manage:identity:users", "read:financial", "write:content:notes"],
		});
		expect(sorted(d.scope)).toEqual(["read:content:notes", "write:content:notes"]);
		expect(sorted(payloadOf(d.access_token).scope)).toEqual(["read:content:notes", "write:content:notes"]);
	});

	test("a narrowed root token can do only what its scopes cover", async () => {
		const d = await tokenOf(http, rootLogin({ scopes: ["read:content:notes"] }));
		expect(d.scope).toBe("read:content:notes");
		expect((await http("GET", "/content/notes", { token: d.access_token })).status).toBe(200);
		const w403 = await http("POST", "/content/notes", { token: d.access_token, body: { title: "no" } });
		expect(w403.status).toBe(403);
		expect(w403.body).toEqual(errorBody(403));
		expect((await http("GET", "/identity/users", { token: d.access_token })).status).toBe(403);
	});

	test("a valid token whose subjects hold no grant → 403 (the grant layer after the scope layer)", async () => {
		const d = await tokenOf(http, { grant_type: "password", client_id: p.root.client_id, username: "alice", password: ALICE.password });
		expect(d.scope).toBe("whole");
		const r = await http("GET", "/content/notes", { token: d.access_token });
		expect(r.status).toBe(403);
		expect(r.body).toEqual(errorBody(403));
		expect((await http("GET", "/auth/verify", { token: d.access_token })).status).toBe(200);
	});

	test("domain must be one of the client's", async () => {
		const eu = await tokenOf(http, { grant_type: "password", client_id: acme.id, username: "alice", password: ALICE.password, domain: "acme-eu.test" });
		expect(eu.domain).toBe("acme-eu.test");
		expect(sorted(eu.subject)).toEqual(aliceSubject("acme-eu.test"));
		expect(payloadOf(eu.access_token).domain).toBe("acme-eu.test");
		for (const domain of ["root.local", "evil.test"]) {
			const r = await http("POST", "/auth/token", { body: { grant_type: "password", client_id: acme.id, username: "alice", password: ALICE.password, domain } });
			expect(r.status).toBe(400);
			expect(r.body).toEqual(errorBody(400));
			expect(r.body.message).toMatch(/domain/);
		}
	});

	test("subjects narrows the token's subjects, never widens them", async () => {
		const d = await tokenOf(http, { grant_type: "password", client_id: p.root.client_id, username: "alice", password: ALICE.password, subjects: ["@editor"] });
		expect(d.subject).toBe("@editor@root.local");
		const d2 = await tokenOf(http, {
			grant_type: "password",
			client_id: p.root.client_id,
			username: "alice",
			password: ALICE.password,
			subjects: ["@editor@root.local", "@admin", "alice", `${p.root.user_id}@root.local`],
		});
		expect(sorted(d2.subject)).toEqual(["@editor@root.local", "alice@root.local"]);
		expect(payloadOf(d2.access_token).subject).toBe(d2.subject);
	});

	test("coworkers: only the client's coworkers are kept, in the response and the claims", async () => {
		const d = await tokenOf(http, {
			grant_type: "password",
			client_id: acme.id,
			username: "alice",
			password: ALICE.password,
			coworkers: [p.root.client_id, "ffffffffffffffffffffffff"],
		});
		expect(d.coworker).toBe(p.root.client_id);
		const v = await http("GET", "/auth/verify", { token: d.access_token });
		expect(v.body.data.coworker).toBe(p.root.client_id);
	});
});

describe("refresh_token grant", () => {
	test("rotation: each refresh token works once, the session id is kept", async () => {
		const first = await tokenOf(http, rootLogin());
		const r1 = await http("POST", "/auth/token", { body: { grant_type: "refresh_token", client_id: p.root.client_id, refresh_token: first.refresh_token } });
		expect(r1.status).toBe(200);
		const second = r1.body.data;
		expect(Object.keys(second).sort()).toEqual(["access_token", "domain", "expires_in", "refresh_token", "scope", "session", "subject", "token_type"]);
		expect(second).toMatchObject({ token_type: "Bearer", expires_in: 900, scope: "whole", domain: "root.local", subject: first.subject, session: first.session });
		expect(second.refresh_token).not.toBe(first.refresh_token);
		expect(payloadOf(second.access_token).session).toBe(first.session);
		// The new access token works; the new refresh token works once.
		expect((await http("GET", "/auth/verify", { token: second.access_token })).body.data.session).toBe(first.session);
		const r2 = await http("POST", "/auth/token", { body: { grant_type: "refresh_token", client_id: p.root.client_id, refresh_token: second.refresh_token } });
		expect(r2.status).toBe(200);
		expect(r2.body.data.session).toBe(first.session);
		// An old refresh token used again: 401, and the session is revoked (RFC 9700 §4.14.2), the latest pair with it.
		const again = await http("POST", "/auth/token", { body: { grant_type: "refresh_token", client_id: p.root.client_id, refresh_token: first.refresh_token } });
		expect(again.body).toEqual(errorBody(401, "refresh token was already used: its session is revoked, log in again"));
		const r3 = await http("POST", "/auth/token", { body: { grant_type: "refresh_token", client_id: p.root.client_id, refresh_token: r2.body.data.refresh_token } });
		expect(r3.body).toEqual(errorBody(401, "session is revoked"));
		expect((await http("GET", "/auth/verify", { token: r2.body.data.access_token })).body).toEqual(errorBody(401, "session is revoked"));
	});

	test("a refresh keeps the client's lifetimes and narrowed scope", async () => {
		const first = await tokenOf(http, { grant_type: "password", client_id: acme.id, username: "alice", password: ALICE.password, scopes: ["read:content"] });
		const d = await tokenOf(http, { grant_type: "refresh_token", client_id: acme.id, refresh_token: first.refresh_token });
		expect(d).toMatchObject({ expires_in: 120, scope: "read:content", domain: "acme.test", session: first.session });
		expect(sorted(d.subject)).toEqual(aliceSubject("acme.test"));
	});

	test("a refresh token of another client, an access token or garbage → 401", async () => {
		const first = await tokenOf(http, rootLogin());
		const bodies = [
			{ grant_type: "refresh_token", client_id: acme.id, refresh_token: first.refresh_token },
			{ grant_type: "refresh_token", client_id: p.root.client_id, refresh_token: first.access_token },
			{ grant_type: "refresh_token", client_id: p.root.client_id, refresh_token: "eyJhbGciOiJIUzI1NiJ9.e30.x" },
			{ grant_type: "refresh_token", client_id: p.root.client_id, refresh_token: first.refresh_token.slice(0, -4) },
		];
		for (const body of bodies) {
			const r = await http("POST", "/auth/token", { body });
			expect(r.status).toBe(401);
			expect(r.body).toEqual(errorBody(401));
		}
		// None of those consumed the real refresh token.
		expect((await http("POST", "/auth/token", { body: { grant_type: "refresh_token", client_id: p.root.client_id, refresh_token: first.refresh_token } })).status).toBe(200);
	});

	test("a refresh token is not a bearer for APIs → 401", async () => {
		const first = await tokenOf(http, rootLogin());
		for (const [m, path] of [
			["GET", "/content/notes"],
			["GET", "/auth/verify"],
			["GET", "/identity/users"],
		] as const) {
			const r = await http(m, path, { token: first.refresh_token });
			expect(r.status).toBe(401);
			expect(r.body).toEqual(errorBody(401));
		}
		const post = await http("POST", "/content/notes", { token: first.refresh_token, body: { title: "no" } });
		expect(post.status).toBe(401);
	});
});

describe("client_credential grant", () => {
	test("root client: no refresh token, no uid claim, subject is the client", async () => {
		const r = await http("POST", "/auth/token", { body: { grant_type: "client_credential", client_id: p.root.client_id, client_secret: p.root.client_secret } });
		expect(r.status).toBe(200);
		const d = r.body.data;
		expect(d).not.toHaveProperty("refresh_token");
		expect(Object.keys(d).sort()).toEqual(expect.arrayContaining(["access_token", "domain", "expires_in", "scope", "subject", "token_type"]));
		for (const k of Object.keys(d)) expect(["access_token", "domain", "expires_in", "scope", "subject", "token_type", "session", "coworker"]).toContain(k);
		expect(d).toMatchObject({ token_type: "Bearer", expires_in: 900, scope: "whole", domain: "root.local", subject: `${p.root.client_id}@root.local` });
		expect(d.access_token).toMatch(JWT);
		const v = await http("GET", "/auth/verify", { token: d.access_token });
		expect(v.status).toBe(200);
		expect(v.body.data).not.toHaveProperty("uid");
		expect(v.body.data).toMatchObject({ type: "access", cid: p.root.client_id, client_id: p.root.client_id, subject: `${p.root.client_id}@root.local` });
		expect(payloadOf(d.access_token)).not.toHaveProperty("uid");
	});

	test("another client: its scopes, domain and ttl", async () => {
		const d = await tokenOf(http, { grant_type: "client_credential", client_id: acme.id, client_secret: acme.secret, domain: "acme-eu.test", scopes: ["read:content:posts"] });
		expect(d).toMatchObject({ expires_in: 120, scope: "read:content:posts", domain: "acme-eu.test", subject: `${acme.id}@acme-eu.test` });
		expect(d).not.toHaveProperty("refresh_token");
	});

	test("a wrong or foreign client secret → 401 naming the client", async () => {
		for (const secret of ["wrong-secret", acme.secret]) {
			const r = await http("POST", "/auth/token", { body: { grant_type: "client_credential", client_id: p.root.client_id, client_secret: secret } });
			expect(r.status).toBe(401);
			expect(r.body).toEqual(errorBody(401, `client secret is invalid for client ${p.root.client_id}`));
		}
	});
});

describe("authorization_code grant", () => {
	test("password + response_type code → { code, state }; the code is exchanged once", async () => {
		const r = await http("POST", "/auth/token", { body: rootLogin({ response_type: "code", state: "xyz-123" }) });
		expect(r.status).toBe(200);
		expect(Object.keys(r.body.data).sort()).toEqual(["code", "state"]);
		expect(r.body.data.state).toBe("xyz-123");
		const code = r.body.data.code as string;
		expect(typeof code).toBe("string");
		expect(code.length).toBeGreaterThanOrEqual(22);
		// The code lives 60 s in the shared cache (stored under its hash, never in clear).
		const ttl = await ttlOf(kvOf(p), `auth:code:${sha256Hex(code)}`);
		expect(ttl).not.toBeNull();
		expect(ttl!).toBeGreaterThan(50_000);
		expect(ttl!).toBeLessThanOrEqual(60_000);
		expect(await kvOf(p).get(`auth:code:${code}`)).toBeNull();

		const ex = await http("POST", "/auth/token", { body: { grant_type: "authorization_code", client_id: p.root.client_id, code } });
		expect(ex.status).toBe(200);
		const d = ex.body.data;
		expect(d).toMatchObject({ token_type: "Bearer", expires_in: 900, scope: "whole", domain: "root.local" });
		expect(sorted(d.subject)).toEqual([`${p.root.user_id}@root.local`, "root@root.local"].sort());
		expect(d.access_token).toMatch(JWT);
		expect(d.refresh_token).toMatch(JWT);
		expect(d.session).toMatch(HEX24);
		expect((await http("GET", "/auth/verify", { token: d.access_token })).body.data.uid).toBe(p.root.user_id);

		const again = await http("POST", "/auth/token", { body: { grant_type: "authorization_code", client_id: p.root.client_id, code } });
		expect(again.status).toBe(401);
		expect(again.body).toEqual(errorBody(401));
	});

	test("without state the answer is { code } only", async () => {
		const r = await http("POST", "/auth/token", { body: rootLogin({ response_type: "code" }) });
		expect(r.status).toBe(200);
		expect(Object.keys(r.body.data)).toEqual(["code"]);
	});

	test("client_credential + response_type code → code; the exchange gives no refresh token and no uid", async () => {
		const r = await http("POST", "/auth/token", { body: { grant_type: "client_credential", client_id: acme.id, client_secret: acme.secret, response_type: "code", state: "s1" } });
		expect(r.status).toBe(200);
		expect(r.body.data).toEqual({ code: expect.any(String), state: "s1" });
		const d = await tokenOf(http, { grant_type: "authorization_code", client_id: acme.id, code: r.body.data.code });
		expect(d).not.toHaveProperty("refresh_token");
		expect(d).toMatchObject({ domain: "acme.test", subject: `${acme.id}@acme.test`, expires_in: 120 });
		expect(payloadOf(d.access_token)).not.toHaveProperty("uid");
	});

	test("a code presented by another client → 401", async () => {
		const r = await http("POST", "/auth/token", { body: rootLogin({ response_type: "code" }) });
		const ex = await http("POST", "/auth/token", { body: { grant_type: "authorization_code", client_id: acme.id, code: r.body.data.code } });
		expect(ex.status).toBe(401);
		expect(ex.body).toEqual(errorBody(401));
	});

	test("an unknown code → 401; wrong credentials never yield a code", async () => {
		const ex = await http("POST", "/auth/token", { body: { grant_type: "authorization_code", client_id: p.root.client_id, code: "not-a-code-at-all-aaaaaaaaaaaaaaaa" } });
		expect(ex.status).toBe(401);
		const r = await http("POST", "/auth/token", { body: rootLogin({ password: "wrong", response_type: "code" }) });
		expect(r.status).toBe(401);
		expect(r.body).toEqual(errorBody(401, "username or password is invalid"));
	});
});

describe("GET /auth/verify", () => {
	test("claims of a root token: exactly the spec's claims plus iat and exp", async () => {
		const d = await tokenOf(http, rootLogin());
		const v = await http("GET", "/auth/verify", { token: d.access_token });
		expect(v.status).toBe(200);
		expect(Object.keys(v.body)).toEqual(["data"]);
		const c = v.body.data;
		expect(Object.keys(c).sort()).toEqual(CLAIMS);
		expect(c).toEqual({
			type: "access",
			strict: false,
			cid: p.root.client_id,
			uid: p.root.user_id,
			scope: "whole",
			domain: "root.local",
			subject: d.subject,
			tz: expect.any(String),
			lang: expect.any(String),
			session: d.session,
			client_id: p.root.client_id,
			iat: expect.any(Number),
			exp: expect.any(Number),
		});
		expect(c.exp - c.iat).toBe(900);
		expect(Math.abs(c.iat * 1000 - Date.now())).toBeLessThan(10_000);
	});

	test("claims of a user with roles and groups have the same shape", async () => {
		const d = await tokenOf(http, { grant_type: "password", client_id: acme.id, username: "alice", password: ALICE.password });
		const v = await http("GET", "/auth/verify", { token: d.access_token });
		expect(v.status).toBe(200);
		expect(Object.keys(v.body.data).sort()).toEqual(CLAIMS);
		expect(v.body.data).toMatchObject({ type: "access", strict: false, cid: acme.id, client_id: acme.id, uid: alice.id, domain: "acme.test", session: d.session });
		expect(sorted(v.body.data.subject)).toEqual(aliceSubject("acme.test"));
		expect(sorted(v.body.data.scope)).toEqual(sorted(d.scope));
	});

	test("a strict token's claims say strict: true", async () => {
		const d = await tokenOf(http, rootLogin({ strict: true }));
		expect(payloadOf(d.access_token).strict).toBe(true);
		expect(payloadOf(d.refresh_token).strict).toBe(true);
	});
});

test("no response of this suite contained a password, a client secret after creation or a password hash", () => {
	expect(w.count).toBeGreaterThan(50);
	expect(w.leaks()).toEqual([]);
});
