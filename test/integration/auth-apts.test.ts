/**
 * Personal tokens (APTs): creation, secrecy, use as bearer, revocation, expiry and the encrypted cache entry,
 * through HTTP (spec: APT record, Token kinds, Request validation order, Session and token lifecycle;
 * docs/contracts.md "AES values", "Tokens and sessions").
 */
import { bootPlatform, type TestPlatform } from "../helpers/platform";
import { aesOf, errorBody, kvOf, LeakWatch, sleep, tokenOf } from "../helpers/auth";
import { sha256Hex } from "../../lib/crypto";

const CLAIMS = ["type", "strict", "cid", "uid", "scope", "domain", "subject", "tz", "lang", "session", "client_id", "iat", "exp"].sort();
const DAY = 24 * 3600 * 1000;
const WIRE = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/;

let p: TestPlatform;
let w: LeakWatch;
let http: TestPlatform["http"];
let root: { access_token: string; session: string; subject: string };

const suffixOf = (apt: string) => apt.slice(4);

/** Creates an APT with the root JWT (the one response allowed to show it) and registers it as a secret. */
async function createApt(body: Record<string, unknown>, token = root.access_token) {
	const r = await w.revealing("POST", "/auth/apts", { token, body });
	if (r.status === 200) {
		w.secret(r.body.data.token, "APT");
		w.secret(suffixOf(r.body.data.token), "APT suffix");
	}
	return r;
}

beforeAll(async () => {
	p = await bootPlatform();
	w = new LeakWatch(p);
	http = w.http;
	w.secret(p.root.password, "root password", true);
	w.secret(p.root.client_secret, "root client secret");
	root = (await tokenOf(http, { grant_type: "password", client_id: p.root.client_id, username: p.root.username, password: p.root.password })) as any;
});
afterAll(() => p.cleanup());

describe("creating an APT", () => {
	test("with a JWT: APT- plus at least 128 bits, default expiry 90 days, only in the create response", async () => {
		const before = Date.now();
		const r = await createApt({ name: "ci pipeline" });
		expect(r.status).toBe(200);
		const d = r.body.data;
		expect(d).toMatchObject({ name: "ci pipeline", scopes: ["whole"], strict: false });
		expect(d.id).toMatch(/^[0-9a-f]{24}$/);
		expect(d.token).toMatch(/^APT-[A-Za-z0-9_-]{22,}$/);
		expect(Number.isNaN(Date.parse(d.created_at))).toBe(false);
		expect([...d.subjects].sort()).toEqual(root.subject.split(" ").sort());
		expect(d.expires_at).toBeGreaterThanOrEqual(before + 90 * DAY);
		expect(d.expires_at).toBeLessThanOrEqual(Date.now() + 90 * DAY);
		// The record's internals never leave, not even at creation.
		for (const k of ["claims", "session"]) expect(d).not.toHaveProperty(k);
		expect(r.text).not.toContain(sha256Hex(suffixOf(d.token)));
		// Two APTs never share a token.
		const other = await createApt({ name: "second" });
		expect(other.body.data.token).not.toBe(d.token);
	});

	test("list and read never show the token, its hash, claims or session", async () => {
		const r = await createApt({ name: "hidden" });
		const { id, token } = r.body.data;
		const hash = sha256Hex(suffixOf(token));
		const reads = [
			await http("GET", `/auth/apts/${id}`, { token: root.access_token }),
			await http("GET", "/auth/apts", { token: root.access_token }),
			await http("GET", "/auth/apts/cursor", { token: root.access_token, headers: { accept: "text/event-stream" } }),
		];
		for (const g of reads) {
			expect(g.status).toBe(200);
			expect(g.text).not.toContain(suffixOf(token));
			expect(g.text).not.toContain(hash);
			expect(g.text).not.toMatch(/"(token|claims|session)"/);
		}
		// Internal fields cannot even be named in a projection (docs/contracts.md "Fields that are never queried").
		const projected = await http("GET", `/auth/apts?projection=${encodeURIComponent(JSON.stringify({ token: 1, claims: 1, session: 1, name: 1 }))}`, { token: root.access_token });
		expect(projected.status).toBe(403);
		expect(projected.body).toEqual({ statusCode: 403, message: "projection field token is not allowed", error: "Forbidden" });
		expect(reads[0].body.data).toMatchObject({ id, name: "hidden", scopes: ["whole"], strict: false });
		expect(reads[1].body.items.map((a: any) => a.id)).toContain(id);
	});

	test("an explicit expires_at is kept; a past or invalid one → 400", async () => {
		const at = Date.now() + 3600_000;
		const r = await createApt({ name: "one hour", expires_at: at });
		expect(r.status).toBe(200);
		expect(r.body.data.expires_at).toBe(at);
		expect((await http("GET", `/auth/apts/${r.body.data.id}`, { token: root.access_token })).body.data.expires_at).toBe(at);
		for (const expires_at of [Date.now() - 1000, 0, "tomorrow"]) {
			const bad = await createApt({ name: "past", expires_at });
			expect(bad.status).toBe(400);
			expect(bad.body).toEqual(errorBody(400));
			expect(bad.body.message).toMatch(/expires_at/);
		}
	});

	test("only name is required; unknown fields and wrong types → 400 naming the field", async () => {
		const cases: Array<[Record<string, unknown>, string]> = [
			[{}, "name"],
			[{ scopes: ["whole"] }, "name"],
			[{ name: "x", strict: "yes" }, "strict"],
			[{ name: "x", scopes: "whole" }, "scopes"],
			[{ name: "x", colour: "red" }, "colour"],
			[{ name: "x", token: "APT-chosen-by-the-caller-aaaaaaaaaa" }, "token"],
		];
		for (const [body, field] of cases) {
			const r = await createApt(body);
			expect({ body, status: r.status }).toEqual({ body, status: 400 });
			expect(r.body.message).toContain(field);
		}
	});

	test("creating with an APT bearer → 403", async () => {
		const apt = (await createApt({ name: "parent" })).body.data.token;
		const r = await createApt({ name: "child" }, apt);
		expect(r.status).toBe(403);
		expect(r.body).toEqual(errorBody(403));
	});

	test("scopes or subjects the creating token does not hold → 403", async () => {
		const narrow = await tokenOf(http, {
			grant_type: "password",
			client_id: p.root.client_id,
			username: p.root.username,
			password: p.root.password,
			scopes: ["read:content:notes", "write:auth:apts"],
		});
		const ok = await createApt({ name: "narrow", scopes: ["read:content:notes"] }, narrow.access_token);
		expect(ok.status).toBe(200);
		expect((await createApt({ name: "wider", scopes: ["manage:content"] }, narrow.access_token)).status).toBe(403);
		expect((await createApt({ name: "foreign", subjects: ["@admin@root.local"] })).status).toBe(403);
	});
});

describe("using an APT", () => {
	test("as bearer on /auth/verify: the same claims shape as a JWT", async () => {
		const { token } = (await createApt({ name: "verify" })).body.data;
		const jwtClaims = (await http("GET", "/auth/verify", { token: root.access_token })).body.data;
		const v = await http("GET", "/auth/verify", { token });
		expect(v.status).toBe(200);
		expect(Object.keys(v.body.data).sort()).toEqual(CLAIMS);
		expect(Object.keys(v.body.data).sort()).toEqual(Object.keys(jwtClaims).sort());
		expect(v.body.data).toMatchObject({
			type: "access",
			strict: false,
			cid: p.root.client_id,
			client_id: p.root.client_id,
			uid: p.root.user_id,
			scope: "whole",
			domain: "root.local",
			subject: jwtClaims.subject,
		});
		expect(v.body.data.session).toMatch(/^[0-9a-f]{24}$/);
		expect(v.body.data.session).not.toBe(root.session);
		expect(typeof v.body.data.iat).toBe("number");
		expect(v.body.data.exp - v.body.data.iat).toBeGreaterThan(89 * 24 * 3600);
	});

	test("as bearer on APIs (header, query and cookie), with its scopes", async () => {
		const { token } = (await createApt({ name: "api" })).body.data;
		const c = await http("POST", "/content/notes", { token, body: { title: "by apt" } });
		expect(c.status).toBe(200);
		expect(c.body.data.owner).toBe(p.root.user_id);
		expect((await http("GET", `/content/notes/${c.body.data.id}`, { token })).status).toBe(200);
		expect((await http("GET", `/content/notes?token=${encodeURIComponent(token)}`)).body.total).toBeGreaterThanOrEqual(1);
		expect((await http("GET", "/content/notes", { headers: { cookie: `authorization=${token}` } })).status).toBe(200);

		const ro = (await createApt({ name: "read only", scopes: ["read:content:notes"] })).body.data.token;
		expect((await http("GET", "/content/notes", { token: ro })).status).toBe(200);
		expect((await http("POST", "/content/notes", { token: ro, body: { title: "no" } })).status).toBe(403);
		expect((await http("GET", "/identity/users", { token: ro })).status).toBe(403);
		expect((await http("GET", "/auth/verify", { token: ro })).body.data.scope).toBe("read:content:notes");
	});

	test("an unknown APT, or one with a modified suffix → 401", async () => {
		const { token } = (await createApt({ name: "forged" })).body.data;
		const last = token.slice(-1) === "A" ? "B" : "A";
		for (const t of [`${token.slice(0, -1)}${last}`, `APT-${"a".repeat(43)}`, "APT-", "APT-short", `APT-${suffixOf(token)}!`]) {
			const r = await http("GET", "/auth/verify", { token: t });
			expect({ t, status: r.status }).toEqual({ t, status: 401 });
			expect(r.body).toEqual(errorBody(401));
		}
	});
});

describe("revocation and expiry", () => {
	test("DELETE /auth/apts/:id → later use gives 401 immediately", async () => {
		const { id, token } = (await createApt({ name: "revoke me" })).body.data;
		// Used (and so cached by the gateway) before the revocation.
		expect((await http("GET", "/auth/verify", { token })).status).toBe(200);
		expect((await http("GET", "/content/notes", { token })).status).toBe(200);
		const del = await http("DELETE", `/auth/apts/${id}`, { token: root.access_token });
		expect(del.status).toBe(200);
		expect(del.text).not.toContain(suffixOf(token));
		for (const [m, path] of [
			["GET", "/auth/verify"],
			["GET", "/content/notes"],
		] as const) {
			const r = await http(m, path, { token });
			expect({ path, status: r.status }).toEqual({ path, status: 401 });
			expect(r.body).toEqual(errorBody(401));
		}
		expect((await http("GET", `/auth/apts/${id}`, { token: root.access_token })).status).toBe(404);
		// Losing the cache does not bring it back.
		await kvOf(p).del(`auth:apt:${suffixOf(token)}`);
		expect((await http("GET", "/auth/verify", { token })).status).toBe(401);
	});

	test("an APT may revoke itself", async () => {
		const { id, token } = (await createApt({ name: "self" })).body.data;
		expect((await http("DELETE", `/auth/apts/${id}`, { token })).status).toBe(200);
		expect((await http("GET", "/auth/verify", { token })).status).toBe(401);
	});

	test("logout with an APT ends it; the creator's JWT session is unaffected, and the other way round", async () => {
		const { token } = (await createApt({ name: "logout" })).body.data;
		const out = await http("GET", "/auth/logout", { token });
		expect(out.body).toEqual({ result: "OK" });
		expect((await http("GET", "/auth/verify", { token })).status).toBe(401);
		expect((await http("GET", "/auth/logout", { token })).body).toEqual({ result: "OK" });
		expect((await http("GET", "/auth/verify", { token: root.access_token })).status).toBe(200);

		// An APT has its own session: logging out the JWT that created it leaves it working.
		const jwt = await tokenOf(http, { grant_type: "password", client_id: p.root.client_id, username: p.root.username, password: p.root.password });
		const apt = (await createApt({ name: "outlives" }, jwt.access_token)).body.data.token;
		expect((await http("GET", "/auth/logout", { token: jwt.access_token })).body).toEqual({ result: "OK" });
		expect((await http("GET", "/auth/verify", { token: jwt.access_token })).status).toBe(401);
		expect((await http("GET", "/auth/verify", { token: apt })).status).toBe(200);
	});

	test("an APT whose expires_at passed → 401", async () => {
		const expiresAt = Date.now() + 1500;
		const { token } = (await createApt({ name: "short", expires_at: expiresAt })).body.data;
		// Works until then (a refusal is only acceptable if the clock really passed expires_at on a loaded machine).
		for (const path of ["/auth/verify", "/content/notes"]) {
			const r = await http("GET", path, { token });
			expect({ path, ok: r.status === 200 || (r.status === 401 && Date.now() >= expiresAt) }).toEqual({ path, ok: true });
		}
		await sleep(Math.max(0, expiresAt - Date.now()) + 100);
		for (const [m, path] of [
			["GET", "/auth/verify"],
			["GET", "/content/notes"],
		] as const) {
			const r = await http(m, path, { token });
			expect({ path, status: r.status }).toEqual({ path, status: 401 });
			expect(r.body).toEqual(errorBody(401));
		}
		// Not resurrected from the document store either.
		await kvOf(p).del(`auth:apt:${suffixOf(token)}`);
		expect((await http("GET", "/auth/verify", { token })).status).toBe(401);
	});
});

describe("the cache entry auth:apt:<suffix>", () => {
	test("is AES wire form, not plaintext, and decrypts to the APT's claims", async () => {
		const { id, token } = (await createApt({ name: "cached" })).body.data;
		const raw = await kvOf(p).get(`auth:apt:${suffixOf(token)}`);
		expect(raw).not.toBeNull();
		expect(raw!).toMatch(WIRE);
		expect(raw!.startsWith("{")).toBe(false);
		expect(raw!).not.toContain(p.root.user_id);
		expect(raw!).not.toContain("whole");
		const [iv, body] = raw!.split(".");
		expect(Buffer.from(iv, "base64url").length).toBe(12);
		expect(Buffer.from(body, "base64url").length).toBeGreaterThan(16);
		const plain = aesOf(p).decrypt(raw!);
		expect(plain).not.toBeNull();
		const rec = JSON.parse(plain!);
		expect(rec.id).toBe(id);
		expect(rec.claims).toMatchObject({ type: "access", uid: p.root.user_id, cid: p.root.client_id, scope: "whole" });
	});

	test("cache loss: with the entry deleted the APT still works (resolved from the store) and is cached again", async () => {
		const { token } = (await createApt({ name: "cache loss" })).body.data;
		const key = `auth:apt:${suffixOf(token)}`;
		await kvOf(p).del(key);
		expect(await kvOf(p).get(key)).toBeNull();
		const v = await http("GET", "/auth/verify", { token });
		expect(v.status).toBe(200);
		expect(v.body.data.uid).toBe(p.root.user_id);
		expect((await http("POST", "/content/notes", { token, body: { title: "after cache loss" } })).status).toBe(200);
		const again = await kvOf(p).get(key);
		expect(again).not.toBeNull();
		expect(again!).toMatch(WIRE);
		expect(aesOf(p).decrypt(again!)).not.toBeNull();
	});
});

test("no response of this suite contained a password, a client secret, an APT after creation or a password hash", () => {
	expect(w.count).toBeGreaterThan(40);
	expect(w.leaks()).toEqual([]);
});
