/**
 * Issue 8 "Tenant boundary" (items 1, 5, 6, 8; docs/contracts.md "Tenants"): two tenants set up through the API by the
 * operator, then every reproduced attack, each asserted to fail with its exact answer, and the positive paths.
 *
 * Tenants: client A (a.example), client B (b.example), client C (c.example, lists A as a coworker). Each tenant's admin
 * is created by a client_credential token of its client (so the user belongs to that tenant) and granted by the
 * operator; ordinary users are created by the admins.
 */
import { bootPlatform, type TestPlatform } from "../helpers/platform";
import { readConfig } from "../../runtime/config";
import { clearLoginFailures, createClient, errorBody as authErrorBody, kvOf, payloadOf, tokenOf } from "../helpers/auth";
import { GROUP_RULE } from "../../lib/validate";

function errorBody(status: number, message: string) {
	return status === 409 ? { statusCode: 409, message, error: "Conflict" } : authErrorBody(status, message);
}

let p: TestPlatform;
let http: TestPlatform["http"];
let root: string;

interface Tenant {
	id: string;
	secret: string;
	domain: string;
	adminId: string;
	admin: string;
}
let A: Tenant;
let B: Tenant;
let C: { id: string; secret: string };
let alice: { id: string };
let bob: { id: string };

const PASSWORD = "Tenant-Pass-123!";
const ADMIN_OBJECTS = ["identity:users", "domain:clients", "auth:grants", "auth:apts", "context:configs", "content:notes"];

async function ok(r: Promise<{ status: number; text: string; body: any }>, what: string): Promise<any> {
	const res = await r;
	if (res.status !== 200) throw new Error(`${what}: ${res.status} ${res.text}`);
	return res.body;
}

function grant(token: string, subject: string, action: string, object: string) {
	return ok(http("POST", "/auth/grants", { token, body: { subject, action, object } }), `grant ${subject} ${action} ${object}`);
}

function login(clientId: string, username: string, password = PASSWORD, extra: Record<string, unknown> = {}) {
	return http("POST", "/auth/token", { body: { grant_type: "password", client_id: clientId, username, password, ...extra } });
}

async function tenant(name: string, domain: string): Promise<Tenant> {
	const c = await createClient(http, root, { name, domains: [domain], scopes: ["whole"] });
	// The operator grants the client itself user management in its own domain (a domain that is not root's).
	await grant(root, `${c.id}@${domain}`, "manage", "identity:users");
	const cc = (await tokenOf(http, { grant_type: "client_credential", client_id: c.id, client_secret: c.secret })).access_token;
	const admin = (await ok(http("POST", "/identity/users", { token: cc, body: { username: "admin", password: PASSWORD } }), `${name} admin`)).data;
	for (const o of ADMIN_OBJECTS) await grant(root, `${admin.id}@${domain}`, "manage", o);
	const token = (await ok(login(c.id, "admin"), `${name} admin login`)).data.access_token;
	return { id: c.id, secret: c.secret, domain, adminId: admin.id, admin: token };
}

function createUser(token: string, body: Record<string, unknown>) {
	return http("POST", "/identity/users", { token, body: { password: PASSWORD, ...body } });
}

beforeAll(async () => {
	p = await bootPlatform();
	http = p.http;
	root = await p.rootToken();
	A = await tenant("tenant-a", "a.example");
	B = await tenant("tenant-b", "b.example");
	const c = await createClient(http, root, { name: "tenant-c", domains: ["c.example"], scopes: ["whole"], coworkers: [A.id] });
	C = { id: c.id, secret: c.secret };
	alice = (await ok(createUser(A.admin, { username: "alice", email: "alice@mail.test", phone: "+15550001111" }), "alice")).data;
	bob = (await ok(createUser(B.admin, { username: "bob" }), "bob")).data;
}, 120_000);

afterAll(async () => {
	await p?.cleanup();
});

beforeEach(() => clearLoginFailures(p));

describe("item 1: a user logs in only through its tenant's client (or a client listing the tenant as a coworker)", () => {
	test("the admin of B cannot create a user named after A's admin id (24-hex)", async () => {
		const r = await createUser(B.admin, { username: A.adminId });
		expect(r.status).toBe(400);
		expect(r.body).toEqual(errorBody(400, "username: must not be a 24-hex id"));
	});

	test("a username with spaces (extra subjects) or an @ is refused", async () => {
		for (const username of [`${p.root.user_id}@root.local pad`, "alice@mail.test", "Alice", "ab"]) {
			const r = await createUser(B.admin, { username });
			expect(r.status).toBe(400);
			expect(r.body).toEqual(errorBody(400, "username: must match ^[a-z0-9][a-z0-9._-]{2,63}$"));
		}
		// The same on a patch.
		const r = await http("PATCH", `/identity/users/${bob.id}`, { token: B.admin, body: { username: `${A.adminId}` } });
		expect(r.body).toEqual(errorBody(400, "username: must not be a 24-hex id"));
	});

	test("B's user with A's role logs in through A's client: 401, counted as a failed login", async () => {
		const spy = (await ok(createUser(B.admin, { username: "spy", subjects: ["@editor"] }), "spy")).data;
		expect(spy.subjects).toEqual(["@editor"]);
		const r = await login(A.id, "spy");
		expect(r.status).toBe(401);
		expect(r.body).toEqual(errorBody(401, "username or password is invalid"));
		// On A's client (the client the login went through), from this IP.
		expect(await kvOf(p).get(`auth:fail:ip:${A.id}:127.0.0.1`)).toBe("1");
		// Through its own client the same user logs in.
		const own = await login(B.id, "spy");
		expect(own.status).toBe(200);
		expect(own.body.data.subject.split(" ")).toEqual(expect.arrayContaining(["@editor@b.example", `${spy.id}@b.example`, "spy@b.example"]));
	});

	test("operator takeover: B's user logs in through the root client: 401", async () => {
		const r = await login(p.root.client_id, "bob");
		expect(r.body).toEqual(errorBody(401, "username or password is invalid"));
		// A's admin cannot log in through B's client, nor B's admin through root.
		expect((await login(B.id, "alice")).status).toBe(401);
		expect((await login(p.root.client_id, "admin")).status).toBe(401);
	});

	test("subjects entries: a role or a group name, no whitespace, never 24-hex, never a domain of their own", async () => {
		const cases: Array<[unknown[], string]> = [
			[[A.adminId], "subjects[0]: must not be a 24-hex id"],
			[["@editor", `${p.root.user_id}@root.local`], "subjects[1]: must not be a 24-hex id"],
			[["team mates"], "subjects[0]: must not contain whitespace"],
			[["@editor@a.example"], "subjects[0]: '@editor@a.example' is not a role name (@name)"],
			[["team!x"], `subjects[0]: must be a role (@name) or ${GROUP_RULE}`],
			[["@editor", "team-x"], `subjects[1]: must be a role (@name) or ${GROUP_RULE}`],
		];
		for (const [subjects, message] of cases) {
			const r = await createUser(B.admin, { username: "subjective", subjects });
			expect(r.body).toEqual(errorBody(400, message));
		}
		const r = await http("PATCH", `/identity/users/${bob.id}`, { token: B.admin, body: { subjects: ["a b"] } });
		expect(r.body).toEqual(errorBody(400, "subjects[0]: must not contain whitespace"));
		expect((await createUser(B.admin, { username: "grouped", subjects: ["@editor", "team-x.b.example", "team@b.example", "eng.b.example"] })).status).toBe(200);
	});

	test("username, email and phone are unique together in a tenant; email and phone match after normalisation", async () => {
		// alice's email as another user's email, in another case: 409 in A.
		expect((await createUser(A.admin, { username: "alice2", email: "Alice@Mail.TEST" })).body).toEqual(errorBody(409, "email already exists"));
		expect((await createUser(A.admin, { username: "alice" })).body).toEqual(errorBody(409, "username already exists"));
		expect((await createUser(A.admin, { email: "x@mail.test", phone: "+15550001111" })).body).toEqual(errorBody(409, "phone already exists"));
		// alice logs in with her email in any case and her phone.
		expect((await login(A.id, "ALICE@mail.test")).status).toBe(200);
		expect((await login(A.id, " alice@mail.test ")).status).toBe(200);
		expect((await login(A.id, "+1 555 000 1111")).status).toBe(200);
		expect((await login(A.id, "alice")).status).toBe(200);
	});

	test("per tenant: B registers alice's email and the username alice; alice of A still logs in, B's does through B", async () => {
		const other = (await ok(createUser(B.admin, { username: "alice", email: "alice@mail.test", password: "Other-Pass-999!" }), "B alice")).data;
		expect(other.id).not.toBe(alice.id);
		const a = await login(A.id, "alice@mail.test");
		expect(a.status).toBe(200);
		expect(payloadOf(a.body.data.access_token).uid).toBe(alice.id);
		const b = await login(B.id, "alice@mail.test", "Other-Pass-999!");
		expect(payloadOf(b.body.data.access_token).uid).toBe(other.id);
		// B's password never opens A's alice.
		expect((await login(A.id, "alice@mail.test", "Other-Pass-999!")).status).toBe(401);
	});

	test("same username in two tenants: each tenant's admin is `admin`", async () => {
		expect(payloadOf(A.admin).uid).toBe(A.adminId);
		expect(payloadOf(B.admin).uid).toBe(B.adminId);
		expect(A.adminId).not.toBe(B.adminId);
	});

	test("login through a client that lists the tenant as a coworker works; other tenants' users do not", async () => {
		const r = await login(C.id, "alice");
		expect(r.status).toBe(200);
		const claims = payloadOf(r.body.data.access_token);
		expect(claims).toMatchObject({ uid: alice.id, cid: C.id, domain: "c.example" });
		expect(claims.subject.split(" ")).toContain(`${alice.id}@c.example`);
		expect((await login(C.id, "bob")).body).toEqual(errorBody(401, "username or password is invalid"));
	});

	test("a bulk patch cannot set a unique login field", async () => {
		const r = await http("PATCH", "/identity/users/bulk", { token: B.admin, body: { username: "everyone" } });
		expect(r.body).toEqual(errorBody(400, "username cannot be set by a bulk patch (it is unique)"));
	});
});

describe("item 5: domains are owned; client scopes capped; the operator grants any registered domain", () => {
	test("a tenant admin registers root.local (or another tenant's domain): 409", async () => {
		const r = await http("POST", "/domain/clients", { token: A.admin, body: { name: "evil", domains: ["root.local"], scopes: ["whole"] } });
		expect(r.body).toEqual(errorBody(409, "domain root.local is already registered"));
		const r2 = await http("POST", "/domain/clients", { token: A.admin, body: { name: "evil", domains: ["a2.example", "B.Example"] } });
		expect(r2.body).toEqual(errorBody(409, "domain b.example is already registered"));
	});

	test("patch and bulk: a domain of another client, or twice in one bulk create", async () => {
		const mine = (await ok(http("POST", "/domain/clients", { token: A.admin, body: { name: "a-side", domains: ["side.a.example"] } }), "side")).data;
		const r = await http("PATCH", `/domain/clients/${mine.id}`, { token: A.admin, body: { domains: ["side.a.example", "root.local"] } });
		expect(r.body).toEqual(errorBody(409, "domain root.local is already registered"));
		// Its own domain stays its own.
		expect((await http("PATCH", `/domain/clients/${mine.id}`, { token: A.admin, body: { domains: ["side.a.example", "side2.a.example"] } })).status).toBe(200);
		const bulk = await http("POST", "/domain/clients/bulk", {
			token: A.admin,
			body: {
				items: [
					{ name: "one", domains: ["twin.example"] },
					{ name: "two", domains: ["twin.example"] },
				],
			},
		});
		expect(bulk.body).toEqual(errorBody(409, "domain twin.example is already registered"));
		const bulk2 = await http("POST", "/domain/clients/bulk", { token: A.admin, body: { items: [{ name: "three", domains: ["b.example"] }] } });
		expect(bulk2.body).toEqual(errorBody(409, "domain b.example is already registered"));
		const bulkPatch = await http("PATCH", "/domain/clients/bulk", { token: A.admin, body: { domains: ["fresh.example"] } });
		expect(bulkPatch.body).toEqual(errorBody(400, "domains cannot be set by a bulk patch (a domain belongs to one client)"));
	});

	test("a client created or patched gets at most the caller's token scopes", async () => {
		const narrow = (await ok(login(A.id, "admin", PASSWORD, { scopes: ["manage:domain:clients"] }), "narrow")).data.access_token;
		const r = await http("POST", "/domain/clients", { token: narrow, body: { name: "wide", domains: ["wide.a.example"], scopes: ["whole"] } });
		expect(r.body).toEqual(errorBody(403, "scope whole is not held by the caller"));
		const made = (await ok(http("POST", "/domain/clients", { token: narrow, body: { name: "ok", domains: ["ok.a.example"], scopes: ["read:domain:clients"] } }), "ok client")).data;
		const p2 = await http("PATCH", `/domain/clients/${made.id}`, { token: narrow, body: { scopes: ["read:identity:users"] } });
		expect(p2.body).toEqual(errorBody(403, "scope read:identity:users is not held by the caller"));
	});

	test("a tenant admin grants only its client's domains, with the message naming the client", async () => {
		const r = await http("POST", "/auth/grants", { token: A.admin, body: { subject: `${p.root.user_id}@root.local`, action: "manage", object: "identity:users" } });
		expect(r.body).toEqual(errorBody(400, `subject: domain 'root.local' is not registered for client ${A.id} (register it on that client, or grant as the operator)`));
		const r2 = await http("POST", "/auth/grants", { token: A.admin, body: { subject: "@editor@b.example", action: "read", object: "content:notes" } });
		expect(r2.body).toEqual(errorBody(400, `subject: domain 'b.example' is not registered for client ${A.id} (register it on that client, or grant as the operator)`));
		expect((await http("POST", "/auth/grants", { token: A.admin, body: { subject: "@editor@a.example", action: "read", object: "content:notes" } })).status).toBe(200);
	});

	test("the operator grants a subject of b.example; a domain nobody registers is still refused", async () => {
		const r = await http("POST", "/auth/grants", { token: root, body: { subject: `${bob.id}@b.example`, action: "read", object: "content:notes" } });
		expect(r.status).toBe(200);
		const r2 = await http("POST", "/auth/grants", { token: root, body: { subject: "x@nowhere.example", action: "read", object: "content:notes" } });
		expect(r2.body).toEqual(errorBody(400, "subject: domain 'nowhere.example' is not registered"));
	});
});

describe("item 6: APT coworkers and shares stay inside the tenant", () => {
	test("an APT naming another tenant as coworker: the coworker is dropped", async () => {
		const r = await http("POST", "/auth/apts", { token: A.admin, body: { name: "plant", coworkers: [B.id] } });
		expect(r.status).toBe(200);
		expect(r.body.data.coworkers).toEqual([]);
		expect(r.body.data.clients).toEqual([A.id]);
		const v = await http("GET", "/auth/verify", { headers: { authorization: `Bearer ${r.body.data.token}` } });
		expect(v.status).toBe(200);
		expect(v.body.data.coworker).toBeUndefined();
	});

	test("a token request naming an unregistered coworker drops it; a registered one is kept", async () => {
		const r = await login(C.id, "alice", PASSWORD, { coworkers: [B.id, A.id] });
		expect(r.body.data.coworker).toBe(A.id);
	});

	const phish = { title: "URGENT: re-enter your password at https://evil.example" };

	test("shares naming another tenant's user: 400 on create, bulk create, patch, bulk patch", async () => {
		const msg = errorBody(400, `shares: ${alice.id} is not a user of this tenant`);
		expect((await http("POST", "/content/notes", { token: B.admin, body: { ...phish, shares: [alice.id] } })).body).toEqual(msg);
		expect((await http("POST", "/content/notes/bulk", { token: B.admin, body: { items: [{ ...phish }, { ...phish, shares: [bob.id, alice.id] }] } })).body).toEqual(msg);
		const note = (await ok(http("POST", "/content/notes", { token: B.admin, body: { ...phish, shares: [bob.id] } }), "note")).data;
		expect((await http("PATCH", `/content/notes/${note.id}`, { token: B.admin, body: { shares: [alice.id] } })).body).toEqual(msg);
		expect((await http("PATCH", "/content/notes/bulk", { token: B.admin, body: { shares: [alice.id] } })).body).toEqual(msg);
		// Another collection, same rule; an id that is no user at all too.
		expect((await createUser(B.admin, { username: "sharer", shares: [alice.id] })).body).toEqual(msg);
		expect((await http("POST", "/content/notes", { token: B.admin, body: { ...phish, shares: ["not-a-user"] } })).body).toEqual(
			errorBody(400, "shares: not-a-user is not a user of this tenant"),
		);
		// Nothing reached alice's default view.
		const aliceToken = (await ok(login(A.id, "alice"), "alice")).data.access_token;
		await grant(A.admin, `${alice.id}@a.example`, "read", "content:notes");
		const seen = await http("GET", "/content/notes", { token: aliceToken });
		expect(seen.status).toBe(200);
		expect(seen.body.items.filter((n: any) => n.title === phish.title)).toEqual([]);
	});

	test("shares naming users of the caller's tenant are accepted", async () => {
		const r = await http("POST", "/content/notes", { token: A.admin, body: { title: "for alice", shares: [alice.id] } });
		expect(r.status).toBe(200);
		expect(r.body.data.shares).toEqual([alice.id]);
		// The tenant's own client (a client_credential principal) may be named too.
		expect((await http("POST", "/content/notes", { token: A.admin, body: { title: "for the client", shares: [A.id] } })).status).toBe(200);
		expect((await http("POST", "/content/notes", { token: A.admin, body: { title: "x", shares: [B.id] } })).body).toEqual(
			errorBody(400, `shares: ${B.id} is not a user of this tenant`),
		);
	});

	test("through a coworker client, a user shares with users of its own tenant", async () => {
		// A's admin logs in through C (which lists A); its grants are in C's domain there.
		await grant(root, `${A.adminId}@c.example`, "manage", "content:notes");
		const viaC = (await ok(login(C.id, "admin"), "admin via C")).data.access_token;
		expect(payloadOf(viaC).cid).toBe(C.id);
		const r = await http("POST", "/content/notes", { token: viaC, body: { title: "to alice via C", shares: [alice.id] } });
		expect(r.status).toBe(200);
		expect((await http("POST", "/content/notes", { token: viaC, body: { title: "to bob via C", shares: [bob.id] } })).body).toEqual(
			errorBody(400, `shares: ${bob.id} is not a user of this tenant`),
		);
	});
});

describe("item 8: /auth/can and ref do not disclose another principal's or tenant's data", () => {
	test("an ordinary whole-scope user cannot list another principal's policies", async () => {
		const aliceToken = (await ok(login(A.id, "alice"), "alice")).data.access_token;
		expect(payloadOf(aliceToken).scope).toBe("whole");
		const r = await http("POST", "/auth/can", {
			token: aliceToken,
			headers: { "x-can-with-policies": "1" },
			body: { action: "manage", object: "identity:users", subjects: [`${A.adminId}@a.example`] },
		});
		expect(r.body).toEqual(errorBody(403, "subjects outside the token need a read grant on auth:grants"));
		// Its own subjects stay answerable.
		expect((await http("POST", "/auth/can", { token: aliceToken, body: { action: "read", object: "content:notes", subjects: [`${alice.id}@a.example`] } })).status).toBe(200);
		// A grants reader (A's admin) may ask.
		const ok2 = await http("POST", "/auth/can", { token: A.admin, body: { action: "manage", object: "identity:users", subjects: [`${A.adminId}@a.example`] } });
		expect(ok2.status).toBe(200);
		expect(ok2.body.data.granted).toBe(true);
	});

	test("ref is unique per tenant: two tenants use the same ref; a duplicate in the caller's tenant answers 409", async () => {
		const a = (await ok(http("POST", "/content/notes", { token: A.admin, body: { title: "a", ref: "INV-1" } }), "a ref")).data;
		expect(a).not.toHaveProperty("tenant_ref");
		const b = await http("POST", "/content/notes", { token: B.admin, body: { title: "b", ref: "INV-1" } });
		expect(b.status).toBe(200);
		expect((await http("POST", "/content/notes", { token: A.admin, body: { title: "a2", ref: "INV-1" } })).body).toEqual(errorBody(409, "ref already exists"));
		expect((await http("POST", "/content/notes/bulk", { token: A.admin, body: { items: [{ title: "x", ref: "INV-1" }] } })).body).toEqual(errorBody(409, "ref already exists"));
		const a2 = (await ok(http("POST", "/content/notes", { token: A.admin, body: { title: "a2", ref: "INV-2" } }), "a2")).data;
		expect((await http("PATCH", `/content/notes/${a2.id}`, { token: A.admin, body: { ref: "INV-1" } })).body).toEqual(errorBody(409, "ref already exists"));
		// get-by-ref finds each tenant's own document.
		const ga = await http("GET", "/content/notes/INV-1?ref=true", { token: A.admin });
		expect(ga.status).toBe(200);
		expect(ga.body.data.id).toBe(a.id);
		expect(ga.body.data).not.toHaveProperty("tenant_ref");
		const gb = await http("GET", "/content/notes/INV-1?ref=true", { token: B.admin });
		expect(gb.body.data.id).toBe(b.body.data.id);
		// A ref cleared is free again in the tenant.
		expect((await http("PATCH", `/content/notes/${a.id}`, { token: A.admin, body: { ref: null } })).status).toBe(200);
		expect((await http("PATCH", `/content/notes/${a2.id}`, { token: A.admin, body: { ref: "INV-1" } })).status).toBe(200);
	});
});

describe("the root username has the username form", () => {
	test.each([["Root User"], ["6b04522a92c6eb5fcb94131f"], ["ab"]])("PLATFORM_ROOT_USERNAME=%s is refused at start", (value) => {
		const saved = process.env.PLATFORM_ROOT_USERNAME;
		process.env.PLATFORM_ROOT_USERNAME = value;
		try {
			expect(() => readConfig()).toThrow(/^PLATFORM_ROOT_USERNAME must match/);
		} finally {
			if (saved === undefined) delete process.env.PLATFORM_ROOT_USERNAME;
			else process.env.PLATFORM_ROOT_USERNAME = saved;
		}
	});
});
