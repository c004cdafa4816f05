/**
 * Issue 33 item 6: the required lists of the OpenAPI document are what the server really returns. For every
 * collection a document with only its required fields is created (platform-written ones are stored as the platform
 * writes them), read by id and listed, and each answer is checked against `<Name>Full` (every field an un-narrowed
 * answer holds, required) and against the response schema its operation declares. A field a grant can hide cannot
 * be required of every answer: the narrowed answers (a grant's field list, a projection) must match the operation's
 * schema and must not pass as `<Name>Full`. Another tenant's ids answer 404, as declared.
 */
import { COLLECTIONS, type CollectionRef } from "../../catalog";
import { schemaName } from "../../lib/openapi";
import { platformDoc } from "../../engine/collection.mixin";
import { openApiChecker, type OpenApiChecker } from "../helpers/openapi-check";
import type { HttpResult } from "../helpers/platform";
import { sampleBody, sampleLinks, unique } from "../helpers/samples";
import { bootTenancy, ok, type Doc, type Tenancy } from "../helpers/tenants";

jest.setTimeout(180_000);

let t: Tenancy;
let checker: OpenApiChecker;
const q = (v: unknown) => encodeURIComponent(JSON.stringify(v));

beforeAll(async () => {
	t = await bootTenancy();
	checker = openApiChecker((await t.p.http("GET", "/api-json")).body);
	sampleLinks.saga = (await ok(t.as(t.root, "POST", "/essential/sagas/start", { ttl: 900 }), "saga")).data.id;
});
afterAll(() => t?.cleanup());

/** The answer as its operation declares it (status, type, schema): the problems, none when it is. */
function declared(method: string, path: string, r: HttpResult): string[] {
	return checker.checkAnswer({ method, url: path, status: r.status, responseHeaders: { "content-type": r.headers.get("content-type") ?? "" }, responseText: r.text });
}
const full = (c: CollectionRef, d: Doc) => checker.validate({ $ref: `#/components/schemas/${schemaName(c.domain, c.collection)}Full` }, d);

/** A document of the collection with its required fields only, as the operator creates it (or the platform stores it). */
async function minimal(c: CollectionRef): Promise<string> {
	const body = sampleBody(c, 0, { optional: false });
	if (!c.collection.platformWritten) return (await ok(t.as(t.root, "POST", `/${c.path}`, body), `create ${c.path}`)).data.id;
	const svc = t.p.broker.getLocalService(c.domain.name) as any;
	const doc = platformDoc(body, { owner: t.p.root.user_id, cid: t.p.root.client_id });
	await svc.collectionStore(c.collection.name).insert(doc);
	return doc.id as string;
}

describe.each(COLLECTIONS.map((c) => [c.path, c] as const))("%s", (_path, c) => {
	test("a document read by id and listed holds every field <Name>Full requires, and matches its operation's schema", async () => {
		const id = await minimal(c);
		const byId = `/${c.path}/${id}`;
		const list = `/${c.path}?query=${q({ id })}`;
		const got = await t.as(t.root, "GET", byId);
		const listed = await t.as(t.root, "GET", list);
		expect({ get: got.status, list: listed.status, total: listed.body.total }).toEqual({ get: 200, list: 200, total: 1 });
		// The same document (ids only: the platform may work on it between the two reads, an e-mail's delivery say).
		expect(listed.body.items.map((d: Doc) => d.id)).toEqual([id]);
		expect({ full: full(c, got.body.data), listedFull: full(c, listed.body.items[0]), get: declared("GET", byId, got), list: declared("GET", list, listed) }).toEqual({
			full: null,
			listedFull: null,
			get: [],
			list: [],
		});
		// Another tenant's admin: the document does not exist for it (404 as declared), and its list does not show it.
		const foreign = await t.as(t.b.admin.token, "GET", byId);
		expect(foreign.body).toEqual({ statusCode: 404, message: "document not found", error: "Not Found" });
		expect(declared("GET", byId, foreign)).toEqual([]);
		expect((await t.as(t.b.admin.token, "GET", list)).body).toEqual({ items: [], total: 0 });
	});
});

describe("what a write leaves behind is still read in full", () => {
	test("settable fields cleared with null stay in the answer (null), and a soft-deleted document read with the header is whole", async () => {
		const c = COLLECTIONS.find((x) => x.path === "content/notes")!;
		const id = (await ok(t.as(t.a.member.token, "POST", "/content/notes", { title: `cleared ${unique()}`, tags: ["x"], version: "2.0.0" }), "note")).data.id;
		const patched = await t.as(t.a.member.token, "PATCH", `/content/notes/${id}`, { version: null, shares: null, groups: null, tags: null, content: null });
		expect(patched.status).toBe(200);
		expect(patched.body.data).toMatchObject({ version: null, shares: null, groups: null, tags: null });
		expect(full(c, patched.body.data)).toBeNull();
		await ok(t.as(t.a.member.token, "DELETE", `/content/notes/${id}`), "delete");
		const deleted = await t.as(t.a.member.token, "GET", `/content/notes/${id}`, undefined, { "x-exclude-soft-delete-query": "1" });
		expect(deleted.body.data.deleted_at).toEqual(expect.any(String));
		expect({ full: full(c, deleted.body.data), declared: declared("GET", `/content/notes/${id}`, deleted) }).toEqual({ full: null, declared: [] });
	});
});

describe("narrowed answers: not in full, as declared", () => {
	const notes = () => COLLECTIONS.find((x) => x.path === "content/notes")!;

	test("a grant's field list hides what <Name>Full requires: the answer matches the operation, not <Name>Full", async () => {
		const { a } = t;
		const id = (await ok(t.as(a.member.token, "POST", "/content/notes", { title: `shared ${unique()}`, content: "body", shares: [a.limited.id] }), "note")).data.id;
		await t.grant(a.admin.token, { subject: a.limited.subject, action: "read", object: "content:notes", field: ["title"] });
		const token = await t.login(a, a.limited.username, a.limited.password);
		const got = await t.as(token, "GET", `/content/notes/${id}?zone=share`);
		expect(got.status).toBe(200);
		expect(Object.keys(got.body.data).sort()).toEqual(["id", "title"]);
		expect(declared("GET", `/content/notes/${id}?zone=share`, got)).toEqual([]);
		expect(full(notes(), got.body.data)).toContain("must have required property 'owner'");
		const listed = await t.as(token, "GET", `/content/notes?zone=share&query=${q({ id })}`);
		expect(listed.body).toEqual({ items: [got.body.data], total: 1 });
		expect(declared("GET", `/content/notes?zone=share&query=${q({ id })}`, listed)).toEqual([]);
		// The other tenant's limited user, with the same username and no grant: 403 in the declared shape.
		const other = await t.as(t.b.limited.token, "GET", `/content/notes/${id}`);
		expect(other.status).toBe(403);
		expect(declared("GET", `/content/notes/${id}`, other)).toEqual([]);
	});

	test("a projection answers the listed fields and id: declared, not in full", async () => {
		const id = (await ok(t.as(t.a.member.token, "POST", "/content/notes", { title: `projected ${unique()}` }), "note")).data.id;
		const path = `/content/notes/${id}?projection=${q({ title: 1 })}`;
		const got = await t.as(t.a.member.token, "GET", path);
		expect(Object.keys(got.body.data).sort()).toEqual(["id", "title"]);
		expect(declared("GET", path, got)).toEqual([]);
		expect(full(notes(), got.body.data)).not.toBeNull();
	});
});
