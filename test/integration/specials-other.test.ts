/**
 * Issue 12 parts 3 and 4 (docs/contracts.md "Other special actions"): collect (special/stats), generate
 * (conjoint/accounts), resolve (logistic/locations, logistic/travels) with their exact answers, 400s and 404s; then,
 * for every special of this part and the three searches, the authority layer: allowed, no scope, no grant, outside
 * the view, other tenant (two tenants set up by the operator, as in tenancy-users.test.ts).
 */
import { randomBytes } from "crypto";
import { bootPlatform, type TestPlatform } from "../helpers/platform";
import { withStatusProbe } from "../helpers/status-probe";
import { createClient, createUser, errorBody, tokenOf } from "../helpers/auth";
import { accountIdOf } from "../../services/conjoint/accounts";
import { haversine } from "../../services/logistic/resolve";

jest.setTimeout(180_000);

let p: TestPlatform;
let root: string;
const PASSWORD = "Specials-Pass-123!";

async function ok(r: Promise<{ status: number; text: string; body: any }>, what: string): Promise<any> {
	const res = await r;
	if (res.status !== 200) throw new Error(`${what}: ${res.status} ${res.text}`);
	return res.body;
}

function grant(token: string, subject: string, action: string, object: string, extra: Record<string, unknown> = {}) {
	return ok(p.http("POST", "/auth/grants", { token, body: { subject, action, object, ...extra } }), `grant ${subject} ${action} ${object}`);
}

async function user(grants: Array<[string, string, Record<string, unknown>?]>, scopes?: string[]) {
	const username = `sp-${randomBytes(4).toString("hex")}`;
	const u = await createUser(p.http, root, { username, password: PASSWORD, subjects: [] });
	for (const [action, object, extra] of grants) await grant(root, `${u.id}@${p.root.domain}`, action, object, extra);
	const login = (s?: string[]) => tokenOf(p.http, { grant_type: "password", client_id: p.root.client_id, username, password: PASSWORD, ...(s ? { scopes: s } : {}) });
	return { id: u.id as string, token: (await login(scopes)).access_token as string, narrow: async (s: string[]) => (await login(s)).access_token as string };
}

const post = (token: string, path: string, body: unknown, headers?: Record<string, string>) => p.http("POST", path, { token, body, headers });

beforeAll(async () => {
	p = await bootPlatform();
	root = await p.rootToken();
}, 60_000);

afterAll(async () => {
	await p?.cleanup();
});
withStatusProbe(() => p.url);

describe("collect: the caller's tenant's stats summed over the range", () => {
	let seq = 1;
	const inc = (service: string, collection: string, counter: string, day: string, clients: string[], n = 1) =>
		Promise.all(
			Array.from({ length: n }, () => p.broker.call("special.stats.increment", { seq: seq++, service, collection, counter, ts_ms: Date.parse(`${day}T12:00:00Z`), clients })),
		);
	const OTHER = "0123456789abcdef01234567";

	beforeAll(async () => {
		const me = p.root.client_id;
		await inc("content", "notes", "created", "2024-12-31", [me], 1);
		await inc("content", "notes", "created", "2025-01-15", [me], 3);
		await inc("content", "notes", "updated", "2025-01-20", [me], 2);
		await inc("content", "notes", "deleted", "2025-02-01", [me], 1);
		await inc("career", "products", "created", "2025-01-16", [me], 4);
		await inc("content", "notes", "created", "2025-01-15", [OTHER], 7);
	});

	test("daily buckets from..to, per service and collection; another tenant's counts never added", async () => {
		const r = await post(root, "/special/stats/collect?zone=client", { period: "daily", from: "2025-01-01", to: "2025-01-31" });
		expect(r.status).toBe(200);
		expect(r.body).toEqual({
			items: [
				{ service: "career", collection: "products", period: "daily", from: "2025-01-16", to: "2025-01-16", created: 4, updated: 0, deleted: 0, restored: 0 },
				{ service: "content", collection: "notes", period: "daily", from: "2025-01-15", to: "2025-01-20", created: 3, updated: 2, deleted: 0, restored: 0 },
			],
			total: 2,
		});
	});

	test("monthly and yearly, one service, one collection, open bounds", async () => {
		const m = await post(root, "/special/stats/collect?zone=client", { period: "monthly", service: "content", collection: "notes", from: "2025-01", to: "2025-02-28" });
		expect(m.body).toEqual({
			items: [{ service: "content", collection: "notes", period: "monthly", from: "2025-01", to: "2025-02", created: 3, updated: 2, deleted: 1, restored: 0 }],
			total: 1,
		});
		const y = await post(root, "/special/stats/collect?zone=client", { period: "yearly", service: "content", to: "2024" });
		expect(y.body).toEqual({
			items: [{ service: "content", collection: "notes", period: "yearly", from: "2024", to: "2024", created: 1, updated: 0, deleted: 0, restored: 0 }],
			total: 1,
		});
	});

	test("a user reads its tenant's stats (zone client by default); fields its grant hides are not summed", async () => {
		const u = await user([["collect", "special:stats", { field: ["service", "collection", "period", "created"] }]]);
		expect((await post(u.token, "/special/stats/collect?zone=own", { period: "monthly", service: "career" })).body).toEqual({ items: [], total: 0 });
		const r = await post(u.token, "/special/stats/collect?zone=client", { period: "monthly", service: "career", collection: "products", to: "2025-06" });
		expect(r.body).toEqual({ items: [{ service: "career", collection: "products", period: "monthly", created: 4 }], total: 1 });
		expect((await post(u.token, "/special/stats/collect", { period: "monthly", service: "career", collection: "products", to: "2025-06" })).body).toEqual(r.body);
	});

	test("bad bodies: 400 with the exact message", async () => {
		const cases: Array<[unknown, string]> = [
			[{}, "period is required"],
			[{ period: "weekly" }, "period must be one of daily, monthly, yearly"],
			[{ period: "daily", from: "yesterday" }, "from must be a date: YYYY, YYYY-MM, YYYY-MM-DD or ISO 8601"],
			[{ period: "daily", to: 20250101 }, "to must be a date: YYYY, YYYY-MM, YYYY-MM-DD or ISO 8601"],
			[{ period: "daily", from: "2025-02-01", to: "2025-01-01" }, "from must not be after to"],
			[{ period: "daily", service: "nope" }, "service nope does not exist"],
			[{ period: "daily", service: "content", collection: "products" }, "collection products does not exist in content"],
			[{ period: "daily", tenant: "x" }, "tenant is not allowed"],
			[[1], "body must be a JSON object"],
		];
		for (const [body, message] of cases) {
			const r = await post(root, "/special/stats/collect", body);
			expect({ body, status: r.status, answer: r.body }).toEqual({ body, status: 400, answer: errorBody(400, message) });
		}
	});
});

describe("generate: one messaging account per user", () => {
	test("the first call creates it, later (and concurrent) calls answer the same", async () => {
		const u = await user([
			["generate", "conjoint:accounts"],
			["read", "conjoint:accounts"],
		]);
		const answers = await Promise.all(Array.from({ length: 6 }, (_, i) => post(u.token, "/conjoint/accounts/generate", i === 0 ? { name: "Ann" } : {})));
		for (const a of answers) expect(a.status).toBe(200);
		const id = accountIdOf(u.id);
		expect(new Set(answers.map((a) => a.body.data.id))).toEqual(new Set([id]));
		const again = await post(u.token, "/conjoint/accounts/generate", { name: "Other" });
		expect(again.body.data).toMatchObject({ id, user: u.id, owner: u.id, clients: [p.root.client_id] });
		expect(again.body.data.name).toBe(answers.find((a) => a.body.data.name !== u.id)?.body.data.name ?? u.id);
		const list = await p.http("GET", "/conjoint/accounts/count", { token: u.token });
		expect(list.body).toEqual({ total: 1 });
	});

	test("a soft-deleted account answers 409; restored, it is answered again", async () => {
		const u = await user([
			["generate", "conjoint:accounts"],
			["write", "conjoint:accounts"],
		]);
		const a = (await ok(post(u.token, "/conjoint/accounts/generate", { name: "Bea" }), "generate")).data;
		expect(a).toMatchObject({ name: "Bea", user: u.id });
		await ok(p.http("DELETE", `/conjoint/accounts/${a.id}`, { token: u.token }), "delete");
		const r = await post(u.token, "/conjoint/accounts/generate", {});
		expect(r.status).toBe(409);
		expect(r.body).toEqual({ statusCode: 409, message: `account ${a.id} is deleted: restore it with PUT /conjoint/accounts/${a.id}/restore`, error: "Conflict" });
		await ok(p.http("PUT", `/conjoint/accounts/${a.id}/restore`, { token: u.token }), "restore");
		expect((await post(u.token, "/conjoint/accounts/generate", {})).body.data).toMatchObject({ id: a.id, name: "Bea" });
	});

	test("bad bodies: 400", async () => {
		const cases: Array<[unknown, string]> = [
			[{ name: "" }, "name must be a non-empty string of at most 200 characters"],
			[{ name: "x".repeat(201) }, "name must be a non-empty string of at most 200 characters"],
			[{ name: 5 }, "name must be a non-empty string of at most 200 characters"],
			[{ user: "someone" }, "user is not allowed"],
			["text", "body must be a JSON object"],
		];
		for (const [body, message] of cases) {
			const r = await post(root, "/conjoint/accounts/generate", body);
			expect({ body, status: r.status, answer: r.body }).toEqual({ body, status: 400, answer: errorBody(400, message) });
		}
	});
});

describe("resolve: locations and travels", () => {
	const PARIS = { lat: 48.8566, lng: 2.3522 };
	const LONDON = { lat: 51.5074, lng: -0.1278 };
	const BERLIN = { lat: 52.52, lng: 13.405 };
	const ids: Record<string, string> = {};
	let u: Awaited<ReturnType<typeof user>>;

	beforeAll(async () => {
		u = await user([
			["resolve", "logistic:locations"],
			["resolve", "logistic:travels"],
			["write", "logistic:locations"],
			["read", "logistic:locations"],
		]);
		ids.paris = (await ok(post(u.token, "/logistic/locations", { name: "Paris office", address: "Rue de Rivoli", ...PARIS }), "paris")).data.id;
		ids.london = (await ok(post(u.token, "/logistic/locations", { name: "London depot", address: "Thames wharf", ...LONDON }), "london")).data.id;
		ids.nocoords = (await ok(post(u.token, "/logistic/locations", { name: "Somewhere" }), "nocoords")).data.id;
		// Root's Berlin location: outside u's view.
		ids.berlin = (await ok(post(root, "/logistic/locations", { name: "Berlin hub", ...BERLIN }), "berlin")).data.id;
	});

	test("{ lat, lng }: the nearest location of the view, with its distance in metres", async () => {
		const near = { lat: 50.0, lng: 1.0 };
		const r = await post(u.token, "/logistic/locations/resolve", near);
		expect(r.status).toBe(200);
		const expected = Math.round(haversine(near, PARIS) * 10) / 10;
		expect(haversine(near, PARIS)).toBeLessThan(haversine(near, LONDON));
		expect(r.body).toEqual({ data: expect.objectContaining({ id: ids.paris, name: "Paris office", ...PARIS, distance: expected }) });
		// Paris–London is about 343.5 km.
		const london = await post(u.token, "/logistic/locations/resolve", { lat: 51.5, lng: -0.13 });
		expect(london.body.data.id).toBe(ids.london);
		expect(Math.round(haversine(PARIS, LONDON) / 100)).toBe(3436);
	});

	test("{ lat, lng } near a location outside the view: the nearest one inside it", async () => {
		const r = await post(u.token, "/logistic/locations/resolve", { lat: 52.5, lng: 13.4 });
		expect(r.body.data.id).toBe(ids.paris);
		expect(r.text).not.toContain(ids.berlin);
		expect((await post(root, "/logistic/locations/resolve", { lat: 52.5, lng: 13.4 })).body.data).toMatchObject({ id: ids.berlin });
	});

	test("{ query }: the best text match of the view, with its score", async () => {
		const r = await post(u.token, "/logistic/locations/resolve", { query: "thames" });
		expect(r.body).toEqual({ data: expect.objectContaining({ id: ids.london, score: expect.any(Number) }) });
		const none = await post(u.token, "/logistic/locations/resolve", { query: "berlin" });
		expect(none.status).toBe(404);
		expect(none.body).toEqual(errorBody(404, "no location matches the query"));
	});

	test("travels: ids of the view or points → distance, duration at speed_kmh (default 50), path", async () => {
		const d = haversine(PARIS, LONDON);
		const r = await post(u.token, "/logistic/travels/resolve", { origin: ids.paris, destination: ids.london });
		expect(r.status).toBe(200);
		expect(r.body).toEqual({ data: { distance: Math.round(d * 10) / 10, duration: Math.round(d / (50 / 3.6)), path: [PARIS, LONDON] } });
		const fast = await post(u.token, "/logistic/travels/resolve", { origin: PARIS, destination: ids.london, speed_kmh: 800 });
		expect(fast.body.data).toEqual({ distance: Math.round(d * 10) / 10, duration: Math.round(d / (800 / 3.6)), path: [PARIS, LONDON] });
		const same = await post(u.token, "/logistic/travels/resolve", { origin: PARIS, destination: PARIS });
		expect(same.body.data).toEqual({ distance: 0, duration: 0, path: [PARIS, PARIS] });
	});

	test("travels: a location outside the view answers 404 like a missing one", async () => {
		for (const id of [ids.berlin, "0123456789abcdef01234567"]) {
			const r = await post(u.token, "/logistic/travels/resolve", { origin: ids.paris, destination: id });
			expect(r.status).toBe(404);
			expect(r.body).toEqual(errorBody(404, `location ${id} not found`));
		}
	});

	test("bad coordinates and bodies: 400 with the exact message", async () => {
		const cases: Array<[string, unknown, string]> = [
			["locations", { lat: 91, lng: 0 }, "lat must be between -90 and 90"],
			["locations", { lat: -90.5, lng: 0 }, "lat must be between -90 and 90"],
			["locations", { lat: 0, lng: 180.1 }, "lng must be between -180 and 180"],
			["locations", { lat: "1", lng: 0 }, "lat must be a number"],
			["locations", { lat: 1 }, "lng must be a number"],
			["locations", {}, "lat and lng, or query, are required"],
			["locations", { query: "" }, "query is required"],
			["locations", { query: "x".repeat(201) }, "query must be at most 200 characters"],
			["locations", { query: "a", lat: 1 }, "lat is not allowed with query"],
			["locations", { lat: 1, lng: 1, alt: 5 }, "alt is not allowed"],
			["travels", { origin: { lat: 0, lng: 0 }, destination: { lat: 100, lng: 0 } }, "destination.lat must be between -90 and 90"],
			["travels", { origin: { lat: 0, lng: -200 }, destination: { lat: 0, lng: 0 } }, "origin.lng must be between -180 and 180"],
			["travels", { origin: "paris", destination: { lat: 0, lng: 0 } }, "origin must be a location id or { lat, lng }"],
			["travels", { destination: { lat: 0, lng: 0 } }, "origin is required"],
			["travels", { origin: { lat: 0, lng: 0 } }, "destination is required"],
			["travels", { origin: { lat: 0, lng: 0 }, destination: { lat: 0, lng: 0 }, speed_kmh: 0 }, "speed_kmh must be a number above 0 and at most 100000"],
			["travels", { origin: { lat: 0, lng: 0 }, destination: { lat: 0, lng: 0 }, via: [] }, "via is not allowed"],
		];
		for (const [col, body, message] of cases) {
			const r = await post(u.token, `/logistic/${col}/resolve`, body);
			expect({ col, body, status: r.status, answer: r.body }).toEqual({ col, body, status: 400, answer: errorBody(400, message) });
		}
		const nocoords = await post(u.token, "/logistic/travels/resolve", { origin: ids.nocoords, destination: ids.paris });
		expect(nocoords.body).toEqual(errorBody(400, `location ${ids.nocoords} has no valid coordinates`));
	});
});

describe("the authority layer on every special: allowed, no scope, no grant, outside the view, other tenant", () => {
	interface Tenant {
		id: string;
		domain: string;
		admin: string;
		adminId: string;
	}
	let A: Tenant;
	let B: Tenant;
	const OBJECTS = ["content:posts", "career:products", "conjoint:messages", "conjoint:channels", "conjoint:accounts", "special:stats", "logistic:locations", "logistic:travels"];
	const SPECIALS: Array<[string, string, string]> = [
		["search", "content:posts", "GET /content/posts/search?q=walrus"],
		["search", "career:products", "GET /career/products/search?q=walrus"],
		["search", "conjoint:messages", "GET /conjoint/messages/search?q=walrus"],
		["collect", "special:stats", "POST /special/stats/collect"],
		["generate", "conjoint:accounts", "POST /conjoint/accounts/generate"],
		["resolve", "logistic:locations", "POST /logistic/locations/resolve"],
		["resolve", "logistic:travels", "POST /logistic/travels/resolve"],
	];
	const docs: Record<string, Record<string, string>> = { A: {}, B: {}, root: {} };
	const bodyOf = (who: string, object: string): unknown =>
		object === "special:stats"
			? { period: "daily" }
			: object === "logistic:locations"
				? { lat: 10, lng: 10 }
				: object === "logistic:travels"
					? { origin: docs[who].location, destination: { lat: 10.5, lng: 10.5 } }
					: object === "conjoint:accounts"
						? {}
						: undefined;

	function call(token: string, who: string, object: string, extra = "") {
		const [, , route] = SPECIALS.find((s) => s[1] === object)!;
		const [method, path] = route.split(" ");
		return p.http(method, path + (extra ? (path.includes("?") ? "&" : "?") + extra : ""), { token, body: bodyOf(who, object) });
	}

	async function tenant(name: string, domain: string): Promise<Tenant> {
		const c = await createClient(p.http, root, { name, domains: [domain], scopes: ["whole"] });
		await grant(root, `${c.id}@${domain}`, "manage", "identity:users");
		const cc = (await tokenOf(p.http, { grant_type: "client_credential", client_id: c.id, client_secret: c.secret })).access_token;
		const admin = (await ok(p.http("POST", "/identity/users", { token: cc, body: { username: "admin", password: PASSWORD } }), `${name} admin`)).data;
		for (const o of OBJECTS) await grant(root, `${admin.id}@${domain}`, "manage", o);
		for (const [action, object] of SPECIALS) await grant(root, `${admin.id}@${domain}`, action, object);
		const token = (await tokenOf(p.http, { grant_type: "password", client_id: c.id, username: "admin", password: PASSWORD })).access_token;
		return { id: c.id, domain, admin: token, adminId: admin.id };
	}

	async function seed(who: string, token: string) {
		const d = docs[who];
		d.post = (await ok(post(token, "/content/posts", { title: "walrus walrus" }), "post")).data.id;
		d.product = (await ok(post(token, "/career/products", { name: "walrus figurine" }), "product")).data.id;
		const ch = (await ok(post(token, "/conjoint/channels", { name: "c" }), "channel")).data.id;
		d.message = (await ok(post(token, "/conjoint/messages", { channel: ch, content: "walrus" }), "message")).data.id;
		d.location = (await ok(post(token, "/logistic/locations", { name: "walrus bay", lat: 10.01, lng: 10.01 }), "location")).data.id;
	}

	beforeAll(async () => {
		A = await tenant("tenant-a", "a.example");
		B = await tenant("tenant-b", "b.example");
		await seed("A", A.admin);
		await seed("B", B.admin);
		await seed("root", root);
		// Counts no real write makes here (tickets): A 5, B 2.
		let seq = 900_000;
		for (const [client, n] of [
			[A.id, 5],
			[B.id, 2],
		] as const)
			for (let i = 0; i < n; i++)
				await p.broker.call("special.stats.increment", { seq: seq++, service: "content", collection: "tickets", counter: "created", ts_ms: Date.now(), clients: [client] });
	});

	test("allowed: each special answers 200 to a user holding its scope and grant", async () => {
		const grants = SPECIALS.map(([action, object]) => [action, object] as [string, string]);
		const u = await user([...grants, ["read", "logistic:locations"], ["write", "logistic:locations"]]);
		docs.u = { location: (await ok(post(u.token, "/logistic/locations", { name: "u spot", lat: 10, lng: 10 }), "loc")).data.id };
		for (const [, object] of SPECIALS) {
			const r = await call(u.token, "u", object);
			expect({ object, status: r.status }).toEqual({ object, status: 200 });
		}
	});

	test("no scope: a token with narrower scopes answers 403 naming the scope", async () => {
		const u = await user(SPECIALS.map(([action, object]) => [action, object] as [string, string]));
		const narrow = await u.narrow(["read:content:notes"]);
		for (const [action, object] of SPECIALS) {
			const [svc, col] = object.split(":");
			const r = await call(narrow, "root", object);
			expect({ object, status: r.status, body: r.body }).toEqual({ object, status: 403, body: errorBody(403, `token scope does not cover ${action}:${svc}:${col}`) });
		}
	});

	test("no grant: 403 naming the action and the object (a read or manage grant is not enough)", async () => {
		const u = await user([
			["read", "content:posts"],
			["write", "conjoint:accounts"],
			["read", "special:stats"],
		]);
		for (const [action, object] of SPECIALS) {
			const r = await call(u.token, "root", object);
			expect({ object, status: r.status, body: r.body }).toEqual({ object, status: 403, body: errorBody(403, `no grant for ${action} on ${object}`) });
		}
	});

	test("outside the view: never a document of the view's outside (empty or 404)", async () => {
		// A user of the root tenant with every grant but no documents of its own: root's documents are outside.
		const u = await user([...SPECIALS.map(([action, object]) => [action, object] as [string, string]), ["read", "logistic:locations"]]);
		for (const object of ["content:posts", "career:products", "conjoint:messages"])
			expect({ object, body: (await call(u.token, "root", object)).body }).toEqual({ object, body: { items: [], total: 0 } });
		// Stats belong to the client: a user reads them in the client zone (collect's default), none in its own.
		expect((await call(u.token, "root", "special:stats", "zone=own")).body).toEqual({ items: [], total: 0 });
		expect((await call(u.token, "root", "logistic:locations")).body).toEqual(errorBody(404, "no location with coordinates found"));
		expect((await call(u.token, "root", "logistic:travels")).body).toEqual(errorBody(404, `location ${docs.root.location} not found`));
		// generate: the new account must lie inside the grant's rows.
		const g = await user([["generate", "conjoint:accounts", { filter: ['{"name":"allowed"}'] }]]);
		const out = await p.http("POST", "/conjoint/accounts/generate", { token: g.token, body: { name: "other" } });
		expect(out.body).toEqual(errorBody(403, "document is outside the grant filter"));
		expect((await p.http("POST", "/conjoint/accounts/generate", { token: g.token, body: { name: "allowed" } })).body.data).toMatchObject({ name: "allowed" });
	});

	test("other tenant: B's admin never reaches A's documents, stats or account", async () => {
		for (const [who, t, other] of [
			["A", A, "B"],
			["B", B, "A"],
		] as const) {
			for (const object of ["content:posts", "career:products", "conjoint:messages"]) {
				const r = await call(t.admin, who, object, "zone=client");
				const key = object === "content:posts" ? "post" : object === "career:products" ? "product" : "message";
				expect({ object, ids: r.body.items.map((d: any) => d.id), total: r.body.total }).toEqual({ object, ids: [docs[who][key]], total: 1 });
			}
			const stats = await p.http("POST", "/special/stats/collect?zone=client", { token: t.admin, body: { period: "daily", service: "content", collection: "tickets" } });
			expect(stats.body.items).toEqual([expect.objectContaining({ service: "content", collection: "tickets", created: who === "A" ? 5 : 2 })]);
			const near = await call(t.admin, who, "logistic:locations", "zone=client");
			expect(near.body.data.id).toBe(docs[who].location);
			const foreign = await p.http("POST", "/logistic/travels/resolve", { token: t.admin, body: { origin: docs[other].location, destination: docs[who].location } });
			expect(foreign.body).toEqual(errorBody(404, `location ${docs[other].location} not found`));
			const acc = await call(t.admin, who, "conjoint:accounts");
			expect(acc.body.data).toMatchObject({ id: accountIdOf(t.adminId), owner: t.adminId, clients: [t.id] });
		}
	});
});

describe("no input yields a 500", () => {
	test("odd bodies and parameters on every special answer 4xx in the error shape", async () => {
		const bodies: unknown[] = [
			null,
			[],
			"x",
			1,
			true,
			{},
			{ lat: null, lng: null },
			// eslint-disable-next-line no-loss-of-precision -- Infinity as JSON's 1e309 reaches the server
			{ lat: 1e309 },
			{ origin: {}, destination: [] },
			{ origin: { lat: 1, lng: 1, x: 1 }, destination: "a".repeat(24) },
			{ period: ["daily"] },
			{ period: "daily", from: {}, to: [] },
			{ period: "daily", service: "content", collection: {} },
			{ name: { $ne: 1 } },
			{ query: ["a"] },
			{ query: { $regex: "a" } },
			{ __proto__: { lat: 1 } },
		];
		const paths = ["/special/stats/collect", "/conjoint/accounts/generate", "/logistic/locations/resolve", "/logistic/travels/resolve"];
		for (const path of paths)
			for (const body of bodies) {
				const r = await p.http("POST", path, { token: root, body });
				expect({ path, body, status: r.status < 500, shape: r.status === 200 || (r.body?.statusCode === r.status && typeof r.body.message === "string") }).toEqual({
					path,
					body,
					status: true,
					shape: true,
				});
			}
		for (const path of paths) {
			const r = await p.http("POST", path, { token: root, raw: "{not json" });
			expect(r.status).toBe(400);
		}
		for (const qs of ["q[a]=1", "q=%00%01", `q=${"é".repeat(200)}`, "q=a&pagination=x", "q=a&pagination=%7B%22skip%22%3A-1%7D", "q=a&query=%5B%5D", "q=*&zone=client,own"])
			for (const col of ["content/posts", "career/products", "conjoint/messages"]) {
				const r = await p.http("GET", `/${col}/search?${qs}`, { token: root });
				expect({ col, qs, ok: r.status < 500 && (r.status === 200 || r.body?.statusCode === r.status) }).toEqual({ col, qs, ok: true });
			}
	});
});
