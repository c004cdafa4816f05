/**
 * Strict tokens and the `x-api-key` header, through HTTP (spec: The strict flag and x-api-key, ApiToken, Errors;
 * docs/contracts.md "AES values"). Keys are built as a client builds them: base64 of the AES wire form of the JSON.
 */
import { bootPlatform, type TestPlatform } from "../helpers/platform";
import { aesOf, apiKey, errorBody, LeakWatch, tokenOf } from "../helpers/auth";
import { Aes, encryptEnvelope } from "../../lib/crypto";

const NEEDS_KEY = errorBody(403, "strict token must have valid api-key");
const INVALID = errorBody(403, "api-key is not valid");
const WHITELIST = errorBody(403, "ip whitelist validation failed");

let p: TestPlatform;
let w: LeakWatch;
let http: TestPlatform["http"];
let strict: string;
let plain: string;

const inAnHour = () => new Date(Date.now() + 3600_000).toISOString();
const rootLogin = (extra: Record<string, unknown> = {}) => ({
	grant_type: "password",
	client_id: p.root.client_id,
	username: p.root.username,
	password: p.root.password,
	...extra,
});
/** A valid ApiToken for the root client, with changes. */
const key = (changes: Record<string, unknown> = {}) => apiKey(p, { cid: p.root.client_id, client_id: p.root.client_id, expiration_date: inAnHour(), ...changes });

beforeAll(async () => {
	p = await bootPlatform();
	w = new LeakWatch(p);
	http = w.http;
	w.secret(p.root.password, "root password", true);
	w.secret(p.root.client_secret, "root client secret");
	strict = (await tokenOf(http, rootLogin({ strict: true }))).access_token;
	plain = (await tokenOf(http, rootLogin())).access_token;
});
afterAll(() => p.cleanup());

describe("a strict JWT", () => {
	test("without x-api-key → 403 strict token must have valid api-key", async () => {
		for (const [m, path] of [
			["GET", "/auth/verify"],
			["GET", "/content/notes"],
			["POST", "/content/notes"],
			["POST", "/auth/check"],
			["GET", "/auth/logout"],
		] as const) {
			const r = await http(m, path, { token: strict, ...(m === "POST" ? { body: { title: "x" } } : {}) });
			expect({ path, status: r.status }).toEqual({ path, status: 403 });
			expect(r.body).toEqual(NEEDS_KEY);
		}
		// An empty header is no key either.
		expect((await http("GET", "/auth/verify", { token: strict, headers: { "x-api-key": "" } })).body).toEqual(NEEDS_KEY);
	});

	test("with a valid key → 200 (expiration_date as ISO string or Unix milliseconds)", async () => {
		for (const k of [key(), key({ expiration_date: Date.now() + 60_000 }), key({ whitelist: [] }), key({ whitelist: null })]) {
			const v = await http("GET", "/auth/verify", { token: strict, headers: { "x-api-key": k } });
			expect(v.status).toBe(200);
			expect(v.body.data.strict).toBe(true);
		}
		const c = await http("POST", "/content/notes", { token: strict, headers: { "x-api-key": key() }, body: { title: "strict" } });
		expect(c.status).toBe(200);
		expect((await http("GET", `/content/notes/${c.body.data.id}`, { token: strict, headers: { "x-api-key": key() } })).status).toBe(200);
	});

	test("a malformed key → 403 api-key is not valid", async () => {
		const aes = new Aes("a-different-aes-secret");
		const good = key();
		const wire = Buffer.from(good, "base64").toString("utf8");
		const [iv, body] = wire.split(".");
		const flipped = Buffer.from(body, "base64url");
		flipped[0] ^= 0xff;
		const malformed: Array<[string, string]> = [
			["garbage", "garbage"],
			["base64 of garbage", Buffer.from("hello world").toString("base64")],
			["JSON in clear", Buffer.from(JSON.stringify({ cid: p.root.client_id, client_id: p.root.client_id, expiration_date: inAnHour() })).toString("base64")],
			["encrypted under another key", encryptEnvelope(aes, JSON.stringify({ cid: p.root.client_id, client_id: p.root.client_id, expiration_date: inAnHour() }))],
			["tampered ciphertext", Buffer.from(`${iv}.${flipped.toString("base64url")}`).toString("base64")],
			["truncated", good.slice(0, -8)],
			["not JSON inside", encryptEnvelope(aesOf(p), "not json")],
			["a JSON number inside", encryptEnvelope(aesOf(p), "42")],
			["JSON null inside", encryptEnvelope(aesOf(p), "null")],
		];
		for (const [name, k] of malformed) {
			const r = await http("GET", "/auth/verify", { token: strict, headers: { "x-api-key": k } });
			expect({ name, status: r.status }).toEqual({ name, status: 403 });
			expect(r.body).toEqual(INVALID);
		}
	});

	test("cid or client_id mismatch, expired, missing or invalid expiration_date → 403 api-key is not valid", async () => {
		const other = "0123456789abcdef01234567";
		const cases: Array<[string, string]> = [
			["cid mismatch", key({ cid: other })],
			["client_id mismatch", key({ client_id: other })],
			["both mismatch", key({ cid: other, client_id: other })],
			["cid missing", apiKey(p, { client_id: p.root.client_id, expiration_date: inAnHour() })],
			["client_id missing", apiKey(p, { cid: p.root.client_id, expiration_date: inAnHour() })],
			["expired (ISO)", key({ expiration_date: new Date(Date.now() - 1000).toISOString() })],
			["expired (ms)", key({ expiration_date: Date.now() - 1000 })],
			["expiration_date missing", apiKey(p, { cid: p.root.client_id, client_id: p.root.client_id })],
			["expiration_date not a date", key({ expiration_date: "someday" })],
			["whitelist not an array", key({ whitelist: "127.0.0.1" })],
			["whitelist with an invalid entry", key({ whitelist: ["not-an-ip"] })],
		];
		for (const [name, k] of cases) {
			const r = await http("GET", "/auth/verify", { token: strict, headers: { "x-api-key": k } });
			expect({ name, status: r.status }).toEqual({ name, status: 403 });
			expect(r.body).toEqual(INVALID);
		}
	});

	test("whitelist: the caller (127.0.0.1) must be in it", async () => {
		const outside: string[][] = [["10.0.0.0/8"], ["127.0.0.2"], ["192.168.1.1", "10.1.2.3/32"], ["::1"], ["::1", "2001:db8::/32"], ["fe80::/10"]];
		for (const whitelist of outside) {
			const r = await http("GET", "/auth/verify", { token: strict, headers: { "x-api-key": key({ whitelist }) } });
			expect({ whitelist, status: r.status }).toEqual({ whitelist, status: 403 });
			expect(r.body).toEqual(WHITELIST);
		}
		const inside: string[][] = [
			["127.0.0.0/8"],
			["127.0.0.1"],
			["127.0.0.1/32"],
			["10.0.0.0/8", "127.0.0.0/24"],
			["::1", "2001:db8::/32", "127.0.0.1"],
			["::ffff:127.0.0.1"],
			["::ffff:127.0.0.0/104"],
			["0.0.0.0/0"],
		];
		for (const whitelist of inside) {
			const r = await http("GET", "/auth/verify", { token: strict, headers: { "x-api-key": key({ whitelist }) } });
			expect({ whitelist, status: r.status }).toEqual({ whitelist, status: 200 });
		}
	});

	test("a revoked or invalid token is refused (401) before the api-key is looked at", async () => {
		const t = (await tokenOf(http, rootLogin({ strict: true }))).access_token;
		expect((await http("GET", "/auth/logout", { token: t, headers: { "x-api-key": key() } })).body).toEqual({ result: "OK" });
		for (const headers of <Array<Record<string, string>>>[{}, { "x-api-key": key() }, { "x-api-key": "garbage" }]) {
			const r = await http("GET", "/auth/verify", { token: t, headers });
			expect(r.status).toBe(401);
		}
		expect((await http("GET", "/auth/verify", { token: t.slice(0, -4), headers: { "x-api-key": key() } })).status).toBe(401);
	});

	test("a strict client_credential token and a strict refresh", async () => {
		const cc = (await tokenOf(http, { grant_type: "client_credential", client_id: p.root.client_id, client_secret: p.root.client_secret, strict: true })).access_token;
		expect((await http("GET", "/auth/verify", { token: cc })).body).toEqual(NEEDS_KEY);
		expect((await http("GET", "/auth/verify", { token: cc, headers: { "x-api-key": key() } })).status).toBe(200);
		const first = await tokenOf(http, rootLogin({ strict: true }));
		const next = await tokenOf(http, { grant_type: "refresh_token", client_id: p.root.client_id, refresh_token: first.refresh_token });
		expect((await http("GET", "/auth/verify", { token: next.access_token })).body).toEqual(NEEDS_KEY);
		expect((await http("GET", "/auth/verify", { token: next.access_token, headers: { "x-api-key": key() } })).body.data.strict).toBe(true);
	});
});

describe("a strict APT", () => {
	test("needs the key too", async () => {
		const r = await w.revealing("POST", "/auth/apts", { token: plain, body: { name: "strict apt", strict: true } });
		expect(r.status).toBe(200);
		expect(r.body.data.strict).toBe(true);
		const apt = r.body.data.token as string;
		w.secret(apt, "APT");
		expect((await http("GET", "/auth/verify", { token: apt })).body).toEqual(NEEDS_KEY);
		expect((await http("GET", "/content/notes", { token: apt, headers: { "x-api-key": "garbage" } })).body).toEqual(INVALID);
		expect((await http("GET", "/content/notes", { token: apt, headers: { "x-api-key": key({ whitelist: ["10.0.0.0/8"] }) } })).body).toEqual(WHITELIST);
		const v = await http("GET", "/auth/verify", { token: apt, headers: { "x-api-key": key() } });
		expect(v.status).toBe(200);
		expect(v.body.data.strict).toBe(true);
		expect((await http("GET", "/content/notes", { token: apt, headers: { "x-api-key": key() } })).status).toBe(200);
	});
});

test("x-api-key is ignored for non-strict tokens", async () => {
	for (const k of ["garbage", key({ cid: "0123456789abcdef01234567" }), key({ expiration_date: 1 }), key({ whitelist: ["10.0.0.0/8"] })]) {
		expect((await http("GET", "/auth/verify", { token: plain, headers: { "x-api-key": k } })).status).toBe(200);
		expect((await http("GET", "/content/notes", { token: plain, headers: { "x-api-key": k } })).status).toBe(200);
	}
});

test("no response of this suite contained a password, a client secret, an APT after creation or a password hash", () => {
	expect(w.count).toBeGreaterThan(40);
	expect(w.leaks()).toEqual([]);
});
