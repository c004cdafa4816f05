/**
 * Catalog-driven sweep: every collection of every domain, all 11 endpoints of the standard pattern, through HTTP
 * with the root token, asserting the exact envelopes and statuses (spec "Standard collection pattern", docs/contracts.md "Fields and bodies").
 */
import { COLLECTIONS, type CollectionRef } from "../../catalog";
import { platformDoc } from "../../engine/collection.mixin";
import { bootPlatform, parseSse, sseKeysSorted, type HttpResult, type TestPlatform } from "../helpers/platform";
import { hiddenFields, patchBody, patchField, sampleBody, sampleLinks, unique } from "../helpers/samples";

jest.setTimeout(60_000);

const HEX24 = /^[0-9a-f]{24}$/;
const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
const NOT_FOUND = { statusCode: 404, message: "document not found", error: "Not Found" };
const EXCLUDE = { "x-exclude-soft-delete-query": "1" };
/** Values a create response carries once, besides the document (docs/contracts.md "Fields and bodies"; spec "APT record"). */
const ONCE: Record<string, string> = { "domain/clients": "secret", "auth/apts": "token" };
const BCRYPT = /\$2[aby]\$\d\d\$/;
/** Collections whose deleted documents stay deleted: their deletion is a revocation (docs/contracts.md, "Tenants"). */
const NO_RESTORE: Record<string, string> = {
	"auth/apts": "a revoked APT cannot be restored; create a new one",
	"identity/sessions": "a revoked session cannot be restored; log in again",
};

type Doc = Record<string, any>;

let p: TestPlatform;
let token: string;
const responses: Array<{ method: string; path: string; r: HttpResult }> = [];
/** Plaintexts that must never come back: user passwords (never), client secrets (only in their create response). */
const passwords: string[] = [];
const clientSecrets: string[] = [];

beforeAll(async () => {
	p = await bootPlatform();
	token = await p.rootToken();
	// Transactions link to a saga of their creator.
	sampleLinks.saga = (await p.http("POST", "/essential/sagas/start", { token, body: { ttl: 900 } })).body.data.id;
});
afterAll(() => p?.cleanup());

const q = (v: unknown) => encodeURIComponent(JSON.stringify(v));

async function call(method: string, path: string, opts: { body?: unknown; headers?: Record<string, string> } = {}): Promise<HttpResult> {
	const r = await p.http(method, path, { token, ...opts });
	responses.push({ method, path, r });
	return r;
}

function without(doc: Doc, key?: string): Doc {
	if (!key) return doc;
	const { [key]: _drop, ...rest } = doc;
	return rest;
}

/** Common fields of a document just created by root. */
function expectFresh(c: CollectionRef, d: Doc, body: Doc) {
	expect(d.id).toMatch(HEX24);
	expect(d).toMatchObject({
		version: "1.0.0",
		owner: p.root.user_id,
		clients: [p.root.client_id],
		deleted_at: null,
		created_by: p.root.user_id,
		created_in: p.root.client_id,
		updated_by: p.root.user_id,
		updated_in: p.root.client_id,
		shares: [],
		groups: [],
	});
	expect(d.created_at).toMatch(ISO);
	expect(d.updated_at).toMatch(ISO);
	expect(typeof d.rand).toBe("string");
	expect(typeof d.timestamp).toBe("string");
	const hidden = hiddenFields(c);
	for (const [k, v] of Object.entries(body)) if (!hidden.includes(k)) expect(d[k]).toEqual(v);
}

function expectNoHidden(c: CollectionRef, docs: Doc[]) {
	const hidden = hiddenFields(c);
	for (const d of docs) for (const f of hidden) expect(Object.keys(d)).not.toContain(f);
}

function expectError(r: HttpResult, status: number, message?: string) {
	expect(r.status).toBe(status);
	expect(Object.keys(r.body).sort()).toEqual(["error", "message", "statusCode"]);
	expect(r.body.statusCode).toBe(status);
	if (message !== undefined) expect(r.body.message).toBe(message);
}

function sseText(docs: Doc[]): string {
	return docs.map((d) => `id: ${d.id}\ndata: ${JSON.stringify(d)}\n\n`).join("") + "event: end\ndata: close\n\n";
}

for (const c of COLLECTIONS) {
	const base = `/${c.path}`;
	const once = ONCE[c.path];
	const platformWritten = !!c.collection.platformWritten;

	describe(c.path, () => {
		// a: the single create; b1, b2: the bulk create (or, for platform-written collections, seeded documents).
		let a: Doc, b1: Doc, b2: Doc;
		const ids = () => [a.id, b1.id, b2.id];
		const scoped = () => `query=${q({ id: { $in: ids() } })}`;
		const field = patchField(c);

		if (!platformWritten) {
			test("POST creates: { data } with the platform fields set", async () => {
				const body: Record<string, unknown> = { ...sampleBody(c, 0), ref: `ref-${unique()}`, tags: ["sweep"] };
				if (typeof body.password === "string") passwords.push(body.password);
				const r = await call("POST", base, { body });
				expect(r.status).toBe(200);
				expect(Object.keys(r.body)).toEqual(["data"]);
				expectFresh(c, r.body.data, body);
				expect(r.body.data.created_at).toBe(r.body.data.updated_at);
				expectNoHidden(c, [without(r.body.data, once)]);
				if (c.path === "domain/clients") {
					expect(typeof r.body.data.secret).toBe("string");
					expect(r.body.data.secret.length).toBeGreaterThanOrEqual(16);
					clientSecrets.push(r.body.data.secret);
				}
				if (c.path === "auth/apts") expect(r.body.data.token).toMatch(/^APT-.+/);
				a = r.body.data;
			});

			test("POST /bulk creates: { items, total: 2 }", async () => {
				const bodies = [sampleBody(c, 1), sampleBody(c, 2)];
				for (const b of bodies) if (typeof b.password === "string") passwords.push(b.password);
				const r = await call("POST", `${base}/bulk`, { body: { items: bodies } });
				expect(r.status).toBe(200);
				expect(Object.keys(r.body).sort()).toEqual(["items", "total"]);
				expect(r.body.total).toBe(2);
				expect(r.body.items).toHaveLength(2);
				r.body.items.forEach((d: Doc, i: number) => expectFresh(c, d, bodies[i]));
				expect(new Set([a.id, ...r.body.items.map((d: Doc) => d.id)]).size).toBe(3);
				expectNoHidden(
					c,
					r.body.items.map((d: Doc) => without(d, once)),
				);
				if (once) for (const d of r.body.items) expect(typeof d[once]).toBe("string");
				if (c.path === "domain/clients") clientSecrets.push(...r.body.items.map((d: Doc) => d.secret));
				// From here on the documents as every later read returns them (without the once-only value).
				a = without(a, once);
				[b1, b2] = r.body.items.map((d: Doc) => without(d, once));
			});
		} else {
			test("POST, POST /bulk, PATCH /:id and PATCH /bulk answer 405 (written by the platform only)", async () => {
				const message = `${c.path} is written by the platform only`;
				expectError(await call("POST", base, { body: sampleBody(c, 0) }), 405, message);
				expect((await call("POST", base, { body: sampleBody(c, 0) })).body.error).toBe("Method Not Allowed");
				expectError(await call("POST", `${base}/bulk`, { body: { items: [sampleBody(c, 1)] } }), 405, message);
				expectError(await call("PATCH", `${base}/${"a".repeat(24)}`, { body: patchBody(c) }), 405, message);
				expectError(await call("PATCH", `${base}/bulk?query=${q({})}`, { body: patchBody(c) }), 405, message);
				// Nothing was written.
				expect((await call("GET", `${base}/count`)).body).toEqual({ total: 0 });
			});

			test("documents the platform writes are readable through the pattern", async () => {
				// What the platform's own writers do (e.g. push delivery): the store, stamped like any document.
				const svc = p.broker.getLocalService(c.domain.name) as any;
				const store = svc.collectionStore(c.collection.name);
				const bodies = [0, 1, 2].map((n) => ({ ...sampleBody(c, n), ref: `ref-${unique()}` }));
				const docs = bodies.map((b) => platformDoc(b, { owner: p.root.user_id, cid: p.root.client_id }));
				for (const d of docs) await store.insert(d);
				const got = await Promise.all(docs.map((d) => call("GET", `${base}/${d.id}`)));
				for (const g of got) {
					expect(g.status).toBe(200);
					expect(Object.keys(g.body)).toEqual(["data"]);
				}
				[a, b1, b2] = got.map((g) => g.body.data);
				[a, b1, b2].forEach((d, i) => expectFresh(c, d, bodies[i]));
			});
		}

		test("GET lists: { items, total }", async () => {
			const r = await call("GET", `${base}?${scoped()}`);
			expect(r.status).toBe(200);
			expect(r.body).toEqual({ items: [a, b1, b2], total: 3 });
			const all = await call("GET", base);
			expect(all.status).toBe(200);
			expect(Object.keys(all.body).sort()).toEqual(["items", "total"]);
			expect(all.body.total).toBeGreaterThanOrEqual(3);
			expect(all.body.items.length).toBe(Math.min(all.body.total, 10));
			expectNoHidden(c, all.body.items);
			const page = await call("GET", `${base}?${scoped()}&pagination=${q({ limit: 1, skip: 1, sort: { id: -1 } })}`);
			expect(page.body).toEqual({ items: [b1], total: 3 });
			const proj = await call("GET", `${base}?${scoped()}&projection=${q({ version: 1 })}`);
			expect(proj.body).toEqual({ items: [a, b1, b2].map((d) => ({ id: d.id, version: "1.0.0" })), total: 3 });
		});

		test("GET /count: { total }", async () => {
			expect((await call("GET", `${base}/count?${scoped()}`)).body).toEqual({ total: 3 });
			const all = await call("GET", `${base}/count`);
			expect(all.status).toBe(200);
			expect(Object.keys(all.body)).toEqual(["total"]);
			expect(all.body.total).toBeGreaterThanOrEqual(3);
		});

		test("GET /cursor streams `id:`/`data:` frames and an end frame", async () => {
			const r = await call("GET", `${base}/cursor?${scoped()}`, { headers: { accept: "text/event-stream" } });
			expect(r.status).toBe(200);
			expect(r.headers.get("content-type")).toMatch(/^text\/event-stream/);
			expect(sseKeysSorted(r.text)).toBe(sseKeysSorted(sseText([a, b1, b2])));
			expect(parseSse(r.text).map((f) => f.id ?? f.event)).toEqual([...ids(), "end"]);
		});

		test("GET /:id: { data }, also by ref", async () => {
			const r = await call("GET", `${base}/${a.id}`);
			expect(r.status).toBe(200);
			expect(r.body).toEqual({ data: a });
			const byRef = await call("GET", `${base}/${encodeURIComponent(a.ref)}?ref=true`);
			expect(byRef.body).toEqual({ data: a });
			expect((await call("GET", `${base}/${a.id.toUpperCase()}`)).body).toEqual({ data: a });
		});

		if (!platformWritten) {
			test("PATCH /:id changes the field and nothing else", async () => {
				const change = patchBody(c);
				const r = await call("PATCH", `${base}/${a.id}`, { body: change });
				expect(r.status).toBe(200);
				expect(Object.keys(r.body)).toEqual(["data"]);
				const d = r.body.data;
				expect(d[field]).toBe(change[field]);
				expect(d[field]).not.toEqual(a[field]);
				expect(d).toEqual({ ...a, ...change, updated_at: d.updated_at });
				expect(d.updated_at).toMatch(ISO);
				expect(d.updated_at >= a.updated_at).toBe(true);
				expect((await call("GET", `${base}/${a.id}`)).body).toEqual({ data: d });
				a = d;
			});

			test("PATCH /bulk with ?query= updates the matching documents: { total }", async () => {
				const change = patchBody(c, 1);
				const r = await call("PATCH", `${base}/bulk?query=${q({ id: { $in: [b1.id, b2.id] } })}`, { body: change });
				expect(r.status).toBe(200);
				expect(r.body).toEqual({ total: 2 });
				for (const d of [b1, b2]) {
					const g = await call("GET", `${base}/${d.id}`);
					expect(g.body.data[field]).toBe(change[field]);
					expect(g.body.data).toEqual({ ...d, ...change, updated_at: g.body.data.updated_at });
				}
				[b1, b2] = await Promise.all([b1, b2].map(async (d) => (await call("GET", `${base}/${d.id}`)).body.data));
				// The single-created document was outside the query.
				expect((await call("GET", `${base}/${a.id}`)).body).toEqual({ data: a });
			});
		}

		test("DELETE /:id soft-deletes: deleted_at set, hidden unless x-exclude-soft-delete-query", async () => {
			const r = await call("DELETE", `${base}/${b1.id}`);
			expect(r.status).toBe(200);
			expect(Object.keys(r.body)).toEqual(["data"]);
			expect(r.body.data.deleted_at).toMatch(ISO);
			expect(r.body.data).toMatchObject({ id: b1.id, deleted_by: p.root.user_id, deleted_in: p.root.client_id });
			const deleted = r.body.data;
			expect((await call("GET", `${base}?${scoped()}`)).body).toEqual({ items: [a, b2], total: 2 });
			expect((await call("GET", `${base}/count?${scoped()}`)).body).toEqual({ total: 2 });
			expectError(await call("GET", `${base}/${b1.id}`), 404, NOT_FOUND.message);
			expect((await call("GET", `${base}/${b1.id}`)).body).toEqual(NOT_FOUND);
			expectError(await call("DELETE", `${base}/${b1.id}`), 404, NOT_FOUND.message);
			expect((await call("GET", `${base}?${scoped()}`, { headers: EXCLUDE })).body).toEqual({ items: [a, deleted, b2], total: 3 });
			expect((await call("GET", `${base}/${b1.id}`, { headers: EXCLUDE })).body).toEqual({ data: deleted });
			const cursor = await call("GET", `${base}/cursor?${scoped()}`, { headers: { accept: "text/event-stream" } });
			expect(sseKeysSorted(cursor.text)).toBe(sseKeysSorted(sseText([a, b2])));
		});

		test("PUT /:id/restore makes it live again", async () => {
			if (NO_RESTORE[c.path]) {
				expectError(await call("PUT", `${base}/${b1.id}/restore`), 400, NO_RESTORE[c.path]);
				const still = await call("GET", `${base}/${b1.id}`, { headers: EXCLUDE });
				expect(still.body.data.deleted_at).toMatch(ISO);
				b1 = still.body.data;
				return;
			}
			const r = await call("PUT", `${base}/${b1.id}/restore`);
			expect(r.status).toBe(200);
			expect(Object.keys(r.body)).toEqual(["data"]);
			expect(r.body.data).toMatchObject({ id: b1.id, deleted_at: null, restored_by: p.root.user_id, restored_in: p.root.client_id });
			expect(r.body.data.restored_at).toMatch(ISO);
			expect((await call("GET", `${base}/${b1.id}`)).body).toEqual({ data: r.body.data });
			expect((await call("GET", `${base}/count?${scoped()}`)).body).toEqual({ total: 3 });
			// Restoring a live document: nothing to restore.
			expectError(await call("PUT", `${base}/${b1.id}/restore`), 404, NOT_FOUND.message);
			b1 = r.body.data;
		});

		test("DELETE /:id/destroy removes live and soft-deleted documents for good", async () => {
			const r = await call("DELETE", `${base}/${a.id}/destroy`);
			expect(r.status).toBe(200);
			expect(r.body).toEqual({ data: a });
			expectError(await call("GET", `${base}/${a.id}`), 404, NOT_FOUND.message);
			expect((await call("GET", `${base}/${a.id}`, { headers: EXCLUDE })).body).toEqual(NOT_FOUND);

			expect((await call("DELETE", `${base}/${b2.id}`)).status).toBe(200);
			const gone = await call("DELETE", `${base}/${b2.id}/destroy`);
			expect(gone.status).toBe(200);
			expect(gone.body.data).toMatchObject({ id: b2.id });
			expect(gone.body.data.deleted_at).toMatch(ISO);
			expect((await call("GET", `${base}/${b2.id}`, { headers: EXCLUDE })).body).toEqual(NOT_FOUND);
			expectError(await call("PUT", `${base}/${b2.id}/restore`), 404, NOT_FOUND.message);
			expectError(await call("DELETE", `${base}/${b2.id}/destroy`), 404, NOT_FOUND.message);
			expect((await call("GET", `${base}?${scoped()}`, { headers: EXCLUDE })).body).toEqual({ items: [b1], total: 1 });
			expect((await call("GET", `${base}/count?${scoped()}`, { headers: EXCLUDE })).body).toEqual({ total: 1 });
		});

		test("no response of this collection carries a write-only or internal field", () => {
			const mine = responses.filter((x) => x.path.startsWith(`${base}/`) || x.path === base || x.path.startsWith(`${base}?`));
			expect(mine.length).toBeGreaterThan(10);
			for (const { path, method, r } of mine) {
				const isCreate = method === "POST";
				const docs: Doc[] = r.body?.data ? [r.body.data] : Array.isArray(r.body?.items) ? r.body.items : [];
				if (path.includes("/cursor")) for (const f of parseSse(r.text)) if (f.id) docs.push(JSON.parse(f.data));
				expectNoHidden(c, isCreate ? docs.map((d) => without(d, once)) : docs);
				if (!isCreate && once) for (const d of docs) expect(Object.keys(d)).not.toContain(once);
			}
		});
	});
}

test("no plaintext password or secret, no password hash, and no 5xx in any response", () => {
	expect(responses.length).toBeGreaterThan(COLLECTIONS.length * 20);
	expect(passwords).toHaveLength(3);
	expect(clientSecrets).toHaveLength(3);
	for (const { method, path, r } of responses) {
		expect({ method, path, status: r.status < 500 ? "ok" : r.status }).toEqual({ method, path, status: "ok" });
		expect(r.text).not.toMatch(BCRYPT);
		for (const s of passwords) expect(r.text.includes(s)).toBe(false);
		const clientCreate = method === "POST" && (path === "/domain/clients" || path === "/domain/clients/bulk");
		if (!clientCreate) for (const s of clientSecrets) expect(r.text.includes(s)).toBe(false);
	}
	expect(COLLECTIONS.length).toBeGreaterThanOrEqual(50);
});
