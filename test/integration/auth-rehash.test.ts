/**
 * Stored secrets hashed with weaker parameters than today's (bcrypt below cost 10: imported, or made before a cost
 * raise) still verify, and are stored again with today's at the next successful login (docs/security.md, "Password
 * hashing"), without counting as a change of the user or client: sessions stay open, updated_at is kept.
 */
import bcrypt from "bcryptjs";
import { bootPlatform, type TestPlatform } from "../helpers/platform";
import { errorBody, LeakWatch, tokenOf } from "../helpers/auth";
import { rehashIfWeak } from "../../lib/rehash";

let p: TestPlatform;
let w: LeakWatch;
const PASSWORD = "Rehash-me-123!";
const store = (service: string, collection: string) => (p.broker.getLocalService(service) as any).collectionStore(collection);
const stored = async (service: string, collection: string, id: string) => (await store(service, collection).findOne({ id })) as Record<string, any>;
const login = (password = PASSWORD) => ({ grant_type: "password", client_id: p.root.client_id, username: "rehash-user", password });
let uid: string;

beforeAll(async () => {
	p = await bootPlatform();
	w = new LeakWatch(p);
	w.secret(p.root.password, "root password", true);
	w.secret(p.root.client_secret, "root client secret");
	w.secret(PASSWORD, "user password", true);
	const r = await w.http("POST", "/identity/users", { token: await p.rootToken(), body: { username: "rehash-user", password: PASSWORD } });
	expect(r.status).toBe(200);
	uid = r.body.data.id;
});
afterAll(() => p?.cleanup());

test("a user's cost-4 bcrypt hash lets the password log in and is replaced by a cost-10 hash of it; the session of that login stays open", async () => {
	const weak = bcrypt.hashSync(PASSWORD, 4);
	await store("identity", "users").setOne(uid, { password: weak });
	const before = await stored("identity", "users", uid);
	const { access_token } = await tokenOf(w.http, login());
	const after = await stored("identity", "users", uid);
	expect(after.password).toMatch(/^\$2b\$10\$/);
	expect(bcrypt.compareSync(PASSWORD, after.password)).toBe(true);
	expect(after.updated_at).toBe(before.updated_at);
	expect((await w.http("GET", "/auth/verify", { token: access_token })).status).toBe(200);
	// Today's hash is kept as is by the next login.
	await tokenOf(w.http, login());
	expect((await stored("identity", "users", uid)).password).toBe(after.password);
});

test("a wrong password leaves the weak hash in place (only a verified secret is rehashed)", async () => {
	const weak = bcrypt.hashSync(PASSWORD, 4);
	await store("identity", "users").setOne(uid, { password: weak });
	const r = await w.http("POST", "/auth/token", { body: login("not-the-password"), headers: { "x-forwarded-for": "198.51.100.7" } });
	expect(r.body).toEqual(errorBody(401, "username or password is invalid"));
	expect((await stored("identity", "users", uid)).password).toBe(weak);
	await tokenOf(w.http, login());
	expect((await stored("identity", "users", uid)).password).toMatch(/^\$2b\$10\$/);
});

test("a client's cost-5 secret hash is rehashed at its next client_credential grant", async () => {
	const cid = p.root.client_id;
	await store("domain", "clients").setOne(cid, { secret: bcrypt.hashSync(p.root.client_secret, 5) });
	await tokenOf(w.http, { grant_type: "client_credential", client_id: cid, client_secret: p.root.client_secret });
	const secret = (await stored("domain", "clients", cid)).secret;
	expect(secret).toMatch(/^\$2b\$10\$/);
	expect(bcrypt.compareSync(p.root.client_secret, secret)).toBe(true);
});

test("a password changed between the check and the rehash is never overwritten by the old password's new hash", async () => {
	const weak = bcrypt.hashSync(PASSWORD, 4);
	const changed = bcrypt.hashSync("Changed-456!", 10);
	await store("identity", "users").setOne(uid, { password: changed });
	await expect(rehashIfWeak(store("identity", "users"), uid, "password", PASSWORD, weak)).resolves.toBe(false);
	expect((await stored("identity", "users", uid)).password).toBe(changed);
});

test("no response of this suite contained a password, a client secret or a bcrypt hash", () => {
	expect(w.leaks()).toEqual([]);
});
