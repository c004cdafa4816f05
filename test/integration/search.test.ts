/**
 * Issue 12 part 2 (docs/contracts.md "Other special actions", docs/search.md): `GET /{content/posts|career/products|
 * conjoint/messages}/search`. Ranking on a fixed corpus; the caller's view decides (zones, grant rows, hidden fields
 * never matched nor returned), also for the best match; the index follows creates, patches, deletes, restores and
 * destroys within 2 s, and is rebuilt after a restart.
 */
import { randomBytes } from "crypto";
import { bootPlatform, type TestPlatform } from "../helpers/platform";
import { createUser, errorBody, tokenOf } from "../helpers/auth";
import { sleep } from "../helpers/wait";

jest.setTimeout(120_000);

let p: TestPlatform;
let root: string;
const PASSWORD = "Search-Pass-123!";

async function ok(r: Promise<{ status: number; text: string; body: any }>, what: string): Promise<any> {
	const res = await r;
	if (res.status !== 200) throw new Error(`${what}: ${res.status} ${res.text}`);
	return res.body;
}

async function user(grants: Array<{ action: string; object: string; field?: string[]; filter?: string[] }>, scopes?: string[]) {
	const username = `se-${randomBytes(4).toString("hex")}`;
	const u = await createUser(p.http, root, { username, password: PASSWORD, subjects: [] });
	for (const g of grants) await ok(p.http("POST", "/auth/grants", { token: root, body: { subject: `${u.id}@${p.root.domain}`, ...g } }), `grant ${g.action}`);
	const token = (await tokenOf(p.http, { grant_type: "password", client_id: p.root.client_id, username, password: PASSWORD, ...(scopes ? { scopes } : {}) }))
		.access_token as string;
	return { id: u.id as string, token };
}

const search = (token: string, path: string, q: string, extra = "") => p.http("GET", `${path}/search?q=${encodeURIComponent(q)}${extra}`, { token });
const create = async (token: string, path: string, body: Record<string, unknown>) => (await ok(p.http("POST", path, { token, body }), `create ${path}`)).data;

/** Polls a search until `check` holds; fails after 2 s (the index's promise). */
async function within2s(token: string, path: string, q: string, check: (body: any) => boolean): Promise<number> {
	const t0 = Date.now();
	for (;;) {
		const r = await search(token, path, q);
		if (r.status === 200 && check(r.body)) return Date.now() - t0;
		if (Date.now() - t0 > 2000) throw new Error(`index did not follow within 2 s: ${r.status} ${r.text}`);
		await sleep(20);
	}
}

beforeAll(async () => {
	p = await bootPlatform();
	root = await p.rootToken();
}, 60_000);

afterAll(async () => {
	await p?.cleanup();
});

describe("ranking on a fixed corpus", () => {
	const ids: Record<string, string> = {};
	beforeAll(async () => {
		const corpus: Record<string, Record<string, unknown>> = {
			both_many: { title: "Rust ownership", content: "rust ownership and borrowing, ownership again" },
			both_once: { title: "A guide", content: "a long guide on the ownership of a rusty bike and of rust" },
			rust_only: { title: "Rust", content: "garden tools get rust in the rain" },
			none: { title: "Cooking", content: "pasta and sauce" },
			prefix: { title: "Ownerships registry", content: "registry of deeds" },
		};
		for (const [k, body] of Object.entries(corpus)) ids[k] = (await create(root, "/content/posts", body)).id;
		// The index follows the writes within 2 s (it reads them in batches): every document of the corpus is in it.
		await within2s(root, "/content/posts", "rust ownership", (b) => b.total === 4);
		await within2s(root, "/content/posts", "pasta", (b) => b.total === 1);
	});

	test("best first, each with its score; documents matching no term are absent", async () => {
		const r = await search(root, "/content/posts", "rust ownership");
		expect(r.status).toBe(200);
		expect(r.body.items.map((d: any) => d.id)).toEqual([ids.both_many, ids.both_once, ids.rust_only, ids.prefix]);
		expect(r.body.total).toBe(4);
		const scores = r.body.items.map((d: any) => d.score);
		expect(scores.every((s: number) => typeof s === "number" && s > 0)).toBe(true);
		expect([...scores].sort((a, b) => b - a)).toEqual(scores);
		// Documents come as the list gives them, plus `score`.
		expect(r.body.items[0]).toMatchObject({ id: ids.both_many, title: "Rust ownership", owner: p.root.user_id });
	});

	test("case-insensitive, whole words, the last word also as a prefix", async () => {
		expect((await search(root, "/content/posts", "PASTA")).body.items.map((d: any) => d.id)).toEqual([ids.none]);
		// "owner" is a prefix of ownership/ownerships as the last word.
		expect((await search(root, "/content/posts", "owner")).body.total).toBe(3);
		// Not as an earlier word: only "pasta" counts.
		expect((await search(root, "/content/posts", "owner pasta")).body.items.map((d: any) => d.id)).toEqual([ids.none]);
		expect((await search(root, "/content/posts", "zzzqqq")).body).toEqual({ items: [], total: 0 });
	});

	test("pagination applies after ranking: pages of the same order, total unchanged", async () => {
		const page1 = await search(root, "/content/posts", "rust ownership", `&pagination=${encodeURIComponent(JSON.stringify({ limit: 2 }))}`);
		const page2 = await search(root, "/content/posts", "rust ownership", `&pagination=${encodeURIComponent(JSON.stringify({ limit: 2, skip: 2 }))}`);
		expect(page1.body.items.map((d: any) => d.id)).toEqual([ids.both_many, ids.both_once]);
		expect(page2.body.items.map((d: any) => d.id)).toEqual([ids.rust_only, ids.prefix]);
		expect(page1.body.total).toBe(4);
		expect(page2.body.total).toBe(4);
	});

	test("the caller's query narrows the view like a list", async () => {
		const r = await search(root, "/content/posts", "rust", `&query=${encodeURIComponent(JSON.stringify({ title: "Rust" }))}`);
		expect(r.body.items.map((d: any) => d.id)).toEqual([ids.rust_only]);
		expect(r.body.total).toBe(1);
	});

	test("bad input: 400 with the exact message, never a 500", async () => {
		const cases: Array<[string, string]> = [
			["/content/posts/search", "q is required"],
			["/content/posts/search?q=", "q is required"],
			["/content/posts/search?q=%20%20", "q is required"],
			[`/content/posts/search?q=${"a".repeat(201)}`, "q must be at most 200 characters"],
			["/content/posts/search?q=a&q=b", "q must be a string"],
			[`/content/posts/search?q=rust&pagination=${encodeURIComponent('{"limit":101}')}`, "pagination.limit must be at most 100"],
			[`/content/posts/search?q=rust&pagination=${encodeURIComponent('{"sort":{"title":1}}')}`, "pagination.sort is not allowed in a search: results are ranked by relevance"],
			["/content/posts/search?q=rust&query=%7B%22%24where%22%3A%221%22%7D", "operator $where is not allowed"],
			["/content/posts/search?q=rust&zone=nope", "unknown zone nope"],
		];
		for (const [path, message] of cases) {
			const r = await p.http("GET", path, { token: root });
			expect({ path, status: r.status, body: r.body }).toEqual({ path, status: 400, body: errorBody(400, message) });
		}
	});

	test("products and messages search the same way", async () => {
		const a = await create(root, "/career/products", { name: "Blue kettle", description: "stainless kettle, boils fast" });
		await create(root, "/career/products", { name: "Red mug" });
		expect((await search(root, "/career/products", "kettle")).body.items.map((d: any) => d.id)).toEqual([a.id]);
		const ch = await create(root, "/conjoint/channels", { name: "general" });
		const m = await create(root, "/conjoint/messages", { channel: ch.id, content: "meet at the lighthouse at noon" });
		await create(root, "/conjoint/messages", { channel: ch.id, content: "lunch?" });
		const r = await search(root, "/conjoint/messages", "lighthouse");
		expect(r.body.items.map((d: any) => d.id)).toEqual([m.id]);
		expect(r.body.items[0].channel).toBe(ch.id);
	});
});

describe("the caller's view decides, never the index", () => {
	test("a document outside the view never appears, also when it is the best match", async () => {
		const u = await user([
			{ action: "search", object: "content:posts" },
			{ action: "write", object: "content:posts" },
		]);
		// Root's post is the best match by far, but root's (own zone): outside u's view.
		const best = await create(root, "/content/posts", { title: "zebra zebra zebra", content: "zebra zebra zebra zebra" });
		const mine = await create(u.token, "/content/posts", { title: "a note", content: "one zebra" });
		const r = await search(u.token, "/content/posts", "zebra");
		expect(r.status).toBe(200);
		expect(r.body).toEqual({ items: [expect.objectContaining({ id: mine.id })], total: 1 });
		expect(r.text).not.toContain(best.id);
		// Root (the best match is in its view) sees it first.
		expect((await search(root, "/content/posts", "zebra")).body.items[0].id).toBe(best.id);
		// Many better matches outside the view do not push the caller's match off the first page.
		for (let i = 0; i < 30; i++) await create(root, "/content/posts", { title: `zebra ${i}`, content: "zebra zebra zebra" });
		const again = await search(u.token, "/content/posts", "zebra", `&pagination=${encodeURIComponent('{"limit":1}')}`);
		expect(again.body).toEqual({ items: [expect.objectContaining({ id: mine.id })], total: 1 });
	});

	test("grant rows: a DRAFT outside the row filter never appears, even as the best match", async () => {
		const w = await user([{ action: "write", object: "content:posts" }]);
		const r = await user([{ action: "search", object: "content:posts", filter: ['{"status":"PUBLISHED"}'] }]);
		// Shared with r, so the zone lets r see both; the grant's rows keep the draft out.
		const draft = await create(w.token, "/content/posts", { title: "quokka quokka", content: "quokka quokka quokka", status: "DRAFT", shares: [r.id] });
		const pub = await create(w.token, "/content/posts", { title: "about animals", content: "a quokka", status: "PUBLISHED", shares: [r.id] });
		const res = await search(r.token, "/content/posts", "quokka");
		expect(res.body).toEqual({ items: [expect.objectContaining({ id: pub.id })], total: 1 });
		expect(res.text).not.toContain(draft.id);
	});

	test("hidden fields are neither matched nor returned", async () => {
		const w = await user([
			{ action: "write", object: "content:posts" },
			{ action: "search", object: "content:posts" },
		]);
		const r = await user([{ action: "search", object: "content:posts", field: ["title"] }]);
		const doc = await create(w.token, "/content/posts", { title: "visible heading", content: "secret narwhal words", shares: [r.id] });
		// Matched through the content: not for r, whose grant reads the title only.
		expect((await search(r.token, "/content/posts", "narwhal")).body).toEqual({ items: [], total: 0 });
		// The writer (all fields) finds it by its content.
		expect((await search(w.token, "/content/posts", "narwhal")).body.items.map((d: any) => d.id)).toEqual([doc.id]);
		// Found through the title: only id, title and score come back.
		const res = await search(r.token, "/content/posts", "heading");
		expect(res.body).toEqual({ items: [{ id: doc.id, title: "visible heading", score: expect.any(Number) }], total: 1 });
		expect(res.text).not.toContain("narwhal");
	});

	test("soft-deleted documents are not found, even with x-exclude-soft-delete-query", async () => {
		const d = await create(root, "/content/posts", { title: "ibex" });
		await ok(p.http("DELETE", `/content/posts/${d.id}`, { token: root }), "delete");
		const r = await p.http("GET", "/content/posts/search?q=ibex", { token: root, headers: { "x-exclude-soft-delete-query": "1" } });
		expect(r.body).toEqual({ items: [], total: 0 });
	});
});

describe("the index follows writes within 2 s and survives a restart", () => {
	test("create, patch, bulk patch, delete, restore, destroy", async () => {
		const P = "/content/posts";
		const d = await create(root, P, { title: "okapi sighting" });
		await within2s(root, P, "okapi", (b) => b.items.some((x: any) => x.id === d.id));

		await ok(p.http("PATCH", `${P}/${d.id}`, { token: root, body: { title: "tapir sighting" } }), "patch");
		await within2s(root, P, "tapir", (b) => b.items.some((x: any) => x.id === d.id));
		await within2s(root, P, "okapi", (b) => b.total === 0);

		const bulk = await ok(p.http("PATCH", `${P}/bulk?query=${encodeURIComponent(JSON.stringify({ id: d.id }))}`, { token: root, body: { content: "gharial" } }), "bulk");
		expect(bulk.total).toBe(1);
		await within2s(root, P, "gharial", (b) => b.items.some((x: any) => x.id === d.id));

		await ok(p.http("DELETE", `${P}/${d.id}`, { token: root }), "delete");
		await within2s(root, P, "tapir", (b) => b.total === 0);

		await ok(p.http("PUT", `${P}/${d.id}/restore`, { token: root }), "restore");
		await within2s(root, P, "tapir", (b) => b.items.some((x: any) => x.id === d.id));

		await ok(p.http("DELETE", `${P}/${d.id}/destroy`, { token: root }), "destroy");
		await within2s(root, P, "tapir", (b) => b.total === 0);
	});

	test("a search right after a write on this node finds it, even while the tail reads slowly (read your writes)", async () => {
		// The tail's reads are slowed, so a search answered from the index as it stands would miss the write just answered.
		const outbox = (p.broker.getLocalService("content") as any).$search.outbox;
		const read = outbox.readFrom;
		outbox.readFrom = async (...args: unknown[]) => {
			await sleep(300);
			return read.apply(outbox, args);
		};
		try {
			const P = "/content/posts";
			const d = await create(root, P, { title: "numbat burrow" });
			const r = await search(root, P, "numbat");
			expect({ status: r.status, ids: r.body.items.map((x: any) => x.id) }).toEqual({ status: 200, ids: [d.id] });
			await ok(p.http("PATCH", `${P}/${d.id}`, { token: root, body: { title: "quoll burrow" } }), "patch");
			expect((await search(root, P, "quoll")).body.items.map((x: any) => x.id)).toEqual([d.id]);
			expect((await search(root, P, "numbat")).body.total).toBe(0);
			await ok(p.http("DELETE", `${P}/${d.id}`, { token: root }), "delete");
			expect((await search(root, P, "quoll")).body.total).toBe(0);
		} finally {
			outbox.readFrom = read;
		}
	});

	test("documents written before a restart are found after it", async () => {
		const d = await create(root, "/career/products", { name: "persistent pangolin lamp" });
		const gone = await create(root, "/career/products", { name: "pangolin shade" });
		await ok(p.http("DELETE", `/career/products/${gone.id}`, { token: root }), "delete");
		await p.restart();
		root = await p.rootToken();
		const r = await search(root, "/career/products", "pangolin");
		expect(r.body.items.map((x: any) => x.id)).toEqual([d.id]);
		// And it keeps following after the restart.
		const e = await create(root, "/career/products", { name: "pangolin pangolin" });
		await within2s(root, "/career/products", "pangolin", (b) => b.total === 2 && b.items[0].id === e.id);
	});
});
