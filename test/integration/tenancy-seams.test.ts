/**
 * The seams the tenancy matrix (tenancy-matrix.test.ts) leaves open, on both document stores, with the tenants of
 * test/helpers/tenants.ts (a and b: admin holding manage on every service and every special action, member, limited):
 *
 * 1. **Ids in special actions' bodies.** Every id a special's body (or path) names is checked against the caller's
 *    view (docs/contracts.md "Tenants", "Other special actions"; docs/security.md, "By id"). The list is read FROM THE
 *    CATALOG: every implemented special whose path has `:id`, or whose body has a field with `format: "objectId"`,
 *    `fileRef`, a `relation`, an id in its description (`A location id`), a nested reference (`[{ wallet, amount }]`)
 *    or a config entry it names. Tenant b's admin, who holds every grant, names tenant a's ids and the operator's, and
 *    gets 404 as for a foreign id (or a 400 naming the field); a's and the operator's documents, balances and
 *    deliveries are re-read afterwards by their owners: nothing changed. A new id in a special's body without an
 *    attack written here fails the coverage test.
 * 2. **A field-limited principal on every special action.** Tenant a's `limited` user holds, in tenant a, each special
 *    action's grant and a read (wallets: write) grant on every collection the action reads, all with a field list that
 *    omits what the action could return or use (locations lat/lng and address, wallet balance, invoice amount, saga
 *    job and session, transaction saga, file sha256 and size, ...) and, where meaningful, a row filter. Whatever an
 *    action answers holds none of the hidden values (searched in the response's JSON text), and computes nothing from
 *    them (a distance from hidden coordinates, a search hit on a hidden field, a sum of a hidden counter, a debit
 *    checked against a hidden balance); where the action cannot run without the hidden field, it answers 403 naming
 *    the field (docs/security.md, layer 4: "A field the caller may not read cannot be returned, queried, ..."), and
 *    changes nothing.
 *
 * Each test gathers every mismatch before asserting, so a failure lists all the cases it covers.
 */
import { createHash, createECDH, randomBytes } from "crypto";
import { COLLECTIONS, type FieldDef, type SpecialDef } from "../../catalog";
import { bootTenancy, ok, type Doc, type Tenancy } from "../helpers/tenants";
import type { HttpResult } from "../helpers/platform";
import { payloadOf } from "../helpers/auth";
import { WALLET_CURRENCY, walletIdOf } from "../../services/financial.service";
import { waitForValue } from "../helpers/wait";

jest.setTimeout(180_000);

const ALL_ZONES = { "x-zone": "own,share,group,client" };
const NAMES: Record<number, string> = { 400: "Bad Request", 403: "Forbidden", 404: "Not Found", 409: "Conflict" };
const answer = (r: HttpResult) => ({ status: r.status, body: r.body });
const rand = () => randomBytes(5).toString("hex");

// ------------------------------------------------------------------------------------------------------------------
// The catalog's routed special actions, and the ids their bodies name
// ------------------------------------------------------------------------------------------------------------------

interface Routed {
	path: string;
	sp: SpecialDef;
	/** `POST /financial/transactions/init` */
	name: string;
	object: string;
}
const ROUTED: Routed[] = COLLECTIONS.flatMap((c) =>
	(c.collection.specials ?? [])
		.filter((sp) => sp.implemented)
		.map((sp) => ({ path: c.path, sp, name: `${sp.method} /${c.path}/${sp.path}`, object: `${c.domain.name}:${c.collection.name}` })),
);
/** Collection names of the catalog: `wallet` in `[{ wallet, amount }]` names financial/wallets. */
const COLLECTION_NAMES = new Set(COLLECTIONS.map((c) => c.collection.name));
const namesACollection = (k: string) => COLLECTION_NAMES.has(`${k}s`) || COLLECTION_NAMES.has(`${k}es`) || COLLECTION_NAMES.has(k);

/**
 * The id-bearing inputs of a special, from its catalog entry: `:id` in its path; body fields that are ids (format
 * objectId, fileRef, a relation), that say they hold an id (`A location id, or { lat, lng }`), that nest references
 * (`[{ wallet, amount }]` → `payers[].wallet`), or that name a config entry of the caller's tenant.
 */
function idInputsOf(sp: SpecialDef): string[] {
	const out: string[] = [];
	if (/(^|\/):id(\/|$)/.test(sp.path)) out.push(":id");
	for (const [k, f] of Object.entries(sp.body ?? {}) as Array<[string, FieldDef]>) {
		const d = f.description ?? "";
		if (f.format === "objectId" || f.fileRef || f.relation) {
			out.push(k);
			continue;
		}
		const nested = /`\[\{\s*([a-z_,\s]+)\}\]`/.exec(d);
		if (nested) {
			for (const n of nested[1]
				.split(",")
				.map((s) => s.trim())
				.filter(Boolean))
				if (namesACollection(n)) out.push(`${k}[].${n}`);
			continue;
		}
		if (/\b(?:a|an|one)\s+[a-z]+\s+ids?\b/i.test(d) || /config entry/i.test(d)) out.push(k);
	}
	return out;
}

const ID_INPUTS = ROUTED.flatMap((r) => idInputsOf(r.sp).map((f) => `${r.name} ${f}`));
/** Transaction types of init (catalog enum): payers-only, payees-only and both-sided ones are all exercised. */
const INIT = ROUTED.find((r) => r.name === "POST /financial/transactions/init")!;
const TX_TYPES = (INIT.sp.body!.type.enum ?? []) as readonly string[];

// ------------------------------------------------------------------------------------------------------------------
// The field-limited principal's grants: one field list (and row filter) per collection, on every grant of it
// ------------------------------------------------------------------------------------------------------------------

interface Limit {
	field: string[];
	filter?: Doc;
	/** The plain grant on the collection beside the special ones (`write` where an action writes it: payer wallets). */
	plain?: "read" | "write";
}
const LIMITS: Record<string, Limit> = {
	"essential/sagas": { field: ["ttl", "state", "expires_at", "committed_at", "aborted_at"], filter: { owner: "{{token.uid}}" } },
	"essential/saga-stages": { field: ["saga", "bucket", "action", "state"] },
	"financial/wallets": { field: ["user", "currency"], filter: { user: "{{token.uid}}" }, plain: "write" }, // filter widened in beforeAll
	"financial/invoices": { field: ["status", "currency", "paid_at", "transaction"], filter: { status: { $in: ["ISSUED", "PAID"] } } },
	"financial/transactions": { field: ["amount", "currency", "type", "payers", "payees", "state", "verified_at", "canceled_at", "failed_at"] },
	"special/files": { field: ["name", "mimetype"], filter: { mimetype: "text/plain" } },
	"special/stats": { field: ["service", "collection", "period", "created"], filter: { service: "content" } },
	"touch/emails": { field: ["provider", "to", "from", "subject", "state"] },
	"touch/pushes": { field: ["session", "expiration"] },
	"touch/smss": { field: ["provider", "receptors", "state", "template"] },
	"content/posts": { field: ["title", "status"], filter: { status: "PUBLISHED" } },
	"career/products": { field: ["name"] },
	"conjoint/messages": { field: ["channel", "tags"] },
	"conjoint/accounts": { field: ["name"] },
	"logistic/locations": { field: ["name"], filter: { name: { $in: ["Visible Alpha", "Visible Beta"] } } },
	"logistic/travels": { field: ["status", "origin", "destination"] },
	"context/configs": { field: ["key"] },
	// The audit trail: a grant with a field list opens no audit entry (403), whatever its fields.
	"general/activities": { field: ["action"] },
};

/** The hidden values the answer's JSON text must not hold (each at least 4 characters: no accidental hit). */
function leaks(text: string, hidden: unknown[]): string[] {
	return hidden
		.filter((v) => v !== undefined && v !== null)
		.map(String)
		.filter((v) => v.length >= 4 && text.includes(v));
}

/** Multipart upload of one text (or binary) file. */
async function upload(base: string, token: string, name: string, content: string | Uint8Array, type = "text/plain"): Promise<{ status: number; body: any; text: string }> {
	const fd = new FormData();
	fd.append("name", name);
	fd.append("file", new Blob([content], { type }), name);
	const r = await fetch(`${base}/special/files/upload`, { method: "POST", body: fd, headers: { authorization: `Bearer ${token}` } });
	const text = await r.text();
	let body: any = text;
	try {
		body = JSON.parse(text);
	} catch {
		/* not JSON */
	}
	return { status: r.status, body, text };
}

function pushKeys() {
	const ua = createECDH("prime256v1");
	ua.generateKeys();
	return { p256dh: ua.getPublicKey().toString("base64url"), auth: randomBytes(16).toString("base64url") };
}

/** What a victim (tenant a, the operator) owns, planted before the attacks. */
interface Victim {
	name: string;
	token: string;
	/** Its user's platform wallet, funded. */
	wallet: string;
	saga: string;
	file: string;
	fileKey: string;
	location: string;
	coords: { lat: number; lng: number };
	push: string;
	session: string;
	invoice: string;
	tx: string;
	template: string;
	templateText: string;
	/** The id of its template's config entry (context/configs). */
	config: string;
	secrets: string[];
}

describe("tenancy seams", () => {
	let t: Tenancy;
	const V: Record<"a" | "operator", Victim> = {} as any;
	/** b's admin's wallet (funded) and an invoice of b's admin: valid on b's side, so only the foreign id decides. */
	let walletOfB = "";
	let invoiceOfB = "";
	const svc = (name: string) => t.p.broker.getLocalService(name) as any;
	const count = (service: string, collection: string, query: Doc) => svc(service).collectionStore(collection).count(query) as Promise<number>;
	const url = () => t.p.url;

	async function deposit(token: string, wallet: string, amount: number): Promise<void> {
		const tx = (await ok(t.as(token, "POST", "/financial/transactions/init", { type: "DEPOSIT", amount, payees: [{ wallet, amount }] }), `deposit ${amount}`)).data;
		await ok(t.as(token, "GET", `/financial/transactions/${tx.id}/verify`), "verify deposit");
	}

	async function plant(name: string, token: string, user: string, clientId: string): Promise<Victim> {
		const s = rand();
		const wallet = walletIdOf(user);
		await waitForValue(`${name}'s wallet`, async () => (await t.as(token, "GET", `/financial/wallets/${wallet}`, undefined, ALL_ZONES)).status === 200, 30_000);
		await deposit(token, wallet, 1000);
		const saga = (await ok(t.as(token, "POST", "/essential/sagas/start", { ttl: 900 }), `${name} saga`)).data.id;
		await ok(t.as(token, "POST", "/essential/sagas/add", { saga, bucket: "content/notes", action: "FIND", req: { of: name } }), `${name} stage`);
		const up = await upload(url(), token, `secret-${s}.txt`, `content of ${name} ${s}`);
		if (up.status !== 200) throw new Error(`${name} upload: ${up.status} ${up.text}`);
		const file = up.body.items[0].id;
		const fileKey = (await ok(t.as(token, "POST", `/special/files/${file}/share`, { ttl: 3600 }), `${name} share`)).data.key;
		const coords = { lat: 12.3456789 + Math.random() / 1000, lng: 65.4321987 + Math.random() / 1000 };
		const location = (
			await ok(t.as(token, "POST", "/logistic/locations", { name: `Place ${s}`, ...coords, address: `Street ${s}`, groups: ["team-x.example"] }), `${name} location`)
		).data.id;
		const session = payloadOf(token).session as string;
		const push = (
			await ok(
				t.as(token, "POST", "/touch/pushes", { session, keys: pushKeys(), endpoint: `http://localhost:9/push/${s}`, expiration: 1_900_000_000, groups: ["team-x.example"] }),
				`${name} push`,
			)
		).data.id;
		const invoice = (
			await ok(t.as(token, "POST", "/financial/invoices", { amount: 7, currency: WALLET_CURRENCY, status: "ISSUED", groups: ["team-x.example"] }), `${name} invoice`)
		).data.id;
		const tx = (
			await ok(t.as(token, "POST", "/financial/transactions/init", { amount: 3, payers: [{ wallet, amount: 3 }], payees: [{ wallet, amount: 3 }], ttl: 900 }), `${name} tx`)
		).data.id;
		const template = `seam-${name.replace(/\W/g, "")}-${s}`;
		const templateText = `TEMPLATE-OF-${name.replace(/\W/g, "")}-${s} {{code}}`;
		const config = (await ok(t.as(token, "POST", "/context/configs", { key: "SMS_TEMPLATE", eid: clientId, value: { name: template, text: templateText } }), `${name} template`))
			.data.id;
		return {
			name,
			token,
			wallet,
			saga,
			file,
			fileKey,
			location,
			coords,
			push,
			session,
			invoice,
			tx,
			template,
			templateText,
			config,
			secrets: [`secret-${s}`, `content of ${name} ${s}`, String(coords.lat), String(coords.lng), `Street ${s}`, `Place ${s}`, `push/${s}`, templateText.split(" ")[0]],
		};
	}

	/** The victim's side, read by the victim: its documents, its balance, what was queued towards it. */
	async function sideOf(v: Victim): Promise<Doc> {
		const get = async (path: string) => {
			const r = await t.as(v.token, "GET", path, undefined, ALL_ZONES);
			return { status: r.status, data: r.body?.data };
		};
		return {
			wallet: await get(`/financial/wallets/${v.wallet}`),
			saga: await get(`/essential/sagas/${v.saga}`),
			stages: await count("essential", "saga-stages", { saga: v.saga }),
			file: await get(`/special/files/${v.file}`),
			download: (await fetch(`${url()}/special/files/${v.file}/download?key=${v.fileKey}`)).status,
			location: await get(`/logistic/locations/${v.location}`),
			push: await get(`/touch/pushes/${v.push}`),
			pushed: await count("touch", "push-histories", { to: v.push }),
			pushedToSession: await count("touch", "push-histories", { session: v.session }),
			attachedElsewhere: await count("touch", "emails", { attachments: v.file, "clients.0": { $ne: payloadOf(v.token).cid } }),
			templateUsedElsewhere: await count("touch", "smss", { template: v.template, "clients.0": { $ne: payloadOf(v.token).cid } }),
			invoice: await get(`/financial/invoices/${v.invoice}`),
			tx: await get(`/financial/transactions/${v.tx}`),
			session: await get(`/identity/sessions/${v.session}`),
		};
	}
	const sideOfB = async () => ({
		wallet: (await t.as(t.b.admin.token, "GET", `/financial/wallets/${walletOfB}`, undefined, ALL_ZONES)).body?.data,
		invoice: (await t.as(t.b.admin.token, "GET", `/financial/invoices/${invoiceOfB}`, undefined, ALL_ZONES)).body?.data,
	});

	// The field-limited principal (tenant a's `limited` user) and what tenant a's admin planted for it.
	const L = {
		hidden: {} as Record<string, unknown[]>,
		ids: {} as Record<string, string>,
		/** Fixtures that follow the change stream (search index, stats) seen by tenant a's admin in time. */
		ready: {} as Record<string, boolean>,
	};

	beforeAll(async () => {
		t = await bootTenancy();
		V.a = await plant("tenant a", t.a.admin.token, t.a.admin.id, t.a.client.id);
		V.operator = await plant("operator", t.root, t.p.root.user_id, t.p.root.client_id);
		walletOfB = walletIdOf(t.b.admin.id);
		await waitForValue("b's wallet", async () => (await t.as(t.b.admin.token, "GET", `/financial/wallets/${walletOfB}`, undefined, ALL_ZONES)).status === 200, 30_000);
		await deposit(t.b.admin.token, walletOfB, 1000);
		invoiceOfB = (await ok(t.as(t.b.admin.token, "POST", "/financial/invoices", { amount: 5, currency: WALLET_CURRENCY, status: "ISSUED" }), "b invoice")).data.id;

		// ---- the field-limited principal of tenant a ----
		const lim = t.a.limited;
		const A = t.a.admin.token;
		// The payee of a payment (the invoice owner's wallet) must be in the payer's view: the limited user sees its own
		// wallet and tenant a's admin's.
		LIMITS["financial/wallets"].filter = { user: { $in: ["{{token.uid}}", t.a.admin.id] } };
		const given = new Set<string>();
		const give = async (action: string, path: string) => {
			const key = `${action} ${path}`;
			if (given.has(key)) return;
			given.add(key);
			const l = LIMITS[path];
			if (!l) throw new Error(`no field limit written for ${path}`);
			await t.grant(A, { subject: lim.subject, action, object: path.replace("/", ":"), field: l.field, ...(l.filter ? { filter: [JSON.stringify(l.filter)] } : {}) });
		};
		for (const r of ROUTED) await give(r.sp.action, r.path);
		for (const [path, l] of Object.entries(LIMITS)) await give(l.plain ?? "read", path);
		lim.token = await t.login(t.a, lim.username, lim.password);

		const s = rand();
		// Locations: inside the row filter, with coordinates and an address the grant hides; one outside the filter.
		const alpha = { name: "Visible Alpha", lat: 48.8566123, lng: 2.3522457, address: `Quaywhistle ${s}` };
		const omega = { name: "Hidden Omega", lat: 48.8566999, lng: 2.3522999, address: `Omega street ${s}` };
		L.ids.alpha = (await ok(t.as(A, "POST", "/logistic/locations", { ...alpha, shares: [lim.id] }), "alpha")).data.id;
		L.ids.omega = (await ok(t.as(A, "POST", "/logistic/locations", { ...omega, shares: [lim.id] }), "omega")).data.id;
		L.hidden.locations = [alpha.lat, alpha.lng, alpha.address, omega.lat, omega.lng, omega.address];
		// Searchable documents: text only in hidden fields, a draft outside the posts' row filter.
		const channel = (await ok(t.as(A, "POST", "/conjoint/channels", { name: "seam channel" }), "channel")).data.id;
		L.ids.post = (await ok(t.as(A, "POST", "/content/posts", { title: "Seam headline", content: `zebraquark body ${s}`, status: "PUBLISHED", shares: [lim.id] }), "post")).data.id;
		L.ids.draft = (await ok(t.as(A, "POST", "/content/posts", { title: "Seam draft headline", content: `draft ${s}`, status: "DRAFT", shares: [lim.id] }), "draft")).data.id;
		L.ids.product = (await ok(t.as(A, "POST", "/career/products", { name: "Seam gadget", price: 987.6543, description: `quokkaflux ${s}`, shares: [lim.id] }), "product")).data.id;
		L.ids.message = (await ok(t.as(A, "POST", "/conjoint/messages", { channel, content: `wombatrix ${s}`, tags: ["seamtag"], shares: [lim.id] }), "message")).data.id;
		L.hidden.search = [`zebraquark body ${s}`, `draft ${s}`, L.ids.draft, "987.6543", `quokkaflux ${s}`, `wombatrix ${s}`];
		// Money: the limited user's wallet funded, an invoice of 4321 shared with it, two pending transfers to it.
		L.ids.wallet = walletIdOf(lim.id);
		await waitForValue("the limited user's wallet", async () => (await t.as(A, "GET", `/financial/wallets/${L.ids.wallet}`, undefined, ALL_ZONES)).status === 200, 30_000);
		await deposit(A, L.ids.wallet, 10_000);
		L.ids.invoice = (await ok(t.as(A, "POST", "/financial/invoices", { amount: 4321, currency: WALLET_CURRENCY, status: "ISSUED", shares: [lim.id] }), "invoice")).data.id;
		const pending = async () =>
			(
				await ok(
					t.as(A, "POST", "/financial/transactions/init", { amount: 77, payers: [{ wallet: V.a.wallet, amount: 77 }], payees: [{ wallet: L.ids.wallet, amount: 77 }], ttl: 900 }),
					"tx",
				)
			).data;
		const tx1 = await pending();
		const tx2 = await pending();
		L.ids.tx1 = tx1.id;
		L.ids.tx2 = tx2.id;
		L.hidden.money = ["4321", "10000", tx1.saga, tx2.saga];
		// Files of tenant a: one text file shared with the limited user, one PNG (outside the files' row filter).
		const png = new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13, 0x49, 0x48, 0x44, 0x52, ...randomBytes(32)]);
		const pngUp = await upload(url(), A, `picture-${s}.png`, png, "image/png");
		L.ids.png = pngUp.body.items[0].id;
		await ok(t.as(A, "PATCH", `/special/files/${L.ids.png}`, { shares: [lim.id] }), "share png");
		// A template of tenant a (a config entry the limited user cannot read).
		L.ids.template = `seam-limited-${s}`;
		await ok(t.as(A, "POST", "/context/configs", { key: "SMS_TEMPLATE", value: { name: L.ids.template, text: `TPL-SECRET-${s} code {{code}}` } }), "template");
		L.hidden.template = [`TPL-SECRET-${s}`];
		// A push subscription of tenant a's admin, shared with the limited user.
		L.ids.push = (
			await ok(
				t.as(A, "POST", "/touch/pushes", {
					session: payloadOf(A).session,
					keys: pushKeys(),
					endpoint: `http://localhost:9/push/endpoint-${s}`,
					expiration: 1_900_000_000,
					shares: [lim.id],
				}),
				"push",
			)
		).data.id;
		L.hidden.push = [`endpoint-${s}`];
		// The search index and the stats follow the change stream: wait (at most 10 s, all at once) until tenant a's
		// admin sees them; a case whose fixture never showed up reports it instead of passing on an empty answer.
		const seen = (what: string, probe: () => Promise<boolean>) =>
			waitForValue(what, probe, 10_000).then(
				() => (L.ready[what] = true),
				() => (L.ready[what] = false),
			);
		const searched = (path: string, q: string, id: string) => async () =>
			((await t.as(A, "GET", `/${path}/search?q=${q}&zone=own`)).body.items ?? []).some((d: Doc) => d.id === id);
		await Promise.all([
			seen("content/posts", searched("content/posts", "zebraquark", L.ids.post)),
			seen("career/products", searched("career/products", "quokkaflux", L.ids.product)),
			seen("conjoint/messages", searched("conjoint/messages", "wombatrix", L.ids.message)),
			seen("logistic/locations", async () => (await t.as(A, "POST", "/logistic/locations/resolve", { query: "Quaywhistle" }, { "x-zone": "own" })).body?.data?.id === L.ids.alpha),
			seen("special/stats", async () => ((await t.as(A, "POST", "/special/stats/collect", { period: "daily", service: "content" })).body.items ?? []).length > 0),
		]);
	}, 180_000);

	afterAll(async () => {
		await t?.cleanup();
	});

	// --------------------------------------------------------------------------------------------------------------
	// 1. Ids in bodies
	// --------------------------------------------------------------------------------------------------------------

	describe("1. every id a special action names is checked against the caller's view (b's admin names a's and the operator's)", () => {
		const exercised = new Set<string>();
		const typesExercised = new Set<string>();

		/** 404 as for a foreign id, or a 400 that names the field; and none of the victim's values in the answer. */
		function refused(problems: string[], what: string, r: HttpResult, field: string, v: Victim): void {
			const named = r.status === 400 && r.body?.error === "Bad Request" && typeof r.body?.message === "string" && r.body.message.includes(field.replace(/\[\]\..*$/, ""));
			const notFound =
				r.status === 404 &&
				JSON.stringify(r.body && Object.keys(r.body).sort()) === JSON.stringify(["error", "message", "statusCode"]) &&
				r.body.statusCode === 404 &&
				r.body.error === "Not Found";
			if (!named && !notFound) problems.push(`${what} [victim ${v.name}]: expected 404 (or 400 naming ${field}), got ${r.status} ${r.text.slice(0, 240)}`);
			const l = leaks(r.text, v.secrets);
			if (l.length) problems.push(`${what} [victim ${v.name}]: the answer holds ${l.join(", ")}`);
		}

		type Attack = (v: Victim, problems: string[]) => Promise<void>;
		const b = () => t.b.admin.token;
		const post = (path: string, body: unknown) => t.as(b(), "POST", path, body, ALL_ZONES);
		const get = (path: string) => t.as(b(), "GET", path, undefined, ALL_ZONES);

		const ATTACKS: Record<string, Attack> = {
			"POST /essential/sagas/add saga": async (v, p) => {
				refused(p, "sagas/add { saga }", await post("/essential/sagas/add", { saga: v.saga, bucket: "content/notes", action: "FIND", req: { planted: true } }), "saga", v);
			},
			"GET /essential/sagas/:id/abort :id": async (v, p) => refused(p, "sagas/:id/abort", await get(`/essential/sagas/${v.saga}/abort`), ":id", v),
			"GET /essential/sagas/:id/commit :id": async (v, p) => refused(p, "sagas/:id/commit", await get(`/essential/sagas/${v.saga}/commit`), ":id", v),
			"POST /financial/invoices/:id/payment :id": async (v, p) => {
				refused(p, "invoices/:id/payment (the victim's invoice, b's wallet)", await post(`/financial/invoices/${v.invoice}/payment`, { wallet: walletOfB }), ":id", v);
			},
			"POST /financial/invoices/:id/payment wallet": async (v, p) => {
				refused(
					p,
					"invoices/:id/payment { wallet } (b's invoice, the victim's wallet)",
					await post(`/financial/invoices/${invoiceOfB}/payment`, { wallet: v.wallet }),
					"wallet",
					v,
				);
			},
			"POST /financial/transactions/init payers[].wallet": async (v, p) => {
				for (const type of TX_TYPES.filter((x) => x !== "DEPOSIT")) {
					typesExercised.add(`payers ${type}`);
					const body =
						type === "WITHDRAW"
							? { type, amount: 10, payers: [{ wallet: v.wallet, amount: 10 }] }
							: { type, amount: 10, payers: [{ wallet: v.wallet, amount: 10 }], payees: [{ wallet: walletOfB, amount: 10 }] };
					refused(p, `transactions/init ${type} payers[].wallet`, await post("/financial/transactions/init", body), "payers[].wallet", v);
					// One foreign payer among the caller's own.
					const mixed =
						type === "WITHDRAW"
							? {
									type,
									amount: 2,
									payers: [
										{ wallet: walletOfB, amount: 1 },
										{ wallet: v.wallet, amount: 1 },
									],
								}
							: {
									type,
									amount: 2,
									payers: [
										{ wallet: walletOfB, amount: 1 },
										{ wallet: v.wallet, amount: 1 },
									],
									payees: [{ wallet: walletOfB, amount: 2 }],
								};
					refused(p, `transactions/init ${type} payers[] (own + foreign)`, await post("/financial/transactions/init", mixed), "payers[].wallet", v);
				}
			},
			"POST /financial/transactions/init payees[].wallet": async (v, p) => {
				for (const type of TX_TYPES.filter((x) => x !== "WITHDRAW")) {
					typesExercised.add(`payees ${type}`);
					const body =
						type === "DEPOSIT"
							? { type, amount: 1_000_000, payees: [{ wallet: v.wallet, amount: 1_000_000 }] }
							: { type, amount: 10, payers: [{ wallet: walletOfB, amount: 10 }], payees: [{ wallet: v.wallet, amount: 10 }] };
					refused(p, `transactions/init ${type} payees[].wallet`, await post("/financial/transactions/init", body), "payees[].wallet", v);
					const mixed =
						type === "DEPOSIT"
							? {
									type,
									amount: 2,
									payees: [
										{ wallet: walletOfB, amount: 1 },
										{ wallet: v.wallet, amount: 1 },
									],
								}
							: {
									type,
									amount: 2,
									payers: [{ wallet: walletOfB, amount: 2 }],
									payees: [
										{ wallet: walletOfB, amount: 1 },
										{ wallet: v.wallet, amount: 1 },
									],
								};
					refused(p, `transactions/init ${type} payees[] (own + foreign)`, await post("/financial/transactions/init", mixed), "payees[].wallet", v);
				}
			},
			"GET /financial/transactions/:id/verify :id": async (v, p) => refused(p, "transactions/:id/verify", await get(`/financial/transactions/${v.tx}/verify`), ":id", v),
			"GET /financial/transactions/:id/abort :id": async (v, p) => refused(p, "transactions/:id/abort", await get(`/financial/transactions/${v.tx}/abort`), ":id", v),
			// The victim's config (an SMS template: every config has its deliveries' route): not found, as if it did not exist.
			"GET /context/configs/:id/deliveries :id": async (v, p) => refused(p, "configs/:id/deliveries", await get(`/context/configs/${v.config}/deliveries`), ":id", v),
			"POST /context/configs/:id/deliveries/:delivery/redeliver :id": async (v, p) => {
				refused(p, "configs/:id/deliveries/1/redeliver", await post(`/context/configs/${v.config}/deliveries/1/redeliver`, {}), ":id", v);
			},
			"POST /special/files/:id/share :id": async (v, p) => {
				refused(p, "files/:id/share { ttl }", await post(`/special/files/${v.file}/share`, { ttl: 60 }), ":id", v);
				refused(p, "files/:id/share { type: UNLINK }", await post(`/special/files/${v.file}/share`, { type: "UNLINK" }), ":id", v);
			},
			"POST /touch/emails/send attachments": async (v, p) => {
				const body = { to: ["someone@example.com"], from: `noreply@${t.b.domain}`, subject: "seam", text: "see attached", attachments: [v.file] };
				refused(p, "emails/send { attachments }", await post("/touch/emails/send", body), "attachments", v);
			},
			"POST /touch/pushes/send push": async (v, p) => refused(p, "pushes/send { push }", await post("/touch/pushes/send", { push: v.push, title: "seam", body: "b" }), "push", v),
			"POST /touch/pushes/send session": async (v, p) =>
				refused(p, "pushes/send { session }", await post("/touch/pushes/send", { session: v.session, title: "seam", body: "b" }), "session", v),
			"POST /touch/smss/send/template template": async (v, p) => {
				refused(
					p,
					"smss/send/template { template }",
					await post("/touch/smss/send/template", { provider: "kavenegar", receptors: ["+14155550123"], template: v.template, params: { code: "1" } }),
					"template",
					v,
				);
			},
			"POST /logistic/travels/resolve origin": async (v, p) => {
				refused(p, "travels/resolve { origin }", await post("/logistic/travels/resolve", { origin: v.location, destination: { lat: 0, lng: 0 } }), "origin", v);
			},
			"POST /logistic/travels/resolve destination": async (v, p) => {
				refused(p, "travels/resolve { destination }", await post("/logistic/travels/resolve", { origin: { lat: 0, lng: 0 }, destination: v.location }), "destination", v);
			},
		};

		test.each(ID_INPUTS.map((k) => [k]))("%s", async (key) => {
			const attack = key in ATTACKS ? ATTACKS[key] : undefined;
			// A special whose body names an id must have its attack here.
			expect({ key, attack: attack ? "written" : "missing" }).toEqual({ key, attack: "written" });
			exercised.add(key);
			const problems: string[] = [];
			for (const v of [V.a, V.operator]) {
				const before = await sideOf(v);
				// The victim reads all of its own side (else "unchanged" would compare two 404s).
				for (const [k, x] of Object.entries(before)) if (x && typeof x === "object" && x.status !== 200) problems.push(`[victim ${v.name}] cannot read its own ${k}: ${x.status}`);
				const bBefore = await sideOfB();
				await attack!(v, problems);
				const after = await sideOf(v);
				for (const k of Object.keys(before))
					if (JSON.stringify(before[k]) !== JSON.stringify(after[k]))
						problems.push(`[victim ${v.name}] ${k} changed: ${JSON.stringify(before[k]).slice(0, 200)} -> ${JSON.stringify(after[k]).slice(0, 200)}`);
				const bAfter = await sideOfB();
				if (bAfter.wallet?.balance !== bBefore.wallet?.balance) problems.push(`[victim ${v.name}] b's own wallet moved: ${bBefore.wallet?.balance} -> ${bAfter.wallet?.balance}`);
				if (bAfter.invoice?.status !== bBefore.invoice?.status) problems.push(`[victim ${v.name}] b's invoice changed: ${bBefore.invoice?.status} -> ${bAfter.invoice?.status}`);
			}
			expect(problems).toEqual([]);
		});

		test("a template name is the caller's tenant's: b's own template of the same name is used, never a's", async () => {
			await ok(t.as(t.b.admin.token, "POST", "/context/configs", { key: "SMS_TEMPLATE", value: { name: V.a.template, text: "B-OWN-TEXT {{code}}" } }), "b's template");
			const r = await t.as(t.b.admin.token, "POST", "/touch/smss/send/template", {
				provider: "kavenegar",
				receptors: ["+14155550123"],
				template: V.a.template,
				params: { code: "7" },
			});
			expect({ status: r.status, message: r.body?.data?.message, leaks: leaks(r.text, V.a.secrets) }).toEqual({ status: 200, message: "B-OWN-TEXT 7", leaks: [] });
		});

		test("a wallet b plants naming a's user or the operator's is refused (400), and a's payment credits a's own wallet only", async () => {
			const problems: string[] = [];
			for (const [who, user] of [
				["tenant a", t.a.admin.id],
				["operator", t.p.root.user_id],
			] as const) {
				const r = await t.as(t.b.admin.token, "POST", "/financial/wallets", { user, currency: WALLET_CURRENCY });
				const expected = { status: 400, body: { statusCode: 400, message: `user: ${user} is not a user of this tenant`, error: "Bad Request" } };
				if (JSON.stringify(answer(r)) !== JSON.stringify(expected))
					problems.push(`plant a wallet naming ${who}'s user: expected ${JSON.stringify(expected)}, got ${r.status} ${r.text.slice(0, 200)}`);
			}
			// Whatever b holds naming a's admin, a's payment reaches a's platform wallet and nothing of b's moves.
			const bWallets = async () =>
				JSON.stringify(
					(
						(await svc("financial")
							.collectionStore("wallets")
							.find({ query: { "clients.0": t.b.client.id } })) as Doc[]
					)
						.map((w) => [w.id, w.balance])
						.sort(),
				);
			const planted = await bWallets();
			await t.grant(t.a.admin.token, { subject: t.a.member.subject, action: "payment", object: "financial:invoices" });
			const member = await t.login(t.a, t.a.member.username, t.a.member.password);
			const memberWallet = walletIdOf(t.a.member.id);
			await waitForValue(
				"a's member's wallet",
				async () => (await t.as(t.a.admin.token, "GET", `/financial/wallets/${memberWallet}`, undefined, ALL_ZONES)).status === 200,
				30_000,
			);
			await deposit(t.a.admin.token, memberWallet, 50);
			const invoice = (
				await ok(t.as(t.a.admin.token, "POST", "/financial/invoices", { amount: 9, currency: WALLET_CURRENCY, status: "ISSUED", shares: [t.a.member.id] }), "a's invoice")
			).data.id;
			const before = (await t.as(t.a.admin.token, "GET", `/financial/wallets/${V.a.wallet}`)).body.data.balance;
			const paid = await t.as(member, "POST", `/financial/invoices/${invoice}/payment`, { wallet: memberWallet }, { "x-zone": "own,share" });
			if (paid.status !== 200) problems.push(`a's member pays a's invoice: ${paid.status} ${paid.text.slice(0, 200)}`);
			const after = (await t.as(t.a.admin.token, "GET", `/financial/wallets/${V.a.wallet}`)).body.data.balance;
			if (after !== before + 9) problems.push(`a's admin's platform wallet: ${before} -> ${after} (expected +9)`);
			if ((await bWallets()) !== planted) problems.push(`a wallet of tenant b moved on a's payment: ${planted} -> ${await bWallets()}`);
			expect(problems).toEqual([]);
		});

		test("the catalog's id inputs were all attacked, with every transaction type", () => {
			// The derivation finds at least the ids the contracts name (a guard against a derivation that finds nothing).
			for (const k of [
				"POST /financial/invoices/:id/payment wallet",
				"POST /financial/transactions/init payers[].wallet",
				"POST /financial/transactions/init payees[].wallet",
				"POST /touch/emails/send attachments",
				"POST /touch/pushes/send push",
				"POST /touch/pushes/send session",
				"POST /logistic/travels/resolve origin",
				"POST /logistic/travels/resolve destination",
				"POST /essential/sagas/add saga",
				"POST /special/files/:id/share :id",
			])
				expect(ID_INPUTS).toContain(k);
			expect([...exercised].sort()).toEqual([...ID_INPUTS].sort());
			expect([...typesExercised].sort()).toEqual(
				[...TX_TYPES.filter((x) => x !== "DEPOSIT").map((x) => `payers ${x}`), ...TX_TYPES.filter((x) => x !== "WITHDRAW").map((x) => `payees ${x}`)].sort(),
			);
		});
	});

	// --------------------------------------------------------------------------------------------------------------
	// 2. A field-limited principal on every special action
	// --------------------------------------------------------------------------------------------------------------

	describe("2. a field-limited principal: no special action answers, or computes from, a field its grants hide", () => {
		const exercised = new Set<string>();
		const lim = () => t.a.limited.token;
		const A = () => t.a.admin.token;
		const call = (method: string, path: string, body?: unknown, headers?: Record<string, string>) => t.as(lim(), method, path, body, headers);

		/** 200 (or 403 naming a hidden field) without any hidden value; `mustRefuse`: only a 403 naming one of `fields`. */
		function judge(problems: string[], what: string, r: HttpResult, hidden: unknown[], opts: { mustRefuse?: string[]; status?: number } = {}): void {
			if (hidden.some((v) => v === undefined || v === null)) problems.push(`${what}: a hidden value of the fixture is unknown (the check would be vacuous)`);
			const l = leaks(r.text, hidden);
			if (l.length) problems.push(`${what}: the answer holds hidden values ${l.join(", ")}: ${r.text.slice(0, 300)}`);
			if (opts.mustRefuse) {
				const names = opts.mustRefuse;
				const ok403 = r.status === 403 && r.body?.error === "Forbidden" && r.body?.statusCode === 403 && names.some((f) => new RegExp(`\\b${f}\\b`).test(String(r.body?.message)));
				if (!ok403) problems.push(`${what}: expected 403 naming ${names.join(" or ")}, got ${r.status} ${r.text.slice(0, 300)}`);
				return;
			}
			const status = opts.status ?? 200;
			const exact =
				status === 200
					? r.status === 200
					: JSON.stringify(answer(r)) === JSON.stringify({ status, body: { statusCode: status, message: r.body?.message, error: NAMES[status] } }) &&
						typeof r.body?.message === "string";
			if (!exact) problems.push(`${what}: expected ${status}, got ${r.status} ${r.text.slice(0, 300)}`);
		}
		/** Keys the grant hides must not be in the answered document(s). */
		function noKeys(problems: string[], what: string, docs: unknown, keys: string[]): void {
			for (const d of (Array.isArray(docs) ? docs : [docs]) as Doc[]) {
				if (!d || typeof d !== "object") continue;
				const bad = keys.filter((k) => k in d);
				if (bad.length) problems.push(`${what}: answered hidden fields ${bad.join(", ")}`);
			}
		}
		const balanceOf = async (wallet: string) => (await t.as(A(), "GET", `/financial/wallets/${wallet}`, undefined, ALL_ZONES)).body?.data?.balance;

		/** A fixture of tenant a that never reached the search index or the stats: the case cannot tell a leak from nothing. */
		function ready(problems: string[], what: string): void {
			if (!L.ready[what])
				problems.push(
					`${what}: tenant a's own fixture never showed up for tenant a's admin within 10 s (search index / stats not following the writes): this case is not exercised`,
				);
		}

		type Case = (problems: string[]) => Promise<void>;
		const CASES: Record<string, Case> = {
			"POST /essential/sagas/start": async (p) => {
				const r = await call("POST", "/essential/sagas/start", { ttl: 600 });
				const saga = r.body?.data?.id && (await t.as(A(), "GET", `/essential/sagas/${r.body.data.id}`, undefined, ALL_ZONES)).body.data;
				judge(p, "sagas/start", r, [saga?.job, saga?.session, t.a.limited.id]);
				noKeys(p, "sagas/start", r.body?.data, ["job", "session", "owner", "clients"]);
			},
			"POST /essential/sagas/add": async (p) => {
				const saga = (await ok(call("POST", "/essential/sagas/start", { ttl: 600 }), "limited saga")).data.id;
				const marker = `REQ-HIDDEN-${rand()}`;
				const r = await call("POST", "/essential/sagas/add", { saga, bucket: "content/notes", action: "FIND", req: { marker }, res: { marker } });
				judge(p, "sagas/add", r, [marker, t.a.limited.id]);
				noKeys(p, "sagas/add", r.body?.data, ["req", "res", "owner", "clients", "images"]);
			},
			"GET /essential/sagas/:id/commit": async (p) => {
				const id = (await ok(call("POST", "/essential/sagas/start", { ttl: 600 }), "limited saga")).data.id;
				const saga = (await t.as(A(), "GET", `/essential/sagas/${id}`, undefined, ALL_ZONES)).body.data;
				const r = await call("GET", `/essential/sagas/${id}/commit`);
				judge(p, "sagas/:id/commit", r, [saga.job, saga.session, t.a.limited.id]);
				if (r.status === 200 && r.body.data.state !== "COMMITTED") p.push(`sagas/:id/commit: state ${r.body.data.state}`);
				noKeys(p, "sagas/:id/commit", r.body?.data, ["job", "session", "owner"]);
			},
			"GET /essential/sagas/:id/abort": async (p) => {
				const id = (await ok(call("POST", "/essential/sagas/start", { ttl: 600 }), "limited saga")).data.id;
				const saga = (await t.as(A(), "GET", `/essential/sagas/${id}`, undefined, ALL_ZONES)).body.data;
				const r = await call("GET", `/essential/sagas/${id}/abort`);
				judge(p, "sagas/:id/abort", r, [saga.job, saga.session, t.a.limited.id]);
				if (r.status === 200 && r.body.data.state !== "ABORTED") p.push(`sagas/:id/abort: state ${r.body.data.state}`);
				noKeys(p, "sagas/:id/abort", r.body?.data, ["job", "session", "owner"]);
			},
			"POST /financial/invoices/:id/payment": async (p) => {
				// The amount is hidden from the payer, and so is its wallet's balance: paying would move a hidden amount.
				const before = [await balanceOf(L.ids.wallet), await balanceOf(V.a.wallet)];
				const r = await call("POST", `/financial/invoices/${L.ids.invoice}/payment`, { wallet: L.ids.wallet }, { "x-zone": "own,share" });
				judge(p, "invoices/:id/payment (amount hidden)", r, L.hidden.money, { mustRefuse: ["amount", "balance"] });
				const inv = (await t.as(A(), "GET", `/financial/invoices/${L.ids.invoice}`)).body.data;
				if (inv.status !== "ISSUED") p.push(`invoices/:id/payment: the invoice is now ${inv.status}`);
				const after = [await balanceOf(L.ids.wallet), await balanceOf(V.a.wallet)];
				if (JSON.stringify(after) !== JSON.stringify(before)) p.push(`invoices/:id/payment: balances moved ${before} -> ${after}`);
			},
			"POST /financial/transactions/init": async (p) => {
				// A debit is checked against the payer's balance, which the grant hides: 200 vs 409 would tell it.
				const before = [await balanceOf(L.ids.wallet), await balanceOf(V.a.wallet)];
				for (const amount of [10, 999_999]) {
					const r = await call("POST", "/financial/transactions/init", { amount, payers: [{ wallet: L.ids.wallet, amount }], payees: [{ wallet: V.a.wallet, amount }] });
					judge(p, `transactions/init TRANSFER ${amount} from a wallet whose balance is hidden`, r, L.hidden.money, { mustRefuse: ["balance"] });
				}
				const after = [await balanceOf(L.ids.wallet), await balanceOf(V.a.wallet)];
				if (JSON.stringify(after) !== JSON.stringify(before)) p.push(`transactions/init: balances moved ${before} -> ${after}`);
			},
			"GET /financial/transactions/:id/verify": async (p) => {
				const r = await call("GET", `/financial/transactions/${L.ids.tx1}/verify`, undefined, { "x-zone": "client" });
				judge(p, "transactions/:id/verify", r, L.hidden.money);
				if (r.status === 200 && r.body.data.state !== "VERIFIED") p.push(`transactions/:id/verify: state ${r.body.data.state}`);
				noKeys(p, "transactions/:id/verify", r.body?.data, ["saga", "owner", "clients"]);
			},
			"GET /financial/transactions/:id/abort": async (p) => {
				const r = await call("GET", `/financial/transactions/${L.ids.tx2}/abort`, undefined, { "x-zone": "client" });
				judge(p, "transactions/:id/abort", r, L.hidden.money);
				if (r.status === 200 && r.body.data.state !== "CANCELLED") p.push(`transactions/:id/abort: state ${r.body.data.state}`);
				noKeys(p, "transactions/:id/abort", r.body?.data, ["saga", "owner", "clients"]);
			},
			"POST /special/files/upload": async (p) => {
				const content = `limited upload ${rand()} ${rand()}`;
				const sha = createHash("sha256").update(content).digest("hex");
				const r = await upload(url(), lim(), "limited.txt", content);
				judge(p, "files/upload", r as HttpResult, [sha, t.a.limited.id]);
				noKeys(p, "files/upload", r.body?.items, ["sha256", "size", "owner", "clients"]);
				L.ids.upload = r.body?.items?.[0]?.id;
				L.hidden.upload = [sha];
			},
			"POST /special/files/:id/share": async (p) => {
				const content = `limited share ${rand()} ${rand()}`;
				const sha = createHash("sha256").update(content).digest("hex");
				const id = (await upload(url(), lim(), "shared.txt", content)).body.items[0].id;
				const r = await call("POST", `/special/files/${id}/share`, { ttl: 60 });
				judge(p, "files/:id/share", r, [sha, t.a.limited.id]);
				// A file outside the grant's rows (a PNG) is not shared, as for a foreign id.
				const png = await call("POST", `/special/files/${L.ids.png}/share`, { ttl: 60 }, { "x-zone": "share" });
				judge(p, "files/:id/share of a file outside the grant's rows", png, [], { status: 404 });
			},
			// A config of its tenant it may read only the `key` of: its deliveries (none for this one) and no value of it.
			"GET /context/configs/:id/deliveries": async (p) => {
				const value = `SEAM-CONFIG-${rand()}`;
				const config = (await ok(t.as(A(), "POST", "/context/configs", { key: "SEAM", value: { value } }), "a's config")).data.id;
				const r = await call("GET", `/context/configs/${config}/deliveries?zone=client`);
				judge(p, "configs/:id/deliveries", r, [value]);
				if (r.status === 200 && JSON.stringify(r.body) !== JSON.stringify({ items: [], next: null }))
					p.push(`configs/:id/deliveries: this config has no deliveries: ${r.text.slice(0, 200)}`);
				const redeliver = await call("POST", `/context/configs/${config}/deliveries/1/redeliver?zone=client`);
				judge(p, "configs/:id/deliveries/1/redeliver", redeliver, [value], { status: 404 });
				if (redeliver.body?.message !== "delivery 1 not found") p.push(`configs/:id/deliveries/1/redeliver: not the delivery's 404: ${redeliver.text.slice(0, 200)}`);
			},
			"POST /context/configs/:id/deliveries/:delivery/redeliver": async (p) => {
				// With the listing's case (its config): here, a config of another tenant's is not found before any delivery.
				const r = await call("POST", `/context/configs/${V.operator.config}/deliveries/1/redeliver?zone=client`);
				judge(p, "configs/:id/deliveries/1/redeliver (the operator's config)", r, [V.operator.templateText], { status: 404 });
			},
			// Audit entries are no activity documents: a grant with a field list opens none.
			"GET /general/activities/audit": async (p) => {
				const r = await call("GET", "/general/activities/audit");
				judge(p, "activities/audit", r, [t.a.admin.id], { status: 403 });
			},
			"POST /special/stats/collect": async (p) => {
				ready(p, "special/stats");
				const r = await call("POST", "/special/stats/collect", { period: "daily" });
				const today = new Date().toISOString().slice(0, 10);
				judge(p, "stats/collect", r, [today]);
				noKeys(p, "stats/collect", r.body?.items, ["from", "to", "updated", "deleted", "restored", "bucket"]);
				const services = new Set((r.body?.items ?? []).map((i: Doc) => i.service));
				if ([...services].some((s) => s !== "content")) p.push(`stats/collect: rows outside the grant filter: ${[...services]}`);
				if (!services.has("content")) p.push(`stats/collect: tenant a's content stats missing: ${r.text.slice(0, 200)}`);
			},
			"POST /touch/emails/send": async (p) => {
				const s = rand();
				const body = { to: ["someone@example.com"], from: `noreply@${t.a.domain}`, subject: "seam", text: `EMAIL-TEXT-${s}`, bcc: [`hidden-bcc-${s}@example.com`] };
				const r = await call("POST", "/touch/emails/send", body);
				judge(p, "emails/send", r, [`EMAIL-TEXT-${s}`, `hidden-bcc-${s}`, t.a.limited.id]);
				noKeys(p, "emails/send", r.body?.data, ["text", "bcc", "html", "owner", "clients"]);
			},
			"POST /touch/pushes/send": async (p) => {
				const r = await call("POST", "/touch/pushes/send", { push: L.ids.push, title: "seam", body: "b" }, { "x-zone": "share" });
				judge(p, "pushes/send", r, L.hidden.push);
			},
			"GET /touch/pushes/vapid": async (p) => {
				const r = await call("GET", "/touch/pushes/vapid");
				judge(p, "pushes/vapid", r, L.hidden.push);
			},
			"POST /touch/smss/send": async (p) => {
				const s = rand();
				const r = await call("POST", "/touch/smss/send", { provider: "kavenegar", receptors: ["+14155550199"], message: `SMS-TEXT-${s}`, sender: `SND${s}` });
				judge(p, "smss/send", r, [`SMS-TEXT-${s}`, `SND${s}`, t.a.limited.id]);
				noKeys(p, "smss/send", r.body?.data, ["message", "sender", "owner", "clients"]);
			},
			"POST /touch/smss/send/template": async (p) => {
				const r = await call("POST", "/touch/smss/send/template", { provider: "kavenegar", receptors: ["+14155550199"], template: L.ids.template, params: { code: "4242" } });
				judge(p, "smss/send/template", r, [...L.hidden.template, t.a.limited.id]);
				noKeys(p, "smss/send/template", r.body?.data, ["message", "sender"]);
			},
			"GET /content/posts/search": async (p) => {
				ready(p, "content/posts");
				const hidden = await call("GET", "/content/posts/search?q=zebraquark&zone=share");
				judge(p, "posts/search on a word of the hidden content", hidden, L.hidden.search);
				if (hidden.status === 200 && hidden.body.total !== 0) p.push(`posts/search: a hidden field matched: ${hidden.text.slice(0, 200)}`);
				const seen = await call("GET", "/content/posts/search?q=headline&zone=share");
				judge(p, "posts/search on a title word", seen, L.hidden.search);
				if (seen.status === 200 && JSON.stringify(seen.body.items.map((d: Doc) => d.id)) !== JSON.stringify([L.ids.post]))
					p.push(`posts/search: expected the published post only, got ${seen.text.slice(0, 200)}`);
				noKeys(p, "posts/search", seen.body?.items, ["content", "owner"]);
				const control = await t.as(A(), "GET", "/content/posts/search?q=zebraquark&zone=own");
				if (control.body?.total !== 1 || !leaks(control.text, L.hidden.search).length)
					p.push(`posts/search control: tenant a's admin did not find the post by its content: ${control.text.slice(0, 200)}`);
			},
			"GET /career/products/search": async (p) => {
				ready(p, "career/products");
				const hidden = await call("GET", "/career/products/search?q=quokkaflux&zone=share");
				judge(p, "products/search on a word of the hidden description", hidden, L.hidden.search);
				if (hidden.status === 200 && hidden.body.total !== 0) p.push(`products/search: a hidden field matched: ${hidden.text.slice(0, 200)}`);
				const seen = await call("GET", "/career/products/search?q=gadget&zone=share");
				judge(p, "products/search on a name word", seen, L.hidden.search);
				if (seen.status === 200 && seen.body.total !== 1) p.push(`products/search: expected the product, got ${seen.text.slice(0, 200)}`);
				noKeys(p, "products/search", seen.body?.items, ["price", "description"]);
			},
			"GET /conjoint/messages/search": async (p) => {
				ready(p, "conjoint/messages");
				const hidden = await call("GET", "/conjoint/messages/search?q=wombatrix&zone=share");
				judge(p, "messages/search on a word of the hidden content", hidden, L.hidden.search);
				if (hidden.status === 200 && hidden.body.total !== 0) p.push(`messages/search: a hidden field matched: ${hidden.text.slice(0, 200)}`);
				const seen = await call("GET", "/conjoint/messages/search?q=seamtag&zone=share");
				judge(p, "messages/search on a tag", seen, L.hidden.search);
				if (seen.status === 200 && seen.body.total !== 1) p.push(`messages/search: expected the message, got ${seen.text.slice(0, 200)}`);
				noKeys(p, "messages/search", seen.body?.items, ["content"]);
			},
			"POST /logistic/locations/resolve": async (p) => {
				ready(p, "logistic/locations");
				// Nearest to a point: the distance would be computed from coordinates the grant hides.
				const near = await call("POST", "/logistic/locations/resolve", { lat: 48.85, lng: 2.35 }, { "x-zone": "share" });
				judge(p, "locations/resolve { lat, lng } with lat/lng hidden", near, L.hidden.locations, { mustRefuse: ["lat", "lng"] });
				// Text: a word only in the hidden address, a name outside the row filter: nothing found.
				for (const q of ["Quaywhistle", "Omega"]) {
					const r = await call("POST", "/logistic/locations/resolve", { query: q }, { "x-zone": "share" });
					judge(p, `locations/resolve { query: ${q} } (hidden field / outside the rows)`, r, L.hidden.locations, { status: 404 });
				}
				const named = await call("POST", "/logistic/locations/resolve", { query: "Alpha" }, { "x-zone": "share" });
				judge(p, "locations/resolve { query: Alpha }", named, L.hidden.locations);
				if (named.status === 200 && named.body.data.id !== L.ids.alpha) p.push(`locations/resolve { query }: expected Visible Alpha, got ${named.text.slice(0, 200)}`);
				noKeys(p, "locations/resolve", named.body?.data, ["lat", "lng", "address", "distance"]);
				// Control: tenant a's admin (no field list) is answered the values the limited user must not see.
				const control = await t.as(A(), "POST", "/logistic/locations/resolve", { lat: 48.85, lng: 2.35 }, { "x-zone": "own" });
				if (leaks(control.text, L.hidden.locations).length < 2)
					p.push(`locations/resolve control: tenant a's admin was not answered the coordinates: ${control.text.slice(0, 200)}`);
			},
			"POST /logistic/travels/resolve": async (p) => {
				// The ends' coordinates are hidden by the read grant on locations: no distance from them.
				for (const body of [
					{ origin: L.ids.alpha, destination: { lat: 0, lng: 0 } },
					{ origin: { lat: 0, lng: 0 }, destination: L.ids.alpha },
				]) {
					const r = await call("POST", "/logistic/travels/resolve", body, { "x-zone": "share" });
					judge(p, `travels/resolve ${JSON.stringify(body)} with lat/lng hidden`, r, L.hidden.locations, { mustRefuse: ["lat", "lng"] });
				}
				// An end outside the grant's rows: as for a foreign id.
				const out = await call("POST", "/logistic/travels/resolve", { origin: L.ids.omega, destination: { lat: 0, lng: 0 } }, { "x-zone": "share" });
				judge(p, "travels/resolve with an end outside the rows", out, L.hidden.locations, { status: 404 });
			},
			"POST /conjoint/accounts/generate": async (p) => {
				const r = await call("POST", "/conjoint/accounts/generate", { name: "Seam Account" });
				judge(p, "accounts/generate", r, [t.a.limited.id, t.a.client.id]);
				noKeys(p, "accounts/generate", r.body?.data, ["user", "owner", "clients"]);
			},
		};

		test.each(ROUTED.map((r) => [r.name]))("%s", async (name) => {
			const c = name in CASES ? CASES[name] : undefined;
			expect({ name, case: c ? "written" : "missing" }).toEqual({ name, case: "written" });
			exercised.add(name);
			const problems: string[] = [];
			await c!(problems);
			expect(problems).toEqual([]);
		});

		test("every routed special action was exercised, and every collection it reads is field-limited", () => {
			expect([...exercised].sort()).toEqual(ROUTED.map((r) => r.name).sort());
			for (const r of ROUTED) expect({ path: r.path, limited: !!LIMITS[r.path] }).toEqual({ path: r.path, limited: true });
		});
	});
});
