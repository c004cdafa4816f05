/**
 * The tenant boundary as a matrix (docs/contracts.md "Tenants"; docs/security.md). Two tenants are set up the way an operator
 * would: each a client with its own domain, a tenant admin holding manage on every service and every special action,
 * and ordinary users whose roles (`@editor`) and groups (`team-x.example`) have the same names in both tenants. Then, for every
 * collection of the catalog and every zone, nothing of one tenant is readable, writable, routable (webhook, MQTT) or
 * grantable from the other; the operator (root client) manages both.
 */
import http from "http";
import type { AddressInfo } from "net";
import mqtt from "mqtt";
import { COLLECTIONS, DOMAINS, STANDARD_OPS } from "../../catalog";
import { bootPlatform, parseSse, type HttpResult, type TestPlatform } from "../helpers/platform";
import { withStatusProbe } from "../helpers/status-probe";
import { patchBody, sampleBody } from "../helpers/samples";
import { sleep, waitForValue } from "../helpers/wait";

jest.setTimeout(120_000);

type Doc = Record<string, any>;
interface Tenant {
	name: "a" | "b";
	domain: string;
	client: { id: string; secret: string };
	admin: { id: string; token: string };
	user: { id: string; token: string; username: string; password: string };
}

let p: TestPlatform;
let root: string;
const T: Partial<Record<"a" | "b", Tenant>> = {};
const A = () => T.a!;
const B = () => T.b!;
let sagaOfA = "";
const ZONES = ["own", "share", "group", "client", "own,share,group,client"];

function qs(params: Record<string, unknown>): string {
	const u = new URLSearchParams();
	for (const [k, v] of Object.entries(params)) u.set(k, typeof v === "string" ? v : JSON.stringify(v));
	return `?${u}`;
}

async function ok(r: Promise<HttpResult> | HttpResult, what: string, status = 200): Promise<any> {
	const res = await r;
	if (res.status !== status) throw new Error(`${what}: expected ${status}, got ${res.status}: ${res.text.slice(0, 300)}`);
	return res.body;
}

const as = (token: string, method: string, path: string, body?: unknown, headers?: Record<string, string>) => p.http(method, path, { token, body, headers });

async function grant(by: string, subject: string, action: string, object: string): Promise<void> {
	await ok(as(by, "POST", "/auth/grants", { subject, action, object }), `grant ${action} ${object} to ${subject}`);
}

async function login(client: Tenant["client"], username: string, password: string): Promise<HttpResult> {
	return p.http("POST", "/auth/token", { body: { grant_type: "password", client_id: client.id, username, password } });
}

/** A tenant the operator's way: the client, its client-credential token creating the tenant's own users, grants. */
async function tenant(name: "a" | "b"): Promise<Tenant> {
	const domain = `${name}.example`;
	const c = (await ok(as(root, "POST", "/domain/clients", { name: `tenant ${name}`, domains: [domain], scopes: ["whole"] }), "client")).data;
	const client = { id: c.id as string, secret: c.secret as string };
	// The operator may name any registered domain in a grant subject.
	await grant(root, `${client.id}@${domain}`, "manage", "identity:users");
	const cc = (await ok(p.http("POST", "/auth/token", { body: { grant_type: "client_credential", client_id: client.id, client_secret: client.secret } }), "cc token")).data
		.access_token;
	const pw = (who: string) => `pw-${who}-${name}-Secret1`;
	const adminDoc = (await ok(as(cc, "POST", "/identity/users", { username: `admin-${name}`, password: pw("admin"), subjects: ["@admin"] }), "admin user")).data;
	// Same user name, role and group names in both tenants.
	const userDoc = (await ok(as(cc, "POST", "/identity/users", { username: "member", password: pw("member"), subjects: ["@editor", "team-x.example"] }), "member user")).data;
	const adminSubject = `${adminDoc.id}@${domain}`;
	for (const d of DOMAINS) await grant(root, adminSubject, "manage", `${d.name}:*`);
	for (const d of DOMAINS) for (const col of d.collections) for (const s of col.specials ?? []) await grant(root, adminSubject, s.action, `${d.name}:${col.name}`);
	const admin = { id: adminDoc.id, token: (await ok(login(client, `admin-${name}`, pw("admin")), "admin login")).data.access_token };
	// The tenant admin grants its own role within its own domain.
	for (const d of DOMAINS) await grant(admin.token, `@editor@${domain}`, "manage", `${d.name}:*`);
	const user = { id: userDoc.id, username: "member", password: pw("member"), token: (await ok(login(client, "member", pw("member")), "member login")).data.access_token };
	return { name, domain, client, admin, user };
}

beforeAll(async () => {
	p = await bootPlatform({ webhookAllowPrivate: true, webhookRetrySchedule: [0, 0.2, 0.4] });
	root = await p.rootToken();
	T.a = await tenant("a");
	T.b = await tenant("b");
}, 120_000);

afterAll(async () => {
	await p?.cleanup();
});
withStatusProbe(() => p.url);

const writable = COLLECTIONS.filter((c) => !c.collection.platformWritten);

/** A body tenant `t` can create in collection `path` (samples name the tenant's domain; configs take the caller's eid). */
function bodyFor(path: string, t: Tenant, n: number): Doc {
	const body: Doc = sampleBody(path, n, { domain: t.domain });
	if (path === "context/configs") delete body.eid;
	if (path === "domain/clients") body.scopes = ["read:content:notes"];
	if (path === "financial/transactions") body.saga = sagaOfA;
	return { ...body, groups: ["team-x.example"], shares: [t.user.id] };
}

/** One document of tenant A per writable collection (made by A's admin in the first block). */
const created = new Map<string, Doc>();

describe("every collection: tenant A's documents are invisible and untouchable from tenant B, in every zone", () => {
	beforeAll(async () => {
		// A transaction links to a saga its creator owns.
		sagaOfA = (await ok(as(A().admin.token, "POST", "/essential/sagas/start", { ttl: 900 }), "A's saga")).data.id;
		for (const c of writable) {
			const r = await as(A().admin.token, "POST", `/${c.path}`, bodyFor(c.path, A(), 1));
			if (r.status !== 200) throw new Error(`A creates ${c.path}: ${r.status} ${r.text.slice(0, 300)}`);
			created.set(c.path, r.body.data);
		}
	});

	test.each(writable.map((c) => [c.path]))("%s", async (path) => {
		const doc = created.get(path)!;
		for (const who of [B().admin, B().user]) {
			for (const zone of ZONES) {
				const list = await ok(as(who.token, "GET", `/${path}${qs({ zone, pagination: { limit: 100 } })}`), `${path} list ${zone}`);
				expect(list.items.map((d: Doc) => d.id)).not.toContain(doc.id);
				const count = await ok(as(who.token, "GET", `/${path}/count${qs({ zone, query: { id: doc.id } })}`), `${path} count ${zone}`);
				expect(count.total).toBe(0);
				const cur = await as(who.token, "GET", `/${path}/cursor${qs({ zone, query: { id: doc.id } })}`);
				expect(cur.status).toBe(200);
				expect(parseSse(cur.text).filter((f) => f.id === doc.id)).toEqual([]);
				const z = { "x-zone": zone };
				for (const [m, suffix] of [
					["GET", ""],
					["PATCH", ""],
					["DELETE", ""],
					["PUT", "/restore"],
					["DELETE", "/destroy"],
				] as const) {
					const r = await as(who.token, m, `/${path}/${doc.id}${suffix}`, m === "PATCH" ? patchBody(path, 9) : undefined, z);
					expect({ what: `${m} ${path}/:id${suffix} ${zone}`, status: r.status, body: r.body }).toEqual({
						what: `${m} ${path}/:id${suffix} ${zone}`,
						status: 404,
						body: { statusCode: 404, message: expect.any(String), error: "Not Found" },
					});
				}
				const bulk = await ok(as(who.token, "PATCH", `/${path}/bulk${qs({ zone, query: { id: doc.id } })}`, patchBody(path, 8), z), `${path} bulk ${zone}`);
				expect(bulk.total).toBe(0);
			}
		}
		// A's own admin still sees it, unchanged.
		const mine = await ok(as(A().admin.token, "GET", `/${path}/${doc.id}`), `${path} get by A`);
		expect(mine.data.updated_at).toBe(doc.updated_at);
		expect(mine.data.deleted_at ?? null).toBeNull();
	});

	test("the standard pattern has 11 operations and every writable collection was swept", () => {
		expect(Object.keys(STANDARD_OPS)).toHaveLength(11);
		expect(created.size).toBe(writable.length);
	});
});

/** Every special action the gateway routes (catalog `implemented`). */
const specials = COLLECTIONS.flatMap((c) =>
	(c.collection.specials ?? []).filter((sp) => sp.implemented).map((sp) => ({ c, sp, object: `${c.domain.name}:${c.collection.name}`, byId: sp.path.startsWith(":id/") })),
);
/** A small multipart body with one `file` part (uploads). */
const BOUNDARY = "tenancy-matrix-boundary";
const MULTIPART = `--${BOUNDARY}\r\ncontent-disposition: form-data; name="file"; filename="a.txt"\r\ncontent-type: text/plain\r\n\r\nhello\r\n--${BOUNDARY}--\r\n`;
const specialPath = (path: string, sp: { path: string }, id: string) => `/${path}/${sp.path.replace(":id", id)}`;

describe("every special action: scope, grant and the tenant's view apply", () => {
	let nobody = "";
	let narrow = "";
	let walletOfB = "";
	const bodyOf = (x: (typeof specials)[number]) => (x.sp.method === "GET" ? undefined : x.c.path === "financial/invoices" ? { wallet: walletOfB } : {});
	beforeAll(async () => {
		// A user of B without any grant, and B's admin with a token narrowed to one scope.
		const cc = (await ok(p.http("POST", "/auth/token", { body: { grant_type: "client_credential", client_id: B().client.id, client_secret: B().client.secret } }), "cc")).data
			.access_token;
		await ok(as(cc, "POST", "/identity/users", { username: "nobody", password: "pw-nobody-Secret1" }), "nobody");
		nobody = (await ok(login(B().client, "nobody", "pw-nobody-Secret1"), "nobody login")).data.access_token;
		// B's admin's own wallet: a payment body that is valid on B's side, so only the invoice's tenant decides.
		walletOfB = (await waitForValue("B admin's wallet", async () => (await as(B().admin.token, "GET", "/financial/wallets")).body.items?.[0]?.id)) as string;
		narrow = (
			await ok(
				p.http("POST", "/auth/token", {
					body: { grant_type: "password", client_id: B().client.id, username: "admin-b", password: "pw-admin-b-Secret1", scopes: ["read:content:notes"] },
				}),
				"narrow",
			)
		).data.access_token;
	});

	test("there are routed special actions to check", () => {
		expect(specials.length).toBeGreaterThanOrEqual(10);
	});

	test.each(specials.map((x) => [`${x.sp.method} /${x.c.path}/${x.sp.path}`, x]))("%s", async (_name, x) => {
		const id = created.get(x.c.path)?.id ?? "0123456789abcdef01234567";
		const pth = specialPath(x.c.path, x.sp, id);
		const call = (token: string) =>
			x.sp.multipart
				? p.http(x.sp.method, pth, { token, raw: MULTIPART, headers: { "content-type": `multipart/form-data; boundary=${BOUNDARY}` } })
				: as(token, x.sp.method, pth, bodyOf(x));
		const noScope = await call(narrow);
		expect({ status: noScope.status, body: noScope.body }).toEqual({
			status: 403,
			body: { statusCode: 403, message: `token scope does not cover ${x.sp.action}:${x.object}`, error: "Forbidden" },
		});
		const noGrant = await call(nobody);
		expect({ status: noGrant.status, body: noGrant.body }).toEqual({
			status: 403,
			body: { statusCode: 403, message: `no grant for ${x.sp.action} on ${x.object}`, error: "Forbidden" },
		});
		if (x.byId) {
			// A's document, addressed by B's admin (scope and grant held): not found, as if it did not exist.
			expect(created.has(x.c.path)).toBe(true);
			const foreign = await call(B().admin.token);
			expect({ status: foreign.status, body: foreign.body }).toEqual({ status: 404, body: { statusCode: 404, message: expect.any(String), error: "Not Found" } });
		}
	});
});

describe("nothing of one tenant is grantable from the other; the operator manages both", () => {
	test("grant subjects: B's admin cannot name A's domain, A's users, A's roles or groups", async () => {
		for (const subject of [`${A().admin.id}@${A().domain}`, `@editor@${A().domain}`, `team-x.example@${A().domain}`, `member@${A().domain}`, `${A().client.id}@${A().domain}`]) {
			const r = await as(B().admin.token, "POST", "/auth/grants", { subject, action: "manage", object: "content:notes" });
			expect(r.status).toBe(400);
			expect(r.body).toEqual({ statusCode: 400, message: expect.stringContaining(`domain '${A().domain}' is not registered for client ${B().client.id}`), error: "Bad Request" });
		}
		// Its own domain works.
		await grant(B().admin.token, `member@${B().domain}`, "read", "content:notes");
	});

	test("domains: B cannot register A's domain or the operator's, on a new client or its own", async () => {
		for (const d of [A().domain, p.root.domain]) {
			const r = await as(B().admin.token, "POST", "/domain/clients", { name: "hijack", domains: [d], scopes: ["read:content:notes"] });
			expect(r.status).toBe(409);
			expect(r.body).toEqual({ statusCode: 409, message: `domain ${d} is already registered`, error: "Conflict" });
		}
	});

	test("configs: B cannot write an RBAC or CQRS config for A, nor an RBAC entry for A's domain", async () => {
		const rbac = [{ domain: A().domain, roles: { "@editor": ["all"] }, permissions: { all: ["manage:content:*"] } }];
		const other = await as(B().admin.token, "POST", "/context/configs", { key: "RBAC", eid: A().client.id, value: rbac });
		expect(other.status).toBe(403);
		expect(other.body.error).toBe("Forbidden");
		const foreignDomain = await as(B().admin.token, "POST", "/context/configs", { key: "RBAC", value: rbac });
		expect(foreignDomain.status).toBe(400);
		const cqrs = await as(B().admin.token, "POST", "/context/configs", { key: "CQRS", eid: A().client.id, value: { webhook: "http://127.0.0.1:9/x" } });
		expect(cqrs.status).toBe(403);
	});

	test("logins: B's users cannot log in through A's client or the operator's; A's member through A only", async () => {
		for (const c of [A().client, { id: p.root.client_id, secret: "" }]) {
			const r = await login(c, `admin-b`, "pw-admin-b-Secret1");
			expect(r.status).toBe(401);
			expect(r.body).toEqual({ statusCode: 401, message: "username or password is invalid", error: "Unauthorized" });
		}
		// Same username "member" in both tenants: each client logs in its own.
		const a = await ok(login(A().client, "member", "pw-member-a-Secret1"), "A member");
		expect(a.data.subject.split(" ")).toContain(`${A().user.id}@${A().domain}`);
		expect((await login(A().client, "member", "pw-member-b-Secret1")).status).toBe(401);
	});

	test("the operator: grants in both domains, configs for both tenants, sees both clients", async () => {
		for (const t of [A(), B()]) {
			await grant(root, `@auditor@${t.domain}`, "read", "content:notes");
			const cfg = await ok(as(root, "POST", "/context/configs", { key: `OPERATOR_${t.name}`, eid: t.client.id, value: { note: t.name } }), "operator config");
			expect(cfg.data.eid).toBe(t.client.id);
			const c = await ok(as(root, "GET", `/domain/clients/${t.client.id}`), "operator reads client");
			expect(c.data.domains).toEqual([t.domain]);
		}
	});
});

describe("nothing of one tenant is routable to the other", () => {
	test("webhooks: B's CQRS config receives B's events, never A's", async () => {
		const seen: Doc[] = [];
		const server = http.createServer((req, res) => {
			let s = "";
			req.on("data", (c) => (s += c));
			req.on("end", () => {
				try {
					seen.push(JSON.parse(s));
				} catch {
					/* not JSON */
				}
				res.writeHead(204).end();
			});
		});
		await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
		try {
			const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
			await ok(as(B().admin.token, "POST", "/context/configs", { key: "CQRS", value: { webhook: url } }), "B webhook");
			const aNote = (await ok(as(A().admin.token, "POST", "/content/notes", { title: "A only", groups: ["team-x.example"] }), "A note")).data;
			const bNote = (await ok(as(B().admin.token, "POST", "/content/notes", { title: "B only" }), "B note")).data;
			await waitForValue("B's event delivered", async () => seen.some((e) => e.after?.id === bNote.id));
			await sleep(500);
			const ids = seen.map((e) => e.after?.id ?? e.before?.id);
			expect(ids).not.toContain(aNote.id);
			for (const e of seen) expect((e.after ?? e.before).clients?.[0]).toBe(B().client.id);
		} finally {
			server.close();
		}
	});

	test("MQTT: B's member cannot subscribe to A's client topic and receives nothing of A's", async () => {
		const url = ((await p.broker.call("preserver.brokerUrl")) as { url: string }).url;
		const c = await mqtt.connectAsync(url, { reconnectPeriod: 0, clientId: `tenancy-${Date.now()}`, username: B().user.id, password: B().user.token }, false);
		const got: string[] = [];
		c.on("message", (topic) => got.push(topic));
		try {
			// mqtt.js rejects a SUBACK whose return code is 128 (failure): that rejection is the refusal.
			const granted = (topic: string) =>
				c.subscribeAsync(topic, { qos: 1 }).then(
					(g) => g[0].qos,
					(e: Error) => (/Subscribe error/.test(e.message) ? 128 : Promise.reject(e)),
				);
			expect(await granted(`platform/client/${A().client.id}/content/notes/#`)).toBe(128);
			expect(await granted(`platform/owner/${A().user.id}/content/notes/#`)).toBe(128);
			for (const t of [`platform/client/${B().client.id}/content/notes/#`, `platform/share/${B().user.id}/content/notes/#`, `platform/owner/${B().user.id}/content/notes/#`])
				expect(await granted(t)).toBe(1);
			const aNote = (await ok(as(A().admin.token, "POST", "/content/notes", { title: "A for mqtt", groups: ["team-x.example"] }), "A note")).data;
			const bNote = (await ok(as(B().user.token, "POST", "/content/notes", { title: "B for mqtt" }), "B note")).data;
			await waitForValue("B's own message", async () => got.some((t) => t.endsWith(bNote.id)));
			await sleep(300);
			expect(got.filter((t) => t.endsWith(aNote.id))).toEqual([]);
		} finally {
			await c.endAsync();
		}
	});
});
