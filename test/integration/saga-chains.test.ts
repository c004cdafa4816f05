/**
 * Saga compensation over a chain of stages on one document (docs/contracts.md "Sagas": every stage undone newest first; a
 * document someone else changed after a stage is left alone), on both document stores, with two tenants. Every write
 * stores a new revision (the document's ETag) and undoing a stage gives the document a revision of its own: undoing a
 * later stage of the same saga is not "someone else's change" to an earlier stage, but a write by anyone else still is.
 */
import { bootTenancy, ok, type Tenancy } from "../helpers/tenants";

jest.setTimeout(180_000);

const NOT_FOUND = { statusCode: 404, message: "document not found", error: "Not Found" };

describe("saga compensation over chained stages", () => {
	let t: Tenancy;
	let admin: string;
	const H = (saga: string) => ({ "x-saga-session": saga });
	const start = async () => (await ok(t.as(admin, "POST", "/essential/sagas/start", { ttl: 60 }), "saga start")).data.id as string;
	const create = async (body: Record<string, unknown>, saga?: string) =>
		(await ok(t.as(admin, "POST", "/content/notes", body, saga ? H(saga) : undefined), "note")).data as Record<string, any>;
	const patch = async (id: string, body: Record<string, unknown>, saga?: string) =>
		(await ok(t.as(admin, "PATCH", `/content/notes/${id}`, body, saga ? H(saga) : undefined), "patch")).data as Record<string, any>;
	const read = async (id: string, token = admin) => t.as(token, "GET", `/content/notes/${id}`, undefined, { "x-exclude-soft-delete-query": "1" });
	const stagesOf = async (saga: string) =>
		(
			await ok(
				t.as(
					admin,
					"GET",
					`/essential/saga-stages?query=${encodeURIComponent(JSON.stringify({ saga }))}&pagination=${encodeURIComponent(JSON.stringify({ limit: 100, sort: { created_at: 1 } }))}`,
				),
				"stages",
			)
		).items as Array<Record<string, any>>;

	beforeAll(async () => {
		t = await bootTenancy();
		admin = t.a.admin.token;
	}, 180_000);

	afterAll(async () => {
		await t?.cleanup();
	});

	test("a document created, patched, bulk patched and deleted in one saga is destroyed by abort; one patched twice gets its before-image and a new tag", async () => {
		const pre = await create({ title: "chain-pre", content: "before" });
		const preRead = await read(pre.id);
		const tags = [preRead.headers.get("etag")];
		const saga = await start();
		const made = await create({ title: "chain-made", content: "first" }, saga);
		await patch(made.id, { content: "second" }, saga);
		await patch(pre.id, { content: "saga one" }, saga);
		tags.push((await read(pre.id)).headers.get("etag"));
		const q = encodeURIComponent(JSON.stringify({ id: { $in: [made.id, pre.id] } }));
		expect((await ok(t.as(admin, "PATCH", `/content/notes/bulk?query=${q}`, { content: "bulk" }, H(saga)), "bulk patch")).total).toBe(2);
		tags.push((await read(pre.id)).headers.get("etag"));
		await ok(t.as(admin, "DELETE", `/content/notes/${made.id}`, undefined, H(saga)), "delete");
		await patch(pre.id, { content: "saga two", description: "added" }, saga);
		tags.push((await read(pre.id)).headers.get("etag"));
		// Another tenant's admin can neither see nor end the saga.
		expect((await t.as(t.b.admin.token, "GET", `/essential/sagas/${saga}/abort`)).status).toBe(404);

		expect((await ok(t.as(admin, "GET", `/essential/sagas/${saga}/abort`), "abort")).data.state).toBe("ABORTED");
		const stages = await stagesOf(saga);
		expect(stages.map((s) => s.action)).toEqual(["INSERT_MANY", "FIND_ONE_AND_UPDATE", "FIND_ONE_AND_UPDATE", "UPDATE_MANY", "FIND_ONE_AND_UPDATE", "FIND_ONE_AND_UPDATE"]);
		expect(stages.map((s) => [s.state, s.conflict])).toEqual(Array(6).fill(["compensated", false]));
		// The document the saga created is gone, even soft-deleted ones; the other is its before-image with a tag of its own.
		expect((await read(made.id)).body).toEqual(NOT_FOUND);
		const back = await read(pre.id);
		expect(back.body.data).toEqual(preRead.body.data);
		expect(tags).not.toContain(back.headers.get("etag"));
		// The other tenant never saw any of it.
		for (const id of [made.id, pre.id]) expect((await read(id, t.b.admin.token)).body).toEqual(NOT_FOUND);
	});

	test("a write by someone else between two stages of a saga stays: the later stage is undone, the earlier one records conflict", async () => {
		const doc = await create({ title: "chain-other", content: "before", shares: [t.a.member.id] });
		const saga = await start();
		await patch(doc.id, { content: "saga one" }, saga);
		const theirs = await ok(t.as(t.a.member.token, "PATCH", `/content/notes/${doc.id}`, { description: "by the member" }), "member patch");
		await patch(doc.id, { content: "saga two" }, saga);

		await ok(t.as(admin, "GET", `/essential/sagas/${saga}/abort`), "abort");
		expect((await stagesOf(saga)).map((s) => [s.state, s.conflict])).toEqual([
			["conflict", true],
			["compensated", false],
		]);
		// As the member's write left it: the saga's second patch undone, its first (before the member's write) kept.
		const now = (await read(doc.id)).body.data;
		expect(now).toEqual(theirs.data);
		expect(now).toMatchObject({ content: "saga one", description: "by the member" });
	});
});
