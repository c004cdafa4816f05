/**
 * Tenant boundary (issue 8, items 2-4; docs/contracts.md "Tenants"), against a platform with two tenants set up through
 * the API by the operator (root): clients A (a.example) and B (b.example), a tenant admin each with manage on
 * context:configs, users in both tenants with the same group name `team-x.example` and role `@editor`.
 *
 * - The `group` zone reaches only the caller's tenant (the first entry of a document's `clients`).
 * - context/configs: `eid` is the caller's client (filled in when omitted; another client's id → 403, the operator
 *   excepted); an RBAC entry's domain must be one of the eid client's domains; B's webhook never gets A's events.
 * - CQRS credentials are sealed with a key of their own: never a valid x-api-key; a body's `aes:` string is plaintext
 *   (delivered literally); the key of a config with credentials cannot change; no bulk patch of key/value.
 */
import http from "http";
import type { AddressInfo } from "net";
import { bootPlatform, type HttpResult, type TestPlatform } from "../helpers/platform";
import { storedText } from "../helpers/stored";
import { aesOf, apiKey } from "../helpers/auth";
import { sleep } from "../helpers/wait";
import { sharedOutbox } from "../../events/outbox";

let p: TestPlatform;
let root: string;

interface Tenant {
	id: string;
	secret: string;
	domain: string;
	cc: string; // client_credential token of the tenant's client
}
interface Principal {
	id: string;
	username: string;
	password: string;
	token: string;
}
let A: Tenant;
let B: Tenant;
let adminA: Principal;
let adminB: Principal;
let userA: Principal; // team-x.example, @editor in A
let userA2: Principal; // team-x.example, @editor in A
let userB: Principal; // team-x.example, @editor in B

const err = (statusCode: number, message: string, error: string) => ({ statusCode, message, error });
const forbidden = (message: string) => err(403, message, "Forbidden");
const badRequest = (message: string) => err(400, message, "Bad Request");
const NOT_FOUND = err(404, "document not found", "Not Found");
const NOT_CALLERS = forbidden("eid must be the caller's client");

function expectError(r: HttpResult, body: { statusCode: number; message: string; error: string }, what = ""): void {
	expect({ what, status: r.status, body: r.body }).toEqual({ what, status: body.statusCode, body });
}

async function ok<T = any>(r: Promise<HttpResult<T>>, what: string): Promise<T> {
	const res = await r;
	if (res.status !== 200) throw new Error(`${what}: expected 200, got ${res.status} ${res.text.slice(0, 300)}`);
	return res.body;
}

const call = (token: string, method: string, url: string, body?: unknown, headers?: Record<string, string>) => p.http(method, url, { token, body, headers });

/** A grant written by the operator, which may name any registered domain in a grant subject (docs/contracts.md "Tenants"). */
async function grant(body: { subject: string; action: string; object: string }): Promise<void> {
	const r = await call(root, "POST", "/auth/grants", body);
	if (r.status !== 200) throw new Error(`grant: ${r.status} ${r.text}`);
}

async function tenant(name: string, domain: string): Promise<Tenant> {
	const c = (await ok(call(root, "POST", "/domain/clients", { name, domains: [domain], scopes: ["whole"] }), `client ${name}`)).data;
	// The tenant's own client creates its users (a user belongs to the tenant whose client created it).
	await grant({ subject: `${c.id}@${domain}`, action: "manage", object: "identity:users" });
	const t = await ok(p.http("POST", "/auth/token", { body: { grant_type: "client_credential", client_id: c.id, client_secret: c.secret } }), "cc token");
	return { id: c.id, secret: c.secret, domain, cc: t.data.access_token };
}

async function user(t: Tenant, prefix: string, subjects: string[], extra: Record<string, unknown> = {}): Promise<Principal> {
	const username = `${prefix}-${Math.random().toString(36).slice(2, 8)}`;
	const password = `Pw-${Math.random().toString(36).slice(2)}-x9`;
	const u = (await ok(call(t.cc, "POST", "/identity/users", { username, password, subjects }), `user ${prefix}`)).data;
	const tok = await ok(p.http("POST", "/auth/token", { body: { grant_type: "password", client_id: t.id, username, password, ...extra } }), `login ${prefix}`);
	return { id: u.id, username, password, token: tok.data.access_token };
}

/** A webhook receiver on 127.0.0.1 that records every request. */
class Receiver {
	server!: http.Server;
	requests: Array<{ url: string; headers: http.IncomingHttpHeaders; body: any }> = [];
	async start(): Promise<void> {
		this.server = http.createServer((req, res) => {
			const chunks: Buffer[] = [];
			req.on("data", (c) => chunks.push(c));
			req.on("end", () => {
				let body: any;
				try {
					body = JSON.parse(Buffer.concat(chunks).toString("utf8"));
				} catch {
					body = undefined;
				}
				this.requests.push({ url: req.url ?? "", headers: req.headers, body });
				res.writeHead(204).end();
			});
		});
		await new Promise<void>((r) => this.server.listen(0, "127.0.0.1", () => r()));
	}
	url(pth = "/hook"): string {
		return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}${pth}`;
	}
	of(id: string) {
		return this.requests.filter((r) => r.body?.id === id);
	}
	stop(): Promise<void> {
		this.server.closeAllConnections();
		return new Promise((r) => this.server.close(() => r()));
	}
}

async function waitFor<T>(what: string, fn: () => T | undefined | null | false, timeoutMs = 15_000): Promise<T> {
	const end = Date.now() + timeoutMs;
	for (;;) {
		const v = fn();
		if (v) return v;
		if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
		await sleep(50);
	}
}

/** The stored (sealed) form of a config, as the store holds it (PostgreSQL's row). */
async function storedConfig(id: string): Promise<Record<string, any>> {
	const lines = (await storedText(p, "context/configs")).split("\n").filter(Boolean);
	const docs = lines.map((l) => JSON.parse(l)).filter((d) => d.id === id);
	return docs[docs.length - 1];
}

const rxA = new Receiver();
const rxB = new Receiver();

beforeAll(async () => {
	p = await bootPlatform({ webhookAllowPrivate: true, webhookRetrySchedule: [0, 0.2] });
	root = await p.rootToken();
	A = await tenant("tenant-a", "a.example");
	B = await tenant("tenant-b", "b.example");
	for (const t of [A, B]) {
		// The role @editor of each tenant may manage notes (a grant of the tenant's own domain).
		await grant({ subject: `@editor@${t.domain}`, action: "manage", object: "content:notes" });
	}
	adminA = await user(A, "admin-a", []);
	adminB = await user(B, "admin-b", []);
	for (const [adm, t] of [
		[adminA, A],
		[adminB, B],
	] as const)
		await grant({ subject: `${adm.id}@${t.domain}`, action: "manage", object: "context:configs" });
	userA = await user(A, "user-a", ["team-x.example", "@editor"]);
	userA2 = await user(A, "user-a2", ["team-x.example", "@editor"]);
	userB = await user(B, "user-b", ["team-x.example", "@editor"]);
	await rxA.start();
	await rxB.start();
}, 60_000);

afterAll(async () => {
	if (rxA.server) await rxA.stop();
	if (rxB.server) await rxB.stop();
	await p?.cleanup();
});

describe("the group zone stays in the caller's tenant", () => {
	test("B's team-x.example cannot read, patch, delete or destroy A's team-x.example documents; A's team-x.example can", async () => {
		const note = (await ok(call(userA.token, "POST", "/content/notes", { title: "a-team", groups: ["team-x.example"] }), "A note")).data;
		const mineB = (await ok(call(userB.token, "POST", "/content/notes", { title: "b-team", groups: ["team-x.example"] }), "B note")).data;
		const url = `/content/notes/${note.id}`;

		// The attack: B's user in a group of the same name.
		const listB = await ok(call(userB.token, "GET", "/content/notes?zone=group&pagination=" + encodeURIComponent('{"limit":100}')), "B list");
		expect(listB.items.map((d: any) => d.id)).toEqual([mineB.id]);
		expect(listB.total).toBe(1);
		expect((await ok(call(userB.token, "GET", "/content/notes/count?zone=group"), "B count")).total).toBe(1);
		// The groups reduction of a user query keeps B's own membership, which still does not reach A.
		const q = encodeURIComponent(JSON.stringify({ groups: "team-x.example" }));
		expect((await ok(call(userB.token, "GET", `/content/notes?zone=group,client&query=${q}`), "B query")).items.map((d: any) => d.id)).toEqual([mineB.id]);
		expectError(await call(userB.token, "GET", `${url}?zone=group`), NOT_FOUND, "get");
		expectError(await call(userB.token, "PATCH", `${url}?zone=group`, { title: "pwned" }), NOT_FOUND, "patch");
		expect(await ok(call(userB.token, "PATCH", `/content/notes/bulk?zone=group&query=${encodeURIComponent(JSON.stringify({ id: note.id }))}`, { title: "pwned" }), "bulk")).toEqual(
			{ total: 0 },
		);
		expectError(await call(userB.token, "DELETE", `${url}?zone=group`), NOT_FOUND, "delete");
		expectError(await call(userB.token, "DELETE", `${url}/destroy?zone=group`), NOT_FOUND, "destroy");
		expectError(await call(userB.token, "GET", url, undefined, { "x-zone": "group" }), NOT_FOUND, "get via x-zone");

		// The positive path: another member of A's team-x.example reaches it, and nothing above changed it.
		const seen = (await ok(call(userA2.token, "GET", `${url}?zone=group`), "A2 get")).data;
		expect(seen).toMatchObject({ id: note.id, title: "a-team", groups: ["team-x.example"] });
		expect((await ok(call(userA2.token, "PATCH", `${url}?zone=group`, { title: "a-team-2" }), "A2 patch")).data.title).toBe("a-team-2");
		expect((await ok(call(userA2.token, "GET", "/content/notes?zone=group"), "A2 list")).items.map((d: any) => d.id)).toEqual([note.id]);
	});
});

describe("context/configs: eid is the caller's client", () => {
	const rbac = (domain: string) => [{ domain, roles: { editor: ["all"] }, permissions: { all: ["manage:content:notes", "manage:context:configs"] } }];

	test("another client's eid is refused on create, bulk create, patch and bulk patch; omitted, it is filled in", async () => {
		// The attack: B's admin writes an RBAC config for A (would give @editor of a.example manage over A) ...
		expectError(await call(adminB.token, "POST", "/context/configs", { key: "RBAC", eid: A.id, value: rbac("a.example") }), NOT_CALLERS, "RBAC for A");
		expectError(await call(adminB.token, "POST", "/context/configs", { key: "RBAC", eid: A.id.toUpperCase(), value: rbac("a.example") }), NOT_CALLERS, "upper case");
		expectError(await call(adminB.token, "POST", "/context/configs/bulk", { items: [{ key: "RBAC", eid: A.id, value: rbac("a.example") }] }), NOT_CALLERS, "bulk");
		// ... or a CQRS config routing A's events to B's webhook.
		expectError(await call(adminB.token, "POST", "/context/configs", { key: "CQRS", eid: A.id, value: { webhook: rxB.url() } }), NOT_CALLERS, "CQRS for A");
		// An id of no client at all: the same answer (nothing learned about which ids exist).
		expectError(await call(adminB.token, "POST", "/context/configs", { key: "NOTE", eid: "f".repeat(24), value: {} }), NOT_CALLERS, "no client");
		// B's own domain only, in B's own config.
		expectError(
			await call(adminB.token, "POST", "/context/configs", { key: "RBAC", eid: B.id, value: [...rbac("b.example"), ...rbac("a.example")] }),
			badRequest(`value[1].domain: 'a.example' is not a domain of client ${B.id}`),
			"foreign domain",
		);

		const own = (await ok(call(adminB.token, "POST", "/context/configs", { key: "RBAC", value: rbac("b.example") }), "own RBAC")).data;
		expect(own.eid).toBe(B.id);
		const upper = (await ok(call(adminB.token, "POST", "/context/configs", { key: "NOTE", eid: B.id.toUpperCase(), value: {} }), "own, upper case")).data;
		expect(upper.eid).toBe(B.id);
		expectError(await call(adminB.token, "PATCH", `/context/configs/${own.id}`, { eid: A.id }), NOT_CALLERS, "patch eid");
		expectError(await call(adminB.token, "PATCH", `/context/configs/${own.id}`, { eid: null }), badRequest("eid must not be null"), "patch eid null");
		expectError(
			await call(adminB.token, "PATCH", `/context/configs/${own.id}`, { value: rbac("a.example") }),
			badRequest(`value[0].domain: 'a.example' is not a domain of client ${B.id}`),
			"patch domain",
		);
		expectError(
			await call(adminB.token, "PATCH", `/context/configs/bulk?query=${encodeURIComponent(JSON.stringify({ key: "RBAC" }))}`, { eid: A.id }),
			NOT_CALLERS,
			"bulk patch eid",
		);
		const after = (await ok(call(adminB.token, "GET", `/context/configs/${own.id}`), "get")).data;
		expect(after.eid).toBe(B.id);

		// Roles act in their tenant: B's RBAC config gives B's @editor access to configs, never A's @editor.
		expect((await call(userB.token, "GET", "/context/configs")).status).toBe(200);
		expectError(await call(userA.token, "GET", "/context/configs"), forbidden("no grant for read on context:configs"), "A's editor");
	});

	test("the operator (a root-client token) writes configs for any tenant, within that tenant's domains", async () => {
		const cfg = (await ok(call(root, "POST", "/context/configs", { key: "RBAC", eid: A.id, value: rbac("a.example") }), "operator RBAC for A")).data;
		expect(cfg.eid).toBe(A.id);
		expectError(
			await call(root, "POST", "/context/configs", { key: "RBAC", eid: A.id, value: rbac("b.example") }),
			badRequest(`value[0].domain: 'b.example' is not a domain of client ${A.id}`),
			"operator, foreign domain",
		);
		expectError(await call(root, "PATCH", `/context/configs/${cfg.id}`, { eid: B.id }), badRequest(`value[0].domain: 'a.example' is not a domain of client ${B.id}`), "move to B");
		const moved = (await ok(call(root, "PATCH", `/context/configs/${cfg.id}`, { eid: B.id, value: rbac("b.example") }), "move to B with B's domain")).data;
		expect(moved.eid).toBe(B.id);
		expectError(await call(root, "POST", "/context/configs", { key: "NOTE", eid: "e".repeat(24), value: {} }), badRequest(`eid ${"e".repeat(24)} is not a client`), "no client");
		const filled = (await ok(call(root, "POST", "/context/configs", { key: "NOTE", value: {} }), "operator, own")).data;
		expect(filled.eid).toBe(p.root.client_id);
		await ok(call(root, "DELETE", `/context/configs/${cfg.id}/destroy`), "destroy");
	});

	test("B's webhook never receives A's change events", async () => {
		expectError(await call(adminB.token, "POST", "/context/configs", { key: "CQRS", eid: A.id, value: { webhook: rxB.url("/stolen") } }), NOT_CALLERS, "CQRS for A");
		const cfgB = (await ok(call(adminB.token, "POST", "/context/configs", { key: "CQRS", eid: B.id, value: { webhook: rxB.url("/b") } }), "B's CQRS")).data;
		expectError(await call(adminB.token, "PATCH", `/context/configs/${cfgB.id}`, { eid: A.id }), NOT_CALLERS, "re-point to A");
		await ok(call(adminA.token, "POST", "/context/configs", { key: "CQRS", eid: A.id, value: { webhook: rxA.url("/a") } }), "A's CQRS");

		const nA = (await ok(call(userA.token, "POST", "/content/notes", { title: "for A only" }), "A note")).data;
		const nB = (await ok(call(userB.token, "POST", "/content/notes", { title: "for B" }), "B note")).data;
		await waitFor("A's event at A's webhook", () => rxA.of(nA.id).length > 0);
		await waitFor("B's event at B's webhook", () => rxB.of(nB.id).length > 0);
		// A later A event too, so that anything misrouted had time to arrive.
		const nA2 = (await ok(call(userA.token, "PATCH", `/content/notes/${nA.id}`, { title: "again" }), "A patch")).data;
		await waitFor("A's update at A's webhook", () => rxA.of(nA2.id).length > 1);
		await sleep(300);
		expect(rxB.of(nA.id)).toEqual([]);
		expect(rxB.requests.filter((r) => r.url === "/stolen")).toEqual([]);
		expect(rxA.of(nB.id)).toEqual([]);
		await ok(call(adminB.token, "DELETE", `/context/configs/${cfgB.id}`), "remove B's CQRS");
	});
});

describe("CQRS credentials are not an oracle for the platform key", () => {
	test("a value sealed for a CQRS config is not a valid x-api-key; its key cannot change; no bulk patch of key or value", async () => {
		// A strict token of A's user, and the ApiToken an attacker in B wants for it.
		const strict = (
			await ok(p.http("POST", "/auth/token", { body: { grant_type: "password", client_id: A.id, username: userA.username, password: userA.password, strict: true } }), "strict")
		).data.access_token;
		const wanted = JSON.stringify({ cid: A.id, client_id: A.id, expiration_date: new Date(Date.now() + 3_600_000).toISOString() });
		// The same ApiToken sealed with the contract key is accepted: the refusal below is about the key, nothing else.
		expect((await call(strict, "GET", "/auth/verify", undefined, { "x-api-key": apiKey(p, JSON.parse(wanted)) })).status).toBe(200);

		const cfg = (
			await ok(call(adminB.token, "POST", "/context/configs", { key: "CQRS", eid: B.id, value: { webhook: rxB.url("/oracle"), authorization: wanted } }), "oracle config")
		).data;
		expect(cfg.value).toEqual({ webhook: rxB.url("/oracle") });
		// The attack: switch the key off CQRS to have the sealed value shown.
		expectError(await call(adminB.token, "PATCH", `/context/configs/${cfg.id}`, { key: "NOTE" }), badRequest("key cannot change while the config holds credentials"), "key change");
		expectError(
			await call(adminB.token, "PATCH", `/context/configs/bulk?query=${encodeURIComponent(JSON.stringify({ id: cfg.id }))}`, { key: "NOTE" }),
			badRequest("key cannot be set by a bulk patch of configs"),
			"bulk key change",
		);
		expectError(
			await call(adminB.token, "PATCH", `/context/configs/bulk?query=${encodeURIComponent(JSON.stringify({ id: cfg.id }))}`, { value: { webhook: rxB.url() } }),
			badRequest("value cannot be set by a bulk patch of configs"),
			"bulk value",
		);
		const got = (await ok(call(adminB.token, "GET", `/context/configs/${cfg.id}`), "get")).data;
		expect(got).toMatchObject({ key: "CQRS", value: { webhook: rxB.url("/oracle") } });

		// Even holding the sealed value (read off the disk here), it is no x-api-key: sealed with another key.
		const sealed = (await storedConfig(cfg.id)).value.authorization as string;
		expect(sealed.startsWith("aes:")).toBe(true);
		const wire = sealed.slice(4);
		for (const k of [Buffer.from(wire).toString("base64"), wire])
			expectError(await call(strict, "GET", "/auth/verify", undefined, { "x-api-key": k }), forbidden("api-key is not valid"), "sealed as x-api-key");
		// Credentials removed (null), the key may change.
		await ok(call(adminB.token, "PATCH", `/context/configs/${cfg.id}`, { value: { webhook: rxB.url("/oracle"), authorization: null } }), "drop credentials");
		expect((await ok(call(adminB.token, "PATCH", `/context/configs/${cfg.id}`, { key: "NOTE" }), "key change without credentials")).data.key).toBe("NOTE");
	});

	test("an `aes:` string in a body is plaintext: sealed, and delivered literally, never decrypted", async () => {
		// What a TOTP secret or an x-api-key looks like sealed with the contract key.
		const contractSealed = `aes:${aesOf(p).encrypt("JBSWY3DPEHPK3PXP")}`;
		const cfg = (
			await ok(call(adminB.token, "POST", "/context/configs", { key: "CQRS", eid: B.id, value: { webhook: rxB.url("/literal"), authorization: contractSealed } }), "config")
		).data;
		expect(cfg.value).toEqual({ webhook: rxB.url("/literal") });
		expect((await storedConfig(cfg.id)).value.authorization).not.toBe(contractSealed);
		const n1 = (await ok(call(userB.token, "POST", "/content/notes", { title: "literal" }), "note")).data;
		const hit = (await waitFor("delivery to /literal", () => rxB.of(n1.id).find((r) => r.url === "/literal")))!;
		expect(hit.headers.authorization).toBe(contractSealed);

		// A config that becomes CQRS by a key change: what its value held is plaintext too, sealed now.
		const other = `aes:${aesOf(p).encrypt("another-seed")}`;
		const note = (await ok(call(adminB.token, "POST", "/context/configs", { key: "NOTE", eid: B.id, value: { webhook: rxB.url("/became"), authorization: other } }), "note config"))
			.data;
		// Redaction does not wait for the key: `authorization` and `secret` are hidden in any config.
		expect(note.value).toEqual({ webhook: rxB.url("/became") });
		const became = (await ok(call(adminB.token, "PATCH", `/context/configs/${note.id}`, { key: "CQRS" }), "to CQRS")).data;
		expect(became.value).toEqual({ webhook: rxB.url("/became") });
		expect((await storedConfig(note.id)).value.authorization).not.toBe(other);
		const n2 = (await ok(call(userB.token, "POST", "/content/notes", { title: "became" }), "note 2")).data;
		const hit2 = (await waitFor("delivery to /became", () => rxB.of(n2.id).find((r) => r.url === "/became")))!;
		expect(hit2.headers.authorization).toBe(other);
		// Neither credential is in any change event (the NOTE's `before` included) nor in any webhook body.
		const events = JSON.stringify(await sharedOutbox(p.cfg).readFrom(0, 100_000));
		for (const secret of [contractSealed, other, "JBSWY3DPEHPK3PXP", "another-seed"]) {
			expect(events).not.toContain(secret);
			expect(JSON.stringify(rxB.requests.map((r) => r.body))).not.toContain(secret);
		}
	});
});
