/**
 * Stored secrets hashed with weaker parameters than today's (bcrypt hashes of earlier versions, argon2id below today's
 * memory or passes) still verify, and are stored again as argon2id with today's parameters at the next successful login
 * (docs/security.md, "Password hashing"), without counting as a change of the user or client: sessions stay open,
 * updated_at is kept. A stored value that is no hash at all refuses the login (401), never a 500.
 */
import * as argon2 from "@node-rs/argon2";
import bcrypt from "bcryptjs";
import { bootPlatform, type TestPlatform } from "../helpers/platform";
import { errorBody, LeakWatch, tokenOf } from "../helpers/auth";
import { rehashIfWeak } from "../../runtime/rehash";

let p: TestPlatform;
let w: LeakWatch;
const PASSWORD = "Rehash-me-123!";
const TODAY = /^\$argon2id\$v=19\$m=19456,t=2,p=1\$[A-Za-z0-9+/]{22}\$[A-Za-z0-9+/]{43}$/;
const INVALID = errorBody(401, "username or password is invalid");
const BAD_SECRET = (cid: string) => errorBody(401, `client secret is invalid for client ${cid}`);
const store = (service: string, collection: string) => (p.broker.getLocalService(service) as any).collectionStore(collection);
const stored = async (service: string, collection: string, id: string) => (await store(service, collection).findOne({ id })) as Record<string, any>;
const login = (password = PASSWORD) => ({ grant_type: "password", client_id: p.root.client_id, username: "rehash-user", password });
// Each refused attempt from an address of its own (TRUST_PROXY), so the failed-login limit never answers instead.
let ip = 0;
const attempt = (body: Record<string, unknown>) => w.http("POST", "/auth/token", { body, headers: { "x-forwarded-for": `198.51.100.${++ip}` } });
let uid: string;

beforeAll(async () => {
	p = await bootPlatform({ trustProxy: true });
	w = new LeakWatch(p);
	w.secret(p.root.password, "root password", true);
	w.secret(p.root.client_secret, "root client secret");
	w.secret(PASSWORD, "user password", true);
	const r = await w.http("POST", "/identity/users", { token: await p.rootToken(), body: { username: "rehash-user", password: PASSWORD } });
	expect(r.status).toBe(200);
	uid = r.body.data.id;
});
afterAll(() => p?.cleanup());

test("a user created through the API is stored with an argon2id hash of today's parameters", async () => {
	const hash = (await stored("identity", "users", uid)).password;
	expect(hash).toMatch(TODAY);
	await expect(argon2.verify(hash, PASSWORD)).resolves.toBe(true);
});

test("a user's bcrypt hash of an earlier version (cost 10) logs in and is replaced by today's argon2id hash of the same password; the session stays open", async () => {
	const legacy = bcrypt.hashSync(PASSWORD, 10);
	await store("identity", "users").setOne(uid, { password: legacy });
	const before = await stored("identity", "users", uid);
	const { access_token } = await tokenOf(w.http, login());
	const after = await stored("identity", "users", uid);
	expect(after.password).toMatch(TODAY);
	await expect(argon2.verify(after.password, PASSWORD)).resolves.toBe(true);
	expect(after.updated_at).toBe(before.updated_at);
	expect((await w.http("GET", "/auth/verify", { token: access_token })).status).toBe(200);
	// The password still logs in against the new hash, which the next login keeps as it is; a wrong one does not.
	await tokenOf(w.http, login());
	expect((await stored("identity", "users", uid)).password).toBe(after.password);
	expect((await attempt(login("Rehash-me-124!"))).body).toEqual(INVALID);
});

test("a wrong password leaves the bcrypt hash in place (only a verified secret is rehashed)", async () => {
	const legacy = bcrypt.hashSync(PASSWORD, 4);
	await store("identity", "users").setOne(uid, { password: legacy });
	expect((await attempt(login("not-the-password"))).body).toEqual(INVALID);
	expect((await stored("identity", "users", uid)).password).toBe(legacy);
	await tokenOf(w.http, login());
	expect((await stored("identity", "users", uid)).password).toMatch(TODAY);
});

test("an argon2id hash below today's memory and passes (4 MiB, t=1) is upgraded to today's at the next login", async () => {
	const weak = await argon2.hash(PASSWORD, { algorithm: argon2.Algorithm.Argon2id, memoryCost: 4096, timeCost: 1, parallelism: 1 });
	await store("identity", "users").setOne(uid, { password: weak });
	expect((await attempt(login("not-the-password"))).body).toEqual(INVALID);
	expect((await stored("identity", "users", uid)).password).toBe(weak);
	await tokenOf(w.http, login());
	const after = (await stored("identity", "users", uid)).password;
	expect(after).toMatch(TODAY);
	await expect(argon2.verify(after, PASSWORD)).resolves.toBe(true);
});

test("a client's bcrypt secret hash is rehashed to argon2id at its next client_credential grant; a wrong secret neither logs in nor rehashes", async () => {
	const cid = p.root.client_id;
	const legacy = bcrypt.hashSync(p.root.client_secret, 10);
	await store("domain", "clients").setOne(cid, { secret: legacy });
	expect((await attempt({ grant_type: "client_credential", client_id: cid, client_secret: p.root.client_secret + "x" })).body).toEqual(BAD_SECRET(cid));
	expect((await stored("domain", "clients", cid)).secret).toBe(legacy);
	await tokenOf(w.http, { grant_type: "client_credential", client_id: cid, client_secret: p.root.client_secret });
	const secret = (await stored("domain", "clients", cid)).secret;
	expect(secret).toMatch(TODAY);
	await expect(argon2.verify(secret, p.root.client_secret)).resolves.toBe(true);
	await tokenOf(w.http, { grant_type: "client_credential", client_id: cid, client_secret: p.root.client_secret });
});

test("a stored password or client secret that is no hash (garbage, empty, an absurd argon2id) answers 401, not 500, and stays as it is", async () => {
	const good = (await stored("identity", "users", uid)).password;
	const cid = p.root.client_id;
	const goodSecret = (await stored("domain", "clients", cid)).secret;
	try {
		for (const junk of ["garbage", "", PASSWORD, good.replace("m=19456", "m=4194304"), "$2b$10$short"]) {
			await store("identity", "users").setOne(uid, { password: junk });
			expect((await attempt(login())).body).toEqual(INVALID);
			expect((await stored("identity", "users", uid)).password).toBe(junk);
			await store("domain", "clients").setOne(cid, { secret: junk });
			expect((await attempt({ grant_type: "client_credential", client_id: cid, client_secret: p.root.client_secret })).body).toEqual(BAD_SECRET(cid));
		}
	} finally {
		await store("identity", "users").setOne(uid, { password: good });
		await store("domain", "clients").setOne(cid, { secret: goodSecret });
	}
	await tokenOf(w.http, login());
});

test("a password changed between the check and the rehash is never overwritten by the old password's new hash", async () => {
	const weak = bcrypt.hashSync(PASSWORD, 4);
	const changed = await argon2.hash("Changed-456!", { algorithm: argon2.Algorithm.Argon2id, memoryCost: 19456, timeCost: 2, parallelism: 1 });
	await store("identity", "users").setOne(uid, { password: changed });
	await expect(rehashIfWeak(store("identity", "users"), uid, "password", PASSWORD, weak)).resolves.toBe(false);
	expect((await stored("identity", "users", uid)).password).toBe(changed);
});

test("no response of this suite contained a password, a client secret or a password hash", () => {
	expect(w.leaks()).toEqual([]);
});
