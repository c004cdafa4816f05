/**
 * Search scores come from the caller's view only (docs/search.md, "Scores"). They used to be computed over every
 * tenant's documents: another tenant's private posts moved a caller's scores, so a score revealed how many documents
 * out of sight hold a word. Now a caller's scores and order do not move when documents outside its view come or go:
 * another tenant's private posts, or posts of its own tenant that its zones do not reach.
 */
import { bootTenancy, ok, type Tenancy } from "../helpers/tenants";
import { sleep } from "../helpers/wait";

const Q = "rust ownership";

describe("search scores", () => {
	let t: Tenancy;
	beforeAll(async () => {
		t = await bootTenancy();
	}, 180_000);
	afterAll(() => t?.cleanup());

	const search = async (token: string, q: string, zone?: string) =>
		(await ok(t.as(token, "GET", `/content/posts/search?q=${encodeURIComponent(q)}${zone ? `&zone=${zone}` : ""}`), `search ${q}`)) as {
			items: Array<{ id: string; score: number }>;
			total: number;
		};
	const ranking = (r: { items: Array<{ id: string; score: number }> }) => r.items.map((d) => [d.id, d.score]);
	const post = (token: string, title: string, content: string) => ok(t.as(token, "POST", "/content/posts", { title, content }), "post");
	/** Waits until the search index holds what `token` should find (it follows the writes within milliseconds). */
	async function until(token: string, q: string, total: number, zone?: string) {
		for (const end = Date.now() + 5000; (await search(token, q, zone)).total !== total; await sleep(20))
			if (Date.now() > end) throw new Error(`search index did not reach ${total} for ${q}`);
	}

	test("tenant b's private posts, and tenant a's posts outside the caller's zones, change neither tenant a's scores nor its order", async () => {
		const a = t.a.admin.token;
		for (const [title, content] of [
			["Rust ownership", "rust ownership and borrowing, ownership again"],
			["A guide", "a long guide on the ownership of a rusty bike and of rust"],
			["Rust", "garden tools get rust in the rain"],
			["Ownerships registry", "registry of deeds"],
		])
			await post(a, title, content);
		await until(a, Q, 4);
		const before = await search(a, Q);
		const beforeTenant = await search(a, Q, "client");
		expect(before.items).toHaveLength(4);
		expect(ranking(beforeTenant)).toEqual(ranking(before));

		// Tenant b: thirty private posts full of the same words, some far more often.
		for (let i = 0; i < 30; i++) await post(t.b.admin.token, i % 3 ? "rust" : "Rust ownership ownership", `rust ${"rust ".repeat(i % 5)}notes ${i}`);
		await until(t.b.admin.token, Q, 30);
		expect(ranking(await search(a, Q))).toEqual(ranking(before));
		expect(ranking(await search(a, Q, "client"))).toEqual(ranking(beforeTenant));

		// Tenant a's member: its own posts are in tenant a, outside the admin's default zones (own, share).
		for (let i = 0; i < 10; i++) await post(t.a.member.token, "ownership", `ownership ${i}`);
		await until(a, Q, 14, "client");
		expect(ranking(await search(a, Q))).toEqual(ranking(before));
	});
});
