/**
 * The authorization matrix, generated from the catalog: scope → grant → query enforcement → zones, over the real
 * gateway. Every expectation on visible documents is an exact id set computed by an independent oracle over the
 * stored documents (never by the code under test).
 *
 * - Every collection of COLLECTIONS × the 11 operations, for one representative principal: no grant → 403 on every
 *   operation; `manage` grant → every operation works on exactly the documents in view; grant revoked → 403 at once.
 * - On content/notes and logistic/vehicles: principals (user JWT, client_credential, APT, strict token with
 *   x-api-key) × zones (own, share, group, client, combined; header `x-zone` and query `zone`).
 * - Probing: hidden fields in filter/sort/projection/populate/body, foreign ids (404), bulk patch outside the view,
 *   scope/grant layering, manage-only operations, groups reduction, populate without grant, location and time
 *   grants, `{{token.uid}}` row filters, RBAC roles, /auth/can, grant validation, and the 502 without a token.
 */
import { randomUUID } from "crypto";
import { readFileSync } from "fs";
import path from "path";
import { COLLECTIONS, STANDARD_OPS, type CollectionDef, type FieldDef, type StandardOp } from "../../catalog";
import { Aes, encryptEnvelope, objectId, randomToken } from "../../lib/crypto";
import { platformDoc } from "../../engine/collection.mixin";
import { bootPlatform, parseSse, type HttpResult, type TestPlatform } from "../helpers/platform";
import { withStatusProbe } from "../helpers/status-probe";

jest.setTimeout(60_000);

type Doc = Record<string, any>;
interface Claims {
	uid?: string;
	aid?: string;
	cid: string;
	client_id: string;
	groups?: string[];
	scope: string;
	subject: string;
	domain: string;
}
interface Principal {
	name: string;
	token: string;
	headers?: Record<string, string>;
	claims: Claims;
}
type Zone = "own" | "share" | "group" | "client";

let p: TestPlatform;
let root: string;
let DOMAIN: string;
let aes: Aes;

// Clients (docs/contracts.md "Tenants": a domain belongs to one client): T (scopes whole, DOMAIN) and T2 (content and
// logistic only, DOMAIN2, listing T as a coworker so T's users log in through it too). Users are created by T's
// client_credential token, so they belong to T's tenant.
const DOMAIN2 = "tenant-2.example";
let T: { id: string; secret: string };
let T2: { id: string; secret: string };
let userMaker: string;
const TEAM = "team@example.com";
const OTHER_GROUP = "other@example.com";

// ---------------------------------------------------------------------------------------------------------------
// HTTP helpers
// ---------------------------------------------------------------------------------------------------------------

function qs(params: Record<string, unknown> = {}): string {
	const u = new URLSearchParams();
	for (const [k, v] of Object.entries(params)) if (v !== undefined) u.set(k, typeof v === "string" ? v : JSON.stringify(v));
	const s = u.toString();
	return s ? `?${s}` : "";
}

function call(who: Principal | string, method: string, pth: string, opts: { body?: unknown; headers?: Record<string, string> } = {}): Promise<HttpResult> {
	const token = typeof who === "string" ? who : who.token;
	const headers = { ...(typeof who === "string" ? {} : (who.headers ?? {})), ...(opts.headers ?? {}) };
	return p.http(method, pth, { token, body: opts.body, headers });
}

function expectStatus(r: HttpResult, status: number, what = ""): void {
	if (r.status !== status) throw new Error(`${what} expected ${status}, got ${r.status}: ${r.text.slice(0, 400)}`);
}

async function ok<T = any>(r: Promise<HttpResult<T>> | HttpResult<T>, what = "", status = 200): Promise<T> {
	const res = await r;
	expectStatus(res, status, what);
	return res.body;
}

const sorted = (ids: string[]) => [...ids].sort();
const idsOf = (items: Doc[]) => sorted(items.map((d) => d.id));

async function createClient(name: string, scopes: string[], domain: string, coworkers: string[] = []): Promise<{ id: string; secret: string }> {
	const b = await ok(call(root, "POST", "/domain/clients", { body: { name, domains: [domain], scopes, coworkers } }), "create client");
	return { id: b.data.id, secret: b.data.secret };
}

interface User {
	id: string;
	username: string;
	password: string;
	subjects: string[];
}

async function createUser(prefix: string, subjects: string[] = []): Promise<User> {
	const username = `${prefix}-${randomToken(4)
		.toLowerCase()
		.replace(/[^a-z0-9]/g, "x")}`;
	const password = `pw-${randomToken(9)}`;
	const b = await ok(call(userMaker, "POST", "/identity/users", { body: { username, password, subjects } }), "create user");
	return { id: b.data.id, username, password, subjects };
}

async function claimsOf(token: string, headers?: Record<string, string>): Promise<Claims> {
	return (await ok(p.http("GET", "/auth/verify", { token, headers }), "verify")).data;
}

/**
 * A password login. The oracle needs the token's group memberships, which /auth/verify does not list (they are not
 * a spec claim): they are the user's non-role subjects.
 */
async function login(user: User, client = T, extra: Record<string, unknown> = {}): Promise<Principal> {
	const b = await ok(
		p.http("POST", "/auth/token", { body: { grant_type: "password", client_id: client.id, username: user.username, password: user.password, ...extra } }),
		"login",
	);
	const token = b.data.access_token as string;
	const headers = extra.strict ? { "x-api-key": apiKey(client.id) } : undefined;
	const claims = await claimsOf(token, headers);
	claims.groups = user.subjects.filter((x) => !x.startsWith("@"));
	return { name: `user ${user.username}`, token, headers, claims };
}

async function clientCredential(client = T): Promise<Principal> {
	const b = await ok(p.http("POST", "/auth/token", { body: { grant_type: "client_credential", client_id: client.id, client_secret: client.secret } }), "cc");
	const token = b.data.access_token as string;
	return { name: "client_credential", token, claims: { ...(await claimsOf(token)), groups: [] } };
}

function apiKey(cid: string, extra: Record<string, unknown> = {}): string {
	return encryptEnvelope(aes, JSON.stringify({ cid, client_id: cid, expiration_date: new Date(Date.now() + 3_600_000).toISOString(), ...extra }));
}

const subjectOf = (id: string, domain = DOMAIN) => `${id}@${domain}`;

async function grant(body: Record<string, unknown>): Promise<string> {
	return (await ok(call(root, "POST", "/auth/grants", { body }), `grant ${JSON.stringify(body)}`)).data.id;
}

async function revoke(id: string): Promise<void> {
	await ok(call(root, "DELETE", `/auth/grants/${id}/destroy`), "revoke grant");
}

// ---------------------------------------------------------------------------------------------------------------
// The oracle: stored documents and an independent evaluation of zones and soft delete
// ---------------------------------------------------------------------------------------------------------------

function store(svc: string, col: string): any {
	return (p.broker.getLocalService(svc) as any).collectionStore(col);
}

async function stored(svc: string, col: string): Promise<Doc[]> {
	return (await store(svc, col).find({ query: {} })) as Doc[];
}

function inZones(d: Doc, zones: Zone[], c: Claims): boolean {
	const identity = c.uid ?? c.aid ?? c.cid;
	const arr = (v: unknown): unknown[] => (Array.isArray(v) ? v : []);
	return zones.some((z) => {
		if (z === "own") return d.owner === identity;
		if (z === "share") return arr(d.shares).includes(identity);
		// A group acts only in its tenant: the document's first client is the caller's.
		if (z === "group") return arr(d.clients)[0] === c.cid && arr(d.groups).some((g) => (c.groups ?? []).includes(g as string));
		return arr(d.clients).includes(c.cid);
	});
}

async function expectedIds(svc: string, col: string, c: Claims, zones: Zone[] = ["own", "share"], extra: (d: Doc) => boolean = () => true): Promise<string[]> {
	const docs = await stored(svc, col);
	return sorted(docs.filter((d) => (d.deleted_at === null || d.deleted_at === undefined) && inZones(d, zones, c) && extra(d)).map((d) => d.id));
}

async function listIds(
	who: Principal | string,
	base: string,
	params: Record<string, unknown> = {},
	headers?: Record<string, string>,
): Promise<{ ids: string[]; total: number; items: Doc[] }> {
	const b = await ok(call(who, "GET", base + qs({ pagination: { limit: 100 }, ...params }), { headers }), `list ${base}`);
	return { ids: idsOf(b.items), total: b.total, items: b.items };
}

async function cursorDocs(who: Principal | string, base: string, params: Record<string, unknown> = {}, headers?: Record<string, string>): Promise<Doc[]> {
	const r = await call(who, "GET", `${base}/cursor${qs(params)}`, { headers: { accept: "text/event-stream", ...(headers ?? {}) } });
	expectStatus(r, 200, `cursor ${base}`);
	const frames = parseSse(r.text);
	expect(frames[frames.length - 1]).toEqual({ event: "end", data: "close" });
	return frames.slice(0, -1).map((f) => {
		const d = JSON.parse(f.data);
		expect(f.id).toBe(d.id);
		return d;
	});
}

// ---------------------------------------------------------------------------------------------------------------
// Valid documents generated from the catalog
// ---------------------------------------------------------------------------------------------------------------

function sampleString(field: string, format: FieldDef["format"], i: number): string {
	const r = randomToken(4)
		.toLowerCase()
		.replace(/[^a-z0-9]/g, "x");
	switch (format) {
		case "email":
			return `${field}${i}.${r}@example.com`;
		case "e164":
			return `+1555000${1000 + i}`;
		case "uri":
			return `https://example.com/${field}/${i}`;
		case "uuid":
			return randomUUID();
		case "hex":
			return "abcdef0123";
		case "objectId":
			return objectId();
		case "ip-or-cidr":
			return "10.0.0.1";
		case "cron":
			return "* * * * *";
		default:
			return `${field}-${i}-${r}`;
	}
}

function fit(s: string, def: FieldDef): string {
	return def.maxLength !== undefined && s.length > def.maxLength ? s.slice(s.length - def.maxLength) : s;
}

function sampleValue(field: string, def: FieldDef, i: number): unknown {
	if (def.enum) return def.type === "array" ? [def.enum[0]] : def.enum[0];
	switch (def.type) {
		case "string":
			return fit(sampleString(field, def.format, i), def);
		case "number":
		case "integer":
			return Math.max(def.minimum ?? 0, 1) + i;
		case "boolean":
			return true;
		case "date":
			return new Date().toISOString();
		case "array":
			return def.items === "object" ? [{ k: i }] : [sampleString(field, def.format, i)];
		default:
			return { k: i };
	}
}

/** A valid create body: required fields, plus the first field of every "one of" rule. */
/** A saga of the sweeper: a transaction must link to a saga that exists and that its creator sees. */
let sweeperSaga: string | undefined;

function sampleBody(col: CollectionDef, path: string, i: number): Record<string, unknown> {
	if (path === "auth/grants") return { subject: `nobody${i}@${DOMAIN}`, action: "read", object: "content:notes" };
	if (path === "financial/transactions" && sweeperSaga) return { amount: 100 + i, saga: sweeperSaga };
	// A push subscription's keys are what encrypts each message to it: the two strings a browser hands out.
	// A raw saga is created AWAITING with a ttl of 5 to 900 seconds; an email's sender is a domain the platform allows.
	if (path === "essential/sagas") return { ttl: 60 + i, job: `00000000-0000-4000-8000-00000000000${i}`, state: "AWAITING", session: `5${i}` };
	if (path === "touch/emails") return { provider: "nodemailer", to: [`to${i}@example.com`], from: `sender${i}@example.com`, subject: `subject ${i}`, text: `hello ${i}` };
	if (path === "touch/pushes")
		return { session: "0123456789abcdef01234567", endpoint: `https://push.example.com/${i}`, expiration: 1_900_000_000 + i, keys: { p256dh: `BPk${i}sample`, auth: `auth${i}` } };
	const body: Record<string, unknown> = {};
	for (const [k, def] of Object.entries(col.fields)) if (def.required && !def.internal) body[k] = sampleValue(k, def, i);
	for (const rule of col.rules ?? []) if (!rule.anyOf.some((f) => body[f] !== undefined)) body[rule.anyOf[0]] = sampleValue(rule.anyOf[0], col.fields[rule.anyOf[0]], i);
	return body;
}

// ---------------------------------------------------------------------------------------------------------------
// Set-up: the platform, two tenant clients, principals
// ---------------------------------------------------------------------------------------------------------------

beforeAll(async () => {
	p = await bootPlatform();
	root = await p.rootToken();
	DOMAIN = "tenant.example";
	aes = new Aes(JSON.parse(readFileSync(path.join(p.dataDir, "keys.json"), "utf8")).aesSecret);
	T = await createClient("tenant", ["whole"], DOMAIN);
	T2 = await createClient("tenant-2", ["manage:content", "manage:logistic"], DOMAIN2, [T.id]);
	// The operator lets T's own client create T's users.
	await ok(call(root, "POST", "/auth/grants", { body: { subject: subjectOf(T.id), action: "manage", object: "identity:users" } }), "user maker grant");
	userMaker = (await ok(p.http("POST", "/auth/token", { body: { grant_type: "client_credential", client_id: T.id, client_secret: T.secret } }), "user maker")).data.access_token;
}, 60_000);

afterAll(async () => {
	await p?.cleanup();
});
withStatusProbe(() => p.url);

// ---------------------------------------------------------------------------------------------------------------
// 1. The full 11-operation sweep over every collection of the catalog
// ---------------------------------------------------------------------------------------------------------------

describe("every collection × 11 operations (user JWT, manage grant on service:collection)", () => {
	let sweeper: Principal;
	beforeAll(async () => {
		sweeper = await login(await createUser("sweeper"));
	});

	const OPS = Object.keys(STANDARD_OPS) as StandardOp[];

	/** Request of one operation; `id` for the by-id operations. */
	function opRequest(base: string, op: StandardOp, id: string, body: unknown): { method: string; url: string; body?: unknown } {
		switch (op) {
			case "count":
				return { method: "GET", url: `${base}/count` };
			case "create":
				return { method: "POST", url: base, body };
			case "bulkCreate":
				return { method: "POST", url: `${base}/bulk`, body: { items: [body] } };
			case "list":
				return { method: "GET", url: base };
			case "cursor":
				return { method: "GET", url: `${base}/cursor` };
			case "get":
				return { method: "GET", url: `${base}/${id}` };
			case "patch":
				return { method: "PATCH", url: `${base}/${id}`, body: { description: "x" } };
			case "bulkPatch":
				return { method: "PATCH", url: `${base}/bulk${qs({ query: { id } })}`, body: { description: "x" } };
			case "remove":
				return { method: "DELETE", url: `${base}/${id}` };
			case "restore":
				return { method: "PUT", url: `${base}/${id}/restore` };
			case "destroy":
				return { method: "DELETE", url: `${base}/${id}/destroy` };
		}
	}

	test("the catalog has the spec's 44 collections and the 11 operations", () => {
		// The spec's table: 2 + 2 + 2 + 2 + 5 + 5 + 3 + 2 + 5 + 3 + 5 + 5 + 8 + 3.
		expect(COLLECTIONS).toHaveLength(52);
		expect(OPS).toHaveLength(11);
	});

	test.each(COLLECTIONS.map((c) => [c.path, c] as const))("%s", async (colPath, ref) => {
		const svc = ref.domain.name;
		const name = ref.collection.name;
		const base = `/${colPath}`;
		const object = `${svc}:${name}`;
		const c = sweeper.claims;
		const readOnly = !!ref.collection.platformWritten;
		if (colPath === "financial/transactions" && !sweeperSaga) {
			const saga = platformDoc(
				{ ttl: 60, job: "00000000-0000-4000-8000-000000000000", state: "AWAITING", session: "00", expires_at: new Date(Date.now() + 60_000).toISOString() },
				{ owner: c.uid!, cid: c.cid },
			);
			await store("essential", "sagas").insert(saga);
			sweeperSaga = saga.id;
		}

		// Without a grant: 403 on all 11 operations, before any lookup (the id need not exist).
		for (const op of OPS) {
			const rq = opRequest(base, op, objectId(), sampleBody(ref.collection, colPath, 0));
			expectStatus(await call(sweeper, rq.method, rq.url, { body: rq.body }), 403, `${object} ${op} without grant`);
		}

		const g = await grant({ subject: subjectOf(c.uid!), action: "manage", object });

		// Documents: through the API, or (platform-written collections) by the platform.
		const created: string[] = [];
		if (readOnly) {
			const docs = [0, 1, 2].map(() => platformDoc({ status: "sent" }, { owner: c.uid!, cid: c.cid }));
			await store(svc, name).insertMany(docs);
			created.push(...docs.map((d) => d.id));
			const body = sampleBody(ref.collection, colPath, 0);
			expectStatus(await call(sweeper, "POST", base, { body }), 405, "create on a platform-written collection");
			expectStatus(await call(sweeper, "POST", `${base}/bulk`, { body: { items: [body] } }), 405, "bulk create on a platform-written collection");
			expectStatus(await call(sweeper, "PATCH", `${base}/${created[0]}`, { body: { description: "x" } }), 405, "patch on a platform-written collection");
			expectStatus(await call(sweeper, "PATCH", `${base}/bulk`, { body: { description: "x" } }), 405, "bulk patch on a platform-written collection");
		} else {
			const one = await ok(call(sweeper, "POST", base, { body: sampleBody(ref.collection, colPath, 1) }), `${object} create`);
			expect(one.data).toMatchObject({ owner: c.uid, clients: [c.cid], deleted_at: null, version: "1.0.0" });
			created.push(one.data.id);
			const bulk = await ok(
				call(sweeper, "POST", `${base}/bulk`, { body: { items: [sampleBody(ref.collection, colPath, 2), sampleBody(ref.collection, colPath, 3)] } }),
				`${object} bulk create`,
			);
			expect(bulk.total).toBe(2);
			expect(bulk.items).toHaveLength(2);
			created.push(...bulk.items.map((d: Doc) => d.id));
		}

		// Reads: exactly the documents the oracle puts in the default zones (own, share), live only.
		const expected = await expectedIds(svc, name, c);
		for (const id of created) expect(expected).toContain(id);
		const list = await listIds(sweeper, base);
		expect(list.ids).toEqual(expected);
		expect(list.total).toBe(expected.length);
		expect((await ok(call(sweeper, "GET", `${base}/count`), "count")).total).toBe(expected.length);
		expect(idsOf(await cursorDocs(sweeper, base))).toEqual(expected);
		const got = await ok(call(sweeper, "GET", `${base}/${created[0]}`), "get");
		expect(got.data.id).toBe(created[0]);

		// Writes.
		if (!readOnly) {
			const patched = await ok(call(sweeper, "PATCH", `${base}/${created[0]}`, { body: { description: "patched" } }), "patch");
			expect(patched.data).toMatchObject({ id: created[0], description: "patched", updated_by: c.uid });
			const bp = await ok(call(sweeper, "PATCH", `${base}/bulk${qs({ query: { id: { $in: created.slice(1) } } })}`, { body: { description: "bulk" } }), "bulk patch");
			expect(bp).toEqual({ total: 2 });
			const after = await stored(svc, name);
			for (const id of created.slice(1)) expect(after.find((d) => d.id === id)?.description).toBe("bulk");
			expect(
				after
					.filter((d) => d.description === "bulk")
					.map((d) => d.id)
					.sort(),
			).toEqual(sorted(created.slice(1)));
		}
		const removed = await ok(call(sweeper, "DELETE", `${base}/${created[0]}`), "remove");
		expect(removed.data.id).toBe(created[0]);
		expect(removed.data.deleted_at).toEqual(expect.any(String));
		expectStatus(await call(sweeper, "GET", `${base}/${created[0]}`), 404, "get after remove");
		expect((await listIds(sweeper, base)).ids).toEqual(expected.filter((id) => id !== created[0]));
		if (colPath === "auth/apts" || colPath === "identity/sessions") {
			// A deletion there is a revocation: it cannot be undone (docs/contracts.md, "Tenants").
			expectStatus(await call(sweeper, "PUT", `${base}/${created[0]}/restore`), 400, "restore of a revoked APT or session");
		} else {
			const restored = await ok(call(sweeper, "PUT", `${base}/${created[0]}/restore`), "restore");
			expect(restored.data).toMatchObject({ id: created[0], deleted_at: null });
			expectStatus(await call(sweeper, "PUT", `${base}/${created[0]}/restore`), 404, "restore of a live document");
		}
		const destroyed = await ok(call(sweeper, "DELETE", `${base}/${created[0]}/destroy`), "destroy");
		expect(destroyed.data.id).toBe(created[0]);
		expectStatus(await call(sweeper, "GET", `${base}/${created[0]}`), 404, "get after destroy");
		expect((await stored(svc, name)).some((d) => d.id === created[0])).toBe(false);
		expect((await listIds(sweeper, base)).ids).toEqual(expected.filter((id) => id !== created[0]));

		// The grant revoked: 403 again at once, on reads and writes.
		await revoke(g);
		expectStatus(await call(sweeper, "GET", base), 403, "list after revoke");
		expectStatus(await call(sweeper, "GET", `${base}/${created[1]}`), 403, "get after revoke");
		expectStatus(await call(sweeper, "DELETE", `${base}/${created[1]}/destroy`), 403, "destroy after revoke");
	});
});

// ---------------------------------------------------------------------------------------------------------------
// 2. Principals × zones on two collections
// ---------------------------------------------------------------------------------------------------------------

describe.each([
	["content", "notes", "title"],
	["logistic", "vehicles", "name"],
] as const)("principals × zones on %s/%s", (svc, col, label) => {
	const base = `/${svc}/${col}`;
	const object = `${svc}:${col}`;
	let A: Principal, B: Principal, D: Principal, CC: Principal, APT: Principal, STRICT: Principal;
	let userA: User;
	const docs: Record<string, string> = {};

	beforeAll(async () => {
		userA = await createUser(`za-${col}`, [TEAM]);
		// B logs in through T2: its grants are in T2's domain.
		const userB = await createUser(`zb-${col}`);
		const userD = await createUser(`zd-${col}`, [TEAM]);
		A = await login(userA);
		B = await login(userB, T2);
		D = await login(userD);
		CC = await clientCredential(T);
		await grant({ subject: subjectOf(A.claims.uid!), action: "manage", object });
		await grant({ subject: subjectOf(A.claims.uid!), action: "write", object: "auth:apts" });
		await grant({ subject: subjectOf(B.claims.uid!, DOMAIN2), action: "manage", object });
		await grant({ subject: subjectOf(T.id), action: "manage", object });
		const apt = await ok(call(A, "POST", "/auth/apts", { body: { name: `apt-${col}` } }), "create apt");
		expect(apt.data.token).toMatch(/^APT-/);
		// The APT carries the claims of the JWT that created it, group memberships included.
		APT = { name: "APT", token: apt.data.token, claims: { ...(await claimsOf(apt.data.token)), groups: A.claims.groups } };
		const strictLogin = await login(userA, T, { strict: true });
		STRICT = { ...strictLogin, name: "strict" };

		const mk = async (who: Principal | string, key: string, extra: Record<string, unknown> = {}) => {
			docs[key] = (await ok(call(who, "POST", base, { body: { [label]: key, ...extra } }), `create ${key}`)).data.id;
		};
		await mk(A, "a-own");
		await mk(A, "a-shared-to-b", { shares: [B.claims.uid] });
		await mk(A, "a-other-group", { groups: [OTHER_GROUP] });
		await mk(B, "b-shared-to-a", { shares: [A.claims.uid] });
		await mk(B, "b-team", { groups: [TEAM] });
		await mk(B, "b-plain");
		await mk(root, "root-plain", { groups: [OTHER_GROUP] });
		// `shares` names principals of the caller's tenant only: T's client is one for A (the operator's token is not).
		await mk(A, "a-shared-to-cc", { shares: [T.id] });
		await mk(CC, "cc-own");
		// TEAM in A's tenant (T); "b-team" carries the same group name in T2's tenant.
		await mk(CC, "t-team", { groups: [TEAM] });
		await mk(APT, "apt-own");
		await mk(A, "a-deleted");
		await ok(call(A, "DELETE", `${base}/${docs["a-deleted"]}`), "remove");
		await mk(B, "b-shared-deleted", { shares: [A.claims.uid] });
		await ok(call(B, "DELETE", `${base}/${docs["b-shared-deleted"]}`), "remove");
	});

	const ZONE_SETS: Zone[][] = [["own"], ["share"], ["group"], ["client"], ["own", "share"], ["own", "group"], ["share", "client"], ["own", "share", "group", "client"]];

	test("the APT and the strict token carry the user's identity", () => {
		expect(APT.claims).toMatchObject({ uid: A.claims.uid, cid: T.id, subject: A.claims.subject, scope: A.claims.scope });
		expect(STRICT.claims).toMatchObject({ uid: A.claims.uid, cid: T.id, strict: true });
		expect(A.claims.groups).toEqual([TEAM]);
		expect(B.claims.cid).toBe(T2.id);
	});

	test.each(["A", "CC", "APT", "STRICT", "B"])("%s: default zones and every zone set, by header and by query", async (who) => {
		const pr = ({ A, CC, APT, STRICT, B } as Record<string, Principal>)[who];
		const def = await expectedIds(svc, col, pr.claims);
		const list = await listIds(pr, base);
		expect(list.ids).toEqual(def);
		expect(list.total).toBe(def.length);
		for (const zones of ZONE_SETS) {
			const exp = await expectedIds(svc, col, pr.claims, zones);
			const z = zones.join(",");
			const byQuery = await listIds(pr, base, { zone: z });
			expect({ zones: z, ids: byQuery.ids }).toEqual({ zones: z, ids: exp });
			expect(byQuery.total).toBe(exp.length);
			const byHeader = await listIds(pr, base, {}, { "x-zone": z });
			expect({ zones: z, ids: byHeader.ids }).toEqual({ zones: z, ids: exp });
			expect((await ok(call(pr, "GET", `${base}/count${qs({ zone: z })}`), "count")).total).toBe(exp.length);
			expect(idsOf(await cursorDocs(pr, base, {}, { "x-zone": z }))).toEqual(exp);
			expect(idsOf(await cursorDocs(pr, base, { zone: z }))).toEqual(exp);
		}
	});

	test("the zone sets select the expected documents (sanity of the fixture)", async () => {
		// Only the fixture's documents (the sweep above left others of its own in the client zone).
		const names = async (pr: Principal, z: string) =>
			(await listIds(pr, base, { zone: z })).items
				.map((d) => d[label])
				.filter((n: string) => n in docs)
				.sort();
		expect(await names(A, "own")).toEqual(["a-other-group", "a-own", "a-shared-to-b", "a-shared-to-cc", "apt-own"]);
		expect(await names(A, "share")).toEqual(["b-shared-to-a"]);
		// A group acts only in its tenant: T2's "b-team" is not in A's group zone (docs/contracts.md "Tenants").
		expect(await names(A, "group")).toEqual(["t-team"]);
		expect(await names(A, "client")).toEqual(["a-other-group", "a-own", "a-shared-to-b", "a-shared-to-cc", "apt-own", "cc-own", "t-team"]);
		expect(await names(CC, "own,share")).toEqual(["a-shared-to-cc", "cc-own", "t-team"]);
	}, 30_000);

	test("a principal without a grant gets 403 on every operation, whatever the zone", async () => {
		for (const [m, u] of [
			["GET", base],
			["GET", `${base}?zone=group`],
			["GET", `${base}/count`],
			["GET", `${base}/cursor`],
			["GET", `${base}/${docs["b-team"]}`],
			["POST", base],
			["PATCH", `${base}/${docs["b-team"]}`],
			["DELETE", `${base}/${docs["b-team"]}`],
		] as const)
			expectStatus(await call(D, m, u, { body: m === "POST" || m === "PATCH" ? { [label]: "x" } : undefined }), 403, `${m} ${u}`);
	});

	test("query zone wins over the header; an unknown zone is 400", async () => {
		const own = await expectedIds(svc, col, A.claims, ["own"]);
		expect((await listIds(A, base, { zone: "own" }, { "x-zone": "client" })).ids).toEqual(own);
		expectStatus(await call(A, "GET", `${base}${qs({ zone: "everyone" })}`), 400, "unknown zone");
		expectStatus(await call(A, "GET", base, { headers: { "x-zone": "own,world" } }), 400, "unknown zone header");
	});

	test("soft-deleted documents appear only with x-exclude-soft-delete-query", async () => {
		const all = await expectedIds(svc, col, A.claims, ["own", "share"]);
		expect(all).not.toContain(docs["a-deleted"]);
		const withDeleted = await listIds(A, base, {}, { "x-exclude-soft-delete-query": "1" });
		const docsNow = await stored(svc, col);
		const exp = sorted(docsNow.filter((d) => inZones(d, ["own", "share"], A.claims)).map((d) => d.id));
		expect(withDeleted.ids).toEqual(exp);
		expect(withDeleted.ids).toEqual(expect.arrayContaining([docs["a-deleted"], docs["b-shared-deleted"]]));
	});

	test("the strict token needs a valid x-api-key of its own client", async () => {
		const bare = await p.http("GET", base, { token: STRICT.token });
		expect(bare.status).toBe(403);
		expect(bare.body.message).toBe("strict token must have valid api-key");
		expectStatus(await p.http("GET", base, { token: STRICT.token, headers: { "x-api-key": apiKey(T2.id) } }), 403, "api key of another client");
		expectStatus(await p.http("GET", base, { token: STRICT.token, headers: { "x-api-key": apiKey(T.id, { expiration_date: Date.now() - 1000 }) } }), 403, "expired api key");
		const outside = await p.http("GET", base, { token: STRICT.token, headers: { "x-api-key": apiKey(T.id, { whitelist: ["10.0.0.0/8"] }) } });
		expect(outside.status).toBe(403);
		expect((await listIds({ ...STRICT, headers: { "x-api-key": apiKey(T.id, { whitelist: ["127.0.0.1/32"] }) } }, base)).ids).toEqual(await expectedIds(svc, col, A.claims));
	});

	test("another principal's document: 404 on get, patch, remove, restore and destroy (never 403)", async () => {
		const hidden = [docs["b-plain"], docs["root-plain"]];
		const before = await stored(svc, col);
		for (const id of hidden) {
			for (const [m, u, body] of [
				["GET", `${base}/${id}`],
				["PATCH", `${base}/${id}`, { description: "hijack" }],
				["DELETE", `${base}/${id}`],
				["PUT", `${base}/${id}/restore`],
				["DELETE", `${base}/${id}/destroy`],
			] as const)
				for (const pr of [A, APT, CC]) expectStatus(await call(pr, m, u, { body }), 404, `${pr.name} ${m} ${u}`);
		}
		// A document in view under another zone only: 404 in the requested zone.
		expectStatus(await call(A, "GET", `${base}/${docs["t-team"]}`), 404, "group document in the default zones");
		expect((await ok(call(A, "GET", `${base}/${docs["t-team"]}?zone=group`), "get in group")).data.id).toBe(docs["t-team"]);
		// The same group name in another tenant: out of the group zone.
		expectStatus(await call(A, "GET", `${base}/${docs["b-team"]}?zone=group`), 404, "another tenant's group document");
		// A foreign soft-deleted document cannot be restored; unknown and malformed ids are 404 as well.
		expectStatus(await call(D, "PUT", `${base}/${docs["a-deleted"]}/restore`), 403, "restore without grant");
		expectStatus(await call(B, "PUT", `${base}/${docs["a-deleted"]}/restore`), 404, "foreign restore");
		expectStatus(await call(A, "GET", `${base}/${objectId()}`), 404, "unknown id");
		expectStatus(await call(A, "GET", `${base}/not-an-id`), 404, "malformed id");
		// Nothing changed.
		const after = await stored(svc, col);
		for (const id of hidden) expect(after.find((d) => d.id === id)).toEqual(before.find((d) => d.id === id));
	});
});

// ---------------------------------------------------------------------------------------------------------------
// 3. Probing and constraints on content/notes (and logistic for populate)
// ---------------------------------------------------------------------------------------------------------------

describe("probing content/notes", () => {
	const base = "/content/notes";
	let owner: Principal;
	let ownerUser: User;
	let F: Principal; // grant with field ["title"]
	let fUser: User;
	const ids: Record<string, string> = {};

	beforeAll(async () => {
		ownerUser = await createUser("prober-owner", [TEAM]);
		owner = await login(ownerUser);
		fUser = await createUser("prober-f");
		F = await login(fUser);
		await grant({ subject: subjectOf(owner.claims.uid!), action: "manage", object: "content:notes" });
		await grant({ subject: subjectOf(F.claims.uid!), action: "manage", object: "content:notes", field: ["title"] });
		for (const [k, body] of Object.entries({
			shared1: { title: "s1", content: "secret-1", shares: [F.claims.uid] },
			shared2: { title: "s2", content: "secret-2", shares: [F.claims.uid], tags: ["x"] },
			ownerOnly: { title: "o", content: "secret-3" },
		}))
			ids[k] = (await ok(call(owner, "POST", base, { body }), "create")).data.id;
		ids.fOwn = (await ok(call(F, "POST", base, { body: { title: "f-own" } }), "create by F")).data.id;
	});

	test("responses and SSE frames carry only the allowed fields", async () => {
		const list = await listIds(F, base);
		expect(list.ids).toEqual(await expectedIds("content", "notes", F.claims));
		expect(list.ids).toEqual(sorted([ids.shared1, ids.shared2, ids.fOwn]));
		for (const d of list.items) expect(Object.keys(d).sort()).toEqual(["id", "title"]);
		const frames = await cursorDocs(F, base);
		expect(idsOf(frames)).toEqual(list.ids);
		for (const d of frames) expect(Object.keys(d).sort()).toEqual(["id", "title"]);
		const one = await ok(call(F, "GET", `${base}/${ids.shared1}`), "get");
		expect(one.data).toEqual({ id: ids.shared1, title: "s1" });
		const created = await ok(call(F, "POST", base, { body: { title: "f-2" } }), "create");
		expect(Object.keys(created.data).sort()).toEqual(["id", "title"]);
		const patched = await ok(call(F, "PATCH", `${base}/${created.data.id}`, { body: { title: "f-2b" } }), "patch");
		expect(patched.data).toEqual({ id: created.data.id, title: "f-2b" });
		const removed = await ok(call(F, "DELETE", `${base}/${created.data.id}`), "remove");
		expect(Object.keys(removed.data).sort()).toEqual(["id", "title"]);
		await ok(call(F, "DELETE", `${base}/${created.data.id}/destroy`), "destroy");
		// An inclusion projection narrows further, never widens.
		const proj = await listIds(F, base, { projection: { title: 1 } });
		for (const d of proj.items) expect(Object.keys(d).sort()).toEqual(["id", "title"]);
	});

	test.each([
		["filter on a hidden field", { query: { content: "secret-1" } }],
		["filter on a hidden field inside $or", { query: { $or: [{ title: "s1" }, { content: "secret-1" }] } }],
		["filter on a hidden field inside $and", { query: { $and: [{ title: "s1" }, { content: { $regex: "^secret" } }] } }],
		["filter on a hidden nested path", { query: { "props.k": 1 } }],
		["filter on a hidden field with $exists", { query: { content: { $exists: true } } }],
		["filter on a hidden field inside $not", { query: { $not: { owner: "x" } } }],
		["filter on a hidden field with $elemMatch", { query: { tags: { $elemMatch: { $eq: "x" } } } }],
		["sort on a hidden field", { pagination: { sort: { content: 1 } } }],
		["sort on a hidden platform field", { pagination: { sort: { owner: -1 } } }],
		["inclusion projection of a hidden field", { projection: { content: 1 } }],
		["exclusion projection of a hidden field", { projection: { content: 0 } }],
	])("%s → 403 (list, count and cursor)", async (_what, params) => {
		expectStatus(await call(F, "GET", `${base}${qs(params)}`), 403, "list");
		if (!("projection" in params) && !("pagination" in params)) expectStatus(await call(F, "GET", `${base}/count${qs(params)}`), 403, "count");
		expectStatus(await call(F, "GET", `${base}/cursor${qs(params)}`, { headers: { accept: "text/event-stream" } }), 403, "cursor");
	});

	test("a filter, sort and projection on the allowed field work", async () => {
		expect((await listIds(F, base, { query: { title: "s1" } })).ids).toEqual([ids.shared1]);
		expect((await listIds(F, base, { query: { title: { $in: ["s1", "o"] } } })).ids).toEqual([ids.shared1]);
		expect((await listIds(F, base, { query: { id: ids.shared2 } })).ids).toEqual([ids.shared2]);
		const s = await ok(call(F, "GET", `${base}${qs({ pagination: { sort: { title: -1 } } })}`), "sorted");
		expect(s.items.map((d: Doc) => d.title)).toEqual(["s2", "s1", "f-own"]);
	});

	test("a write body setting a field outside the allowlist → 403 (create, bulk create, patch, bulk patch); nothing changes", async () => {
		const before = await stored("content", "notes");
		expectStatus(await call(F, "POST", base, { body: { title: "t", content: "c" } }), 403, "create");
		expectStatus(await call(F, "POST", base, { body: { title: "t", shares: [] } }), 403, "create with shares");
		expectStatus(await call(F, "POST", `${base}/bulk`, { body: { items: [{ title: "t" }, { title: "u", description: "d" }] } }), 403, "bulk create");
		expectStatus(await call(F, "PATCH", `${base}/${ids.fOwn}`, { body: { content: "c" } }), 403, "patch");
		expectStatus(await call(F, "PATCH", `${base}/bulk`, { body: { content: "c" } }), 403, "bulk patch");
		expect(await stored("content", "notes")).toEqual(before);
	});

	test("populate on a hidden relation field → 403; on an allowed relation field without a target grant it is dropped silently", async () => {
		const u = await createUser("populator");
		const P = await login(u);
		const tg = await grant({ subject: subjectOf(P.claims.uid!), action: "manage", object: "logistic:travels" });
		const vg = await grant({ subject: subjectOf(P.claims.uid!), action: "manage", object: "logistic:vehicles" });
		const v = (await ok(call(P, "POST", "/logistic/vehicles", { body: { name: "van" } }), "vehicle")).data;
		const t = (await ok(call(P, "POST", "/logistic/travels", { body: { vehicle: v.id, status: "PLANNED" } }), "travel")).data;
		// With a grant on the target the relation is expanded...
		const full = await ok(call(P, "GET", `/logistic/travels/${t.id}?populate=vehicle`), "populate");
		expect(full.data.vehicle).toMatchObject({ id: v.id, name: "van" });
		const listed = await ok(call(P, "GET", `/logistic/travels${qs({ populate: [{ path: "vehicle", select: ["name"] }] })}`), "populate list");
		expect(listed.items).toHaveLength(1);
		expect(listed.items[0].vehicle).toEqual({ id: v.id, name: "van" });
		// ...without one, the path is dropped: the raw id stays, no error, nothing of the target leaks.
		await revoke(vg);
		const dropped = await ok(call(P, "GET", `/logistic/travels/${t.id}?populate=vehicle`), "populate dropped");
		expect(dropped.data.vehicle).toBe(v.id);
		const droppedList = await ok(call(P, "GET", `/logistic/travels?populate=vehicle`), "populate list dropped");
		expect(droppedList.items.map((d: Doc) => d.vehicle)).toEqual([v.id]);
		expect(idsOf(await cursorDocs(P, "/logistic/travels", { populate: "vehicle" }))).toEqual([t.id]);
		// A field allowlist without the relation field: populating it is a probe → 403. A non-relation → 400.
		await revoke(tg);
		await grant({ subject: subjectOf(P.claims.uid!), action: "read", object: "logistic:travels", field: ["status"] });
		await grant({ subject: subjectOf(P.claims.uid!), action: "read", object: "logistic:vehicles" });
		expectStatus(await call(P, "GET", `/logistic/travels/${t.id}?populate=vehicle`), 403, "populate hidden");
		expectStatus(await call(P, "GET", `/logistic/travels?populate=vehicle`), 403, "populate hidden list");
		expectStatus(await call(P, "GET", `/logistic/travels?populate=status`), 400, "populate non-relation");
		expect((await ok(call(P, "GET", `/logistic/travels/${t.id}`), "get")).data).toEqual({ id: t.id, status: "PLANNED" });
	});

	test("bulk patch touching documents outside the view changes only the visible ones; {total} counts only them", async () => {
		const outsider = (await ok(call(root, "POST", base, { body: { title: "root-note", description: "untouched" } }), "root note")).data.id;
		const before = await stored("content", "notes");
		const visible = await expectedIds("content", "notes", owner.claims);
		const target = [...visible, outsider, ids.fOwn];
		const res = await ok(call(owner, "PATCH", `${base}/bulk${qs({ query: { id: { $in: target } } })}`, { body: { description: "bulk-touched" } }), "bulk");
		expect(res).toEqual({ total: visible.length });
		const after = await stored("content", "notes");
		for (const d of after) {
			const was = before.find((x) => x.id === d.id)!;
			if (visible.includes(d.id)) expect(d.description).toBe("bulk-touched");
			else expect(d).toEqual(was);
		}
		// An empty query addresses the whole view, and only it.
		const all = await ok(call(owner, "PATCH", `${base}/bulk`, { body: { description: "bulk-all" } }), "bulk all");
		expect(all).toEqual({ total: visible.length });
		expect(sorted((await stored("content", "notes")).filter((d) => d.description === "bulk-all").map((d) => d.id))).toEqual(visible);
	});

	test("groups in a query are reduced to the caller's memberships", async () => {
		const mixed = (await ok(call(owner, "POST", base, { body: { title: "mixed", groups: [OTHER_GROUP, TEAM] } }), "create")).data.id;
		const foreign = (await ok(call(owner, "POST", base, { body: { title: "foreign", groups: [OTHER_GROUP] } }), "create")).data.id;
		const own = "own";
		// A foreign group alone matches nothing, even on the caller's own documents.
		expect((await listIds(owner, base, { zone: own, query: { groups: OTHER_GROUP } })).ids).toEqual([]);
		expect((await listIds(owner, base, { zone: own, query: { groups: { $in: [OTHER_GROUP] } } })).ids).toEqual([]);
		expect((await listIds(owner, base, { zone: own, query: { groups: { $regex: "other" } } })).ids).toEqual([]);
		// The caller's own group passes; foreign names next to it are removed.
		expect((await listIds(owner, base, { zone: own, query: { groups: { $in: [OTHER_GROUP, TEAM] } } })).ids).toEqual([mixed]);
		expect((await listIds(owner, base, { zone: own, query: { $or: [{ groups: OTHER_GROUP }, { title: "foreign" }] } })).ids).toEqual([foreign]);
		expect((await ok(call(owner, "GET", `${base}/count${qs({ zone: own, query: { groups: TEAM } })}`), "count")).total).toBe(1);
	});

	test("scope without grant → 403; grant without scope → 403; scopes narrow the token", async () => {
		// Whole scope, no grant on content:tickets.
		expectStatus(await call(owner, "GET", "/content/tickets"), 403, "scope without grant");
		// A token limited to read:content:notes through a client whose scopes allow it.
		const limited = await login(ownerUser, T2, { scopes: ["read:content:notes"] });
		expect(limited.claims.scope).toBe("read:content:notes");
		// Through T2 the owner's subjects are in T2's domain: the same grants there.
		await grant({ subject: subjectOf(owner.claims.uid!, DOMAIN2), action: "manage", object: "content:notes" });
		await grant({ subject: subjectOf(owner.claims.uid!), action: "manage", object: "logistic:vehicles" });
		await grant({ subject: subjectOf(owner.claims.uid!, DOMAIN2), action: "manage", object: "logistic:vehicles" });
		expectStatus(await call(owner, "GET", "/logistic/vehicles"), 200, "whole scope with grant");
		expectStatus(await call(limited, "GET", "/logistic/vehicles"), 403, "grant without scope");
		expectStatus(await call(limited, "POST", base, { body: { title: "x" } }), 403, "write with a read scope");
		expectStatus(await call(limited, "DELETE", `${base}/${ids.ownerOnly}`), 403, "remove with a read scope");
		const l = await listIds(limited, base);
		expect(l.ids).toEqual(await expectedIds("content", "notes", limited.claims));
		// A scope the client does not hold cannot be requested.
		const bad = await p.http("POST", "/auth/token", {
			body: { grant_type: "password", client_id: T2.id, username: ownerUser.username, password: ownerUser.password, scopes: ["read:identity:users"] },
		});
		expect(bad.status).toBe(400);
	});

	test("destroy and bulk patch need manage: a write grant → 403; read grant → writes 403", async () => {
		const u = await createUser("writer");
		const W = await login(u);
		const wg = await grant({ subject: subjectOf(W.claims.uid!), action: "write", object: "content:notes" });
		const id = (await ok(call(W, "POST", base, { body: { title: "w" } }), "create")).data.id;
		await ok(call(W, "PATCH", `${base}/${id}`, { body: { title: "w2" } }), "patch");
		await ok(call(W, "GET", `${base}/${id}`), "get (write ⊇ read)");
		await ok(call(W, "DELETE", `${base}/${id}`), "remove");
		await ok(call(W, "PUT", `${base}/${id}/restore`), "restore");
		expectStatus(await call(W, "DELETE", `${base}/${id}/destroy`), 403, "destroy with write");
		expectStatus(await call(W, "PATCH", `${base}/bulk`, { body: { title: "all" } }), 403, "bulk patch with write");
		await revoke(wg);
		await grant({ subject: subjectOf(W.claims.uid!), action: "read", object: "content:notes" });
		expect((await listIds(W, base)).ids).toEqual([id]);
		expectStatus(await call(W, "POST", base, { body: { title: "r" } }), 403, "create with read");
		expectStatus(await call(W, "PATCH", `${base}/${id}`, { body: { title: "r" } }), 403, "patch with read");
		expectStatus(await call(W, "DELETE", `${base}/${id}`), 403, "remove with read");
		expect((await stored("content", "notes")).find((d) => d.id === id)).toMatchObject({ title: "w2", deleted_at: null });
	});

	test("service:* grants apply to every collection of the service, and only there", async () => {
		const CC2 = await clientCredential(T2);
		await grant({ subject: subjectOf(T2.id, DOMAIN2), action: "read", object: "logistic:*" });
		expectStatus(await call(CC2, "GET", "/logistic/vehicles"), 200, "vehicles via logistic:*");
		expectStatus(await call(CC2, "GET", "/logistic/cargoes/count"), 200, "cargoes via logistic:*");
		expectStatus(await call(CC2, "POST", "/logistic/vehicles", { body: { name: "x" } }), 403, "write with read logistic:*");
		expectStatus(await call(CC2, "GET", base), 403, "another service");
	});

	test("location grants: 127.0.0.1/32 allows, 10.0.0.0/8 → 403; time grants: open window allows, closed → 403", async () => {
		const u = await createUser("located");
		const L = await login(u);
		const s = subjectOf(L.claims.uid!);
		const yes = await grant({ subject: s, action: "read", object: "content:notes", location: ["127.0.0.1/32"] });
		expectStatus(await call(L, "GET", base), 200, "inside location");
		await revoke(yes);
		const no = await grant({ subject: s, action: "read", object: "content:notes", location: ["10.0.0.0/8"] });
		expectStatus(await call(L, "GET", base), 403, "outside location");
		expectStatus(await call(L, "GET", `${base}/count`), 403, "outside location (count)");
		await revoke(no);
		const open = await grant({ subject: s, action: "read", object: "content:notes", time: [{ cron_exp: "* * * * *", duration: 120 }] });
		expectStatus(await call(L, "GET", base), 200, "open window");
		await revoke(open);
		const m = (new Date().getUTCMinutes() + 30) % 60;
		const closed = await grant({ subject: s, action: "read", object: "content:notes", time: [{ cron_exp: `${m} * * * *`, duration: 60 }] });
		expectStatus(await call(L, "GET", base), 403, "closed window");
		// Windows combine by OR with each other, grants by OR with each other.
		const both = await grant({
			subject: s,
			action: "read",
			object: "content:notes",
			time: [
				{ cron_exp: `${m} * * * *`, duration: 60 },
				{ cron_exp: "* * * * *", duration: 120 },
			],
		});
		expectStatus(await call(L, "GET", base), 200, "one open window of two");
		await revoke(both);
		await revoke(closed);
		expectStatus(await call(L, "GET", base), 403, "no grant left");
	});

	test("row filters with {{token.uid}}: exactly the matching documents of the view; entries and grants combine by OR", async () => {
		const u = await createUser("filtered");
		const V = await login(u);
		const vid = V.claims.uid!;
		const mine = (await ok(call(owner, "POST", base, { body: { title: "for-v", content: vid, shares: [vid] } }), "c")).data.id;
		const open = (await ok(call(owner, "POST", base, { body: { title: "open", content: "other", shares: [vid] } }), "c")).data.id;
		await ok(call(owner, "POST", base, { body: { title: "closed", content: "other", shares: [vid] } }), "c");
		await ok(call(owner, "POST", base, { body: { title: "not-shared", content: vid } }), "c");
		const g1 = await grant({ subject: subjectOf(vid), action: "manage", object: "content:notes", filter: [JSON.stringify({ content: "{{token.uid}}" })] });
		const ex1 = await expectedIds("content", "notes", V.claims, ["own", "share"], (d) => d.content === vid);
		expect(ex1).toEqual([mine]);
		expect((await listIds(V, base)).ids).toEqual(ex1);
		expect((await ok(call(V, "GET", `${base}/count`), "count")).total).toBe(1);
		expect(idsOf(await cursorDocs(V, base))).toEqual(ex1);
		expectStatus(await call(V, "GET", `${base}/${open}`), 404, "outside the row filter");
		expectStatus(await call(V, "PATCH", `${base}/${open}`, { body: { title: "x" } }), 404, "patch outside the row filter");
		expect(await ok(call(V, "PATCH", `${base}/bulk`, { body: { description: "v" } }), "bulk")).toEqual({ total: 1 });
		// The user's query narrows inside the row filter, never widens it.
		expect((await listIds(V, base, { query: { $or: [{ title: "open" }, { title: "for-v" }] } })).ids).toEqual([mine]);
		// A second grant widens by OR.
		await grant({
			subject: subjectOf(vid),
			action: "read",
			object: "content:notes",
			filter: [JSON.stringify({ title: "open" }), JSON.stringify({ content: "{{token.department}}" })],
		});
		const ex2 = await expectedIds("content", "notes", V.claims, ["own", "share"], (d) => d.content === vid || d.title === "open");
		expect(ex2).toEqual(sorted([mine, open]));
		expect((await listIds(V, base)).ids).toEqual(ex2);
		// A manage grant with a filter on the missing claim only: granted, nothing visible.
		await revoke(g1);
		const u2 = await createUser("filtered-2");
		const V2 = await login(u2);
		await grant({ subject: subjectOf(V2.claims.uid!), action: "read", object: "content:notes", filter: [JSON.stringify({ content: "{{token.department}}" })] });
		await ok(call(owner, "POST", base, { body: { title: "for-v2", shares: [V2.claims.uid] } }), "c");
		expect(await listIds(V2, base)).toEqual({ ids: [], total: 0, items: [] });
	});

	test("RBAC configuration gives a role access; removing it takes effect at once", async () => {
		const editor = await createUser("editor", ["@editor"]);
		const E = await login(editor);
		expect(E.claims.subject.split(" ")).toContain(`@editor@${DOMAIN}`);
		const mine = (await ok(call(owner, "POST", base, { body: { title: "for-editor", shares: [E.claims.uid] } }), "c")).data.id;
		expectStatus(await call(E, "GET", base), 403, "before RBAC");
		const value = [
			{ domain: DOMAIN, roles: { editor: ["notes-rw"], viewer: ["notes-r"] }, permissions: { "notes-rw": ["write:content:notes"], "notes-r": ["read:content:notes"] } },
		];
		// A configuration owned by a client that does not register the domain is refused (docs/contracts.md "Tenants").
		const foreignClient = (await ok(call(root, "POST", "/domain/clients", { body: { name: "foreign", domains: ["foreign.example"] } }), "client")).data.id;
		const refused = await call(root, "POST", "/context/configs", { body: { key: "RBAC", eid: foreignClient, value } });
		expectStatus(refused, 400, "RBAC of a client without the domain");
		expect(refused.body).toEqual({ statusCode: 400, message: `value[0].domain: '${DOMAIN}' is not a domain of client ${foreignClient}`, error: "Bad Request" });
		const foreign = (await ok(call(root, "POST", "/context/configs", { body: { key: "RBAC", eid: foreignClient, value: [] } }), "config")).data.id;
		expectStatus(await call(E, "GET", base), 403, "before RBAC of the tenant");
		const cfg = (await ok(call(root, "POST", "/context/configs", { body: { key: "RBAC", eid: T.id, value } }), "config")).data.id;
		expect((await listIds(E, base)).ids).toEqual([mine]);
		await ok(call(E, "PATCH", `${base}/${mine}`, { body: { content: "edited" } }), "patch via role");
		expectStatus(await call(E, "DELETE", `${base}/${mine}/destroy`), 403, "write role cannot destroy");
		expectStatus(await call(E, "GET", "/content/tickets"), 403, "role limited to its permissions");
		await ok(call(root, "DELETE", `/context/configs/${cfg}`), "remove config");
		expectStatus(await call(E, "GET", base), 403, "after RBAC removal");
		await ok(call(root, "PUT", `/context/configs/${cfg}/restore`), "restore config");
		expectStatus(await call(E, "GET", base), 200, "after RBAC restore");
		await ok(call(root, "PATCH", `/context/configs/${cfg}`, { body: { value: [{ ...value[0], roles: { viewer: ["notes-r"] } }] } }), "change config");
		expectStatus(await call(E, "GET", base), 403, "after the role is dropped from the config");
		await ok(call(root, "DELETE", `/context/configs/${foreign}/destroy`), "destroy");
	});

	test("/auth/can: body fields, strict obj, policies headers, partial fields", async () => {
		const can = async (who: Principal, body: unknown, headers?: Record<string, string>) => (await ok(call(who, "POST", "/auth/can", { body, headers }), "can")).data;
		expect(await can(owner, { action: "read", object: "content:notes" })).toEqual({ granted: true });
		expect(await can(owner, { action: "manage", object: "content:notes" })).toEqual({ granted: true });
		expect(await can(owner, { action: "read", object: "content:tickets" })).toEqual({ granted: false });
		// service:* applies unless strict obj.
		const CC2 = await clientCredential(T2);
		expect(await can(CC2, { action: "read", object: "logistic:vehicles" })).toEqual({ granted: true });
		expect(await can(CC2, { action: "read", object: "logistic:vehicles", strict: "obj" })).toEqual({ granted: false });
		expect(await can(CC2, { action: "read", object: "logistic:*", strict: "obj" })).toEqual({ granted: true });
		// Policies.
		const withPolicies = await can(CC2, { action: "read", object: "logistic:vehicles" }, { "x-can-with-policies": "1" });
		expect(withPolicies.granted).toBe(true);
		expect(withPolicies.policies).toEqual([{ subject: subjectOf(T2.id, DOMAIN2), action: "read", object: "logistic:*", field: null, filter: null }]);
		const ownerSubject = subjectOf(owner.claims.uid!);
		const idPolicies = await can(owner, { action: "read", object: "content:notes" }, { "x-can-with-id-policies": "1" });
		expect(idPolicies.granted).toBe(true);
		expect(idPolicies.policies.length).toBeGreaterThan(0);
		for (const pol of idPolicies.policies) expect(pol.subject).toBe(ownerSubject);
		expect(idPolicies.policies).toEqual(expect.arrayContaining([expect.objectContaining({ action: "manage", object: "logistic:vehicles" })]));
		// Fields: partial → granted false with denied and allowed fields.
		expect(await can(F, { action: "read", object: "content:notes", fields: ["title"] })).toEqual({ granted: true });
		expect(await can(F, { action: "read", object: "content:notes", fields: ["title", "content"] })).toEqual({
			granted: false,
			denied_fields: ["content"],
			allowed_fields: ["title"],
		});
		expect(await can(owner, { action: "read", object: "content:notes", fields: ["title", "content"] })).toEqual({ granted: true });
		// ip and tz drive location and time grants.
		const u = await createUser("can-located");
		const L = await login(u);
		await grant({ subject: subjectOf(L.claims.uid!), action: "read", object: "content:posts", location: ["10.0.0.0/8"] });
		expect(await can(L, { action: "read", object: "content:posts" })).toEqual({ granted: false });
		expect(await can(L, { action: "read", object: "content:posts", ip: "10.1.2.3" })).toEqual({ granted: true });
		expect(await can(L, { action: "read", object: "content:posts", ip: "10.1.2.3", tz: "Europe/Paris" })).toEqual({ granted: true });
		// Subjects: an override the token does not hold needs the read:auth:grants scope AND a read grant on auth:grants
		// (the whole scope alone no longer lets any user list another principal's grants).
		const limited = await login(ownerUser, T2);
		expectStatus(await call(limited, "POST", "/auth/can", { body: { action: "read", object: "content:notes", subjects: [subjectOf(T2.id, DOMAIN2)] } }), 403, "foreign subjects");
		expect(await can(limited, { action: "read", object: "content:notes", subjects: [subjectOf(owner.claims.uid!, DOMAIN2)] })).toEqual({ granted: true });
		expectStatus(
			await call(owner, "POST", "/auth/can", { body: { action: "read", object: "logistic:cargoes", subjects: [subjectOf(T2.id, DOMAIN2)] } }),
			403,
			"whole scope, no grant",
		);
		await grant({ subject: ownerSubject, action: "read", object: "auth:grants" });
		expect(await can(owner, { action: "manage", object: "identity:users", subjects: [subjectOf(T.id)] })).toEqual({ granted: true });
		// Only subjects of its own tenant: a grant belongs to its subject's domain (T2 is another tenant).
		expectStatus(
			await call(owner, "POST", "/auth/can", { body: { action: "read", object: "logistic:cargoes", subjects: [subjectOf(T2.id, DOMAIN2)] } }),
			403,
			"another tenant's subject",
		);
		// Bad bodies.
		for (const body of [
			{},
			{ action: "read" },
			{ object: "content:notes" },
			{ action: "read", object: "content" },
			{ action: "read", object: "content:notes", strict: "yes" },
			{ action: "read", object: "content:notes", fields: "title" },
			{ action: "read", object: "content:notes", bogus: 1 },
		])
			expectStatus(await call(owner, "POST", "/auth/can", { body }), 400, JSON.stringify(body));
	});

	test.each([
		["a bare name", { subject: "nobody" }, /subject/],
		["a role without domain", { subject: "@editor" }, /subject/],
		["a role of an unregistered domain", { subject: "@editor@unregistered.example" }, /subject/],
		["an id of an unregistered domain", { subject: "0123456789abcdef01234567@unregistered.example" }, /subject/],
		["a subject with whitespace", { subject: "a b@root.local" }, /subject/],
		["a missing subject", { subject: undefined }, /subject/],
		["a bad action", { action: "READ!" }, /action/],
		["a bad object", { object: "content" }, /object/],
		["a bad cron", { time: [{ cron_exp: "not a cron", duration: 60 }] }, /time\[0\]\.cron_exp/],
		["a cron with too many fields", { time: [{ cron_exp: "* * * * * * *", duration: 60 }] }, /time\[0\]\.cron_exp/],
		["a zero duration", { time: [{ cron_exp: "* * * * *", duration: 0 }] }, /time\[0\]\.duration/],
		["a negative duration", { time: [{ cron_exp: "* * * * *", duration: -5 }] }, /time\[0\]\.duration/],
		["a bad CIDR", { location: ["10.0.0.0/33"] }, /location\[0\]/],
		["a bad IP", { location: ["127.0.0.1/32", "999.1.1.1"] }, /location\[1\]/],
		["a filter that is not JSON", { filter: ["{bad json"] }, /filter\[0\]/],
		["a filter that is a JSON array", { filter: ["[1]"] }, /filter\[0\]/],
		["a filter with $where", { filter: ['{"$where":"true"}'] }, /filter\[0\]/],
		["a field list with a bad path", { field: ["title", "__proto__"] }, /field\[1\]/],
	])("grant validation: %s → 400 naming the field", async (_what, patch, re) => {
		const body: Record<string, unknown> = { subject: subjectOf(owner.claims.uid!), action: "read", object: "content:notes", ...patch };
		for (const k of Object.keys(body)) if (body[k] === undefined) delete body[k];
		const before = (await stored("auth", "grants")).length;
		const r = await call(root, "POST", "/auth/grants", { body });
		expect(r.status).toBe(400);
		expect(r.body).toMatchObject({ statusCode: 400, error: "Bad Request" });
		expect(r.body.message).toMatch(re);
		expect((await stored("auth", "grants")).length).toBe(before);
	});

	test("valid grant subject forms are accepted", async () => {
		for (const subject of [
			`@editor@${DOMAIN}`,
			subjectOf(owner.claims.uid!),
			subjectOf(T.id),
			`${ownerUser.username}@${DOMAIN}`,
			`${TEAM}@${DOMAIN}`,
			`eng.example.com@${DOMAIN}`,
		]) {
			const id = await grant({ subject, action: "read", object: "content:posts" });
			await revoke(id);
		}
	});

	test("a group grant (group@domain) applies to the group's members only; a username grant to that user", async () => {
		const member = await login(await createUser("member", [TEAM]));
		const outsider = await login(await createUser("outsider"));
		const g = await grant({ subject: `${TEAM}@${DOMAIN}`, action: "read", object: "content:posts" });
		// Written in the member's tenant (T): a group acts only there; the root tenant's post of the same group is not reached.
		const w = await grant({ subject: subjectOf(owner.claims.uid!), action: "write", object: "content:posts" });
		const post = (await ok(call(owner, "POST", "/content/posts", { body: { title: "team post", groups: [TEAM] } }), "post")).data.id;
		await revoke(w);
		await ok(call(root, "POST", "/content/posts", { body: { title: "root tenant's team post", groups: [TEAM] } }), "root post");
		expect((await listIds(member, "/content/posts", { zone: "group" })).ids).toEqual([post]);
		expectStatus(await call(outsider, "GET", "/content/posts"), 403, "not a member");
		await revoke(g);
		expectStatus(await call(member, "GET", "/content/posts"), 403, "group grant revoked");
		const u = await createUser("by-name");
		const N = await login(u);
		await grant({ subject: `${u.username}@${DOMAIN}`, action: "read", object: "content:posts" });
		expectStatus(await call(N, "GET", "/content/posts"), 200, "username grant");
	});

	test("a lookup by ref is a query on the ref field: hidden ref → 403; foreign ref → 404", async () => {
		const ref = `ref-${randomToken(6)}`;
		const id = (await ok(call(owner, "POST", base, { body: { title: "with ref", ref, shares: [F.claims.uid] } }), "create")).data.id;
		expect((await ok(call(owner, "GET", `${base}/${ref}?ref=true`), "by ref")).data.id).toBe(id);
		expectStatus(await call(F, "GET", `${base}/${ref}?ref=true`), 403, "ref hidden by the field list");
		expectStatus(await call(F, "GET", `${base}/no-such-ref?ref=true`), 403, "ref hidden by the field list (unknown ref)");
		expect((await ok(call(F, "GET", `${base}/${id}`), "by id")).data).toEqual({ id, title: "with ref" });
		const rootRef = `ref-${randomToken(6)}`;
		await ok(call(root, "POST", base, { body: { title: "root ref", ref: rootRef } }), "root doc");
		expectStatus(await call(owner, "GET", `${base}/${rootRef}?ref=true`), 404, "foreign ref");
	});

	test("grant row filters in document-store notation: $regex/$options, $eq, and $ne/$nin on arrays (no element equals)", async () => {
		const u = await createUser("notation");
		const N = await login(u);
		const nid = N.claims.uid!;
		const mk = async (body: Record<string, unknown>) => (await ok(call(owner, "POST", base, { body: { ...body, shares: [nid] } }), "create")).data.id as string;
		const pub = await mk({ title: "Public note", tags: ["secret", "x"] });
		const plain = await mk({ title: "plain", content: "c1", tags: [] });
		const secret = await mk({ title: "other", content: "c2", tags: ["secret"] });
		const mixed = await mk({ title: "mixed", content: "c3", tags: ["x", "secret"] });
		const open = await mk({ title: "open", content: "c4", tags: ["x"] });
		const untagged = await mk({ title: "untagged", content: "c5" });
		const g1 = await grant({ subject: subjectOf(nid), action: "read", object: "content:notes", filter: [JSON.stringify({ title: { $regex: "^pub", $options: "i" } })] });
		expect((await listIds(N, base)).ids).toEqual([pub]);
		await revoke(g1);
		const g2 = await grant({ subject: subjectOf(nid), action: "read", object: "content:notes", filter: [JSON.stringify({ content: { $eq: "c1" } })] });
		expect((await listIds(N, base)).ids).toEqual([plain]);
		await revoke(g2);
		const g3 = await grant({ subject: subjectOf(nid), action: "read", object: "content:notes", filter: [JSON.stringify({ tags: { $nin: ["secret"] } })] });
		const visible = sorted([plain, open, untagged]);
		expect((await listIds(N, base)).ids).toEqual(visible);
		expect((await ok(call(N, "GET", `${base}/count`), "count")).total).toBe(3);
		expect(idsOf(await cursorDocs(N, base))).toEqual(visible);
		for (const hidden of [pub, secret, mixed]) expectStatus(await call(N, "GET", `${base}/${hidden}`), 404, "outside the $nin row filter");
		await revoke(g3);
		await grant({ subject: subjectOf(nid), action: "read", object: "content:notes", filter: [JSON.stringify({ tags: { $ne: "secret" } })] });
		expect((await listIds(N, base)).ids).toEqual(visible);
		// The user's own queries have the same meaning.
		expect((await listIds(N, base, { query: { tags: { $ne: "x" } } })).ids).toEqual(sorted([plain, untagged]));
		expect((await listIds(N, base, { query: { tags: { $exists: true } } })).ids).toEqual(sorted([plain, open]));
		expect((await listIds(N, base, { query: { tags: { $exists: false } } })).ids).toEqual([untagged]);
	});

	test("a collection action called through the broker without a token → 502", async () => {
		await expect(p.broker.call("content.notes.list", {})).rejects.toMatchObject({ code: 502 });
		await expect(p.broker.call("content.notes.create", { body: { title: "x" } })).rejects.toMatchObject({ code: 502 });
		await expect(p.broker.call("logistic.vehicles.destroy", { params: { id: objectId() } })).rejects.toMatchObject({ code: 502 });
	});
});
