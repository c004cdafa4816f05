/**
 * Filters the store cannot evaluate itself, over a user's 30 000 notes (loaded through the store, not the API), on
 * both stores, /status probed throughout (withStatusProbe: never held 100 ms):
 *
 * - `$elemMatch` of element tests (`{tags: {$elemMatch: {$in: [...]}}}`) is SQL on PostgreSQL: a count and a list are
 *   exact and read only what they return (a count read all 30 000 notes into the gateway: 6.4 s);
 * - a filter PostgreSQL leaves to the gateway (a `$regex` with `\b`) is matched one by one on at most 10 000
 *   candidates a read (lib/query-safety.ts MAX_EXAMINED): narrowed below that by conditions SQL evaluates, exact; over
 *   it, 400 naming the limit on list, count and cursor.
 */
import { platformDoc } from "../../engine/collection.mixin";
import type { DocumentStore, StoredDoc } from "../../stores";
import { withStatusProbe } from "../helpers/status-probe";
import { bootTenancy, type Tenancy } from "../helpers/tenants";

const N = 30_000;
const q = (v: unknown) => encodeURIComponent(JSON.stringify(v));
const TOO_MANY = { statusCode: 400, message: "query is too expensive: it would examine more than 10000 documents one by one; narrow the query", error: "Bad Request" };

describe("rows examined one by one", () => {
	let t: Tenancy;
	let notes: DocumentStore;

	beforeAll(async () => {
		t = await bootTenancy();
		notes = (t.p.broker.getLocalService("content") as any).collectionStore("notes");
		const docs: StoredDoc[] = Array.from({ length: N }, (_, i) =>
			platformDoc({ title: `note ${i}`, content: `content of note ${i}`, tags: [`t${i % 50}`, `u${i % 7}`] }, { owner: t.a.member.id, cid: t.a.client.id }),
		);
		for (let i = 0; i < docs.length; i += 10_000) await notes.insertMany(docs.slice(i, i + 10_000));
		// Pooled client connections idled past the server's keep-alive while the notes were loaded.
		for (let i = 0; i < 3; i++) await fetch(`${t.p.url}/status`).catch(() => undefined);
	}, 300_000);
	afterAll(() => t?.cleanup());
	withStatusProbe(() => t.p.url);

	async function get(path: string) {
		const res = await fetch(t.p.url + path, { headers: { authorization: `Bearer ${t.a.member.token}` }, signal: AbortSignal.timeout(60_000) });
		const text = await res.text();
		return { status: res.status, body: res.headers.get("content-type")?.includes("json") ? JSON.parse(text) : text };
	}

	/** Counts the rows PostgreSQL hands the store while `fn` runs. */
	async function rowsRead<T>(fn: () => Promise<T>): Promise<{ value: T; rows?: number }> {
		type Db = Record<"read" | "readOrdered", (text: string, values?: unknown[]) => Promise<{ rows: unknown[] }>> & { within(ms: number): Db };
		const base = (notes as any).db as Db | undefined;
		if (!base) return { value: await fn() };
		// A request reads through the view of the database with its deadline (PgDatabase.within, one per value, kept).
		const dbs = [base, base.within(t.p.cfg.requestDbDeadlineMs)];
		let rows = 0;
		const restore: Array<() => void> = [];
		for (const db of dbs)
			for (const k of ["read", "readOrdered"] as const) {
				const original = db[k];
				db[k] = async (text, values) => {
					const r = await original(text, values);
					rows += r.rows.length;
					return r;
				};
				restore.push(() => (db[k] = original));
			}
		try {
			return { value: await fn(), rows };
		} finally {
			for (const r of restore) r();
		}
	}

	test(`$elemMatch of element tests over ${N} notes: exact count and list; PostgreSQL reads what they return`, async () => {
		const cases: Array<[unknown, number, (tags: string[]) => boolean]> = [
			[{ tags: { $elemMatch: { $in: ["t7", "t8"] } } }, (2 * N) / 50, (tags) => tags.includes("t7") || tags.includes("t8")],
			[{ tags: { $elemMatch: { $gte: "u3", $lt: "u4" } } }, Math.ceil((N - 3) / 7), (tags) => tags.includes("u3")],
			[{ tags: { $elemMatch: { $regex: "^t1\\d$" } } }, (10 * N) / 50, (tags) => tags.some((x) => /^t1\d$/.test(x))],
		];
		for (const [query, total, has] of cases) {
			const { value, rows } = await rowsRead(async () => [
				await get(`/content/notes/count?query=${q(query)}`),
				await get(`/content/notes?query=${q(query)}&pagination=${q({ limit: 10 })}`),
			]);
			const [count, list] = value;
			expect({ query, count }).toEqual({ query, count: { status: 200, body: { total } } });
			expect({ query, status: list.status, total: list.body.total, n: list.body.items.length }).toEqual({ query, status: 200, total, n: 10 });
			expect({ query, all: list.body.items.every((d: { tags: string[] }) => has(d.tags)) }).toEqual({ query, all: true });
			// The count's one row and the page's ten.
			if (rows !== undefined) expect({ query, rows }).toEqual({ query, rows: 11 });
		}
	}, 120_000);

	test(`a filter matched one by one: exact over fewer than 10 000 candidates; over more, 400 naming the limit on PostgreSQL`, async () => {
		// `\b` is outside the patterns PostgreSQL is given: the gateway matches it.
		const word = { title: { $regex: "\\b7\\b" } };
		const narrowed = { tags: "t7", ...word };
		const { value: ok, rows } = await rowsRead(async () => [await get(`/content/notes/count?query=${q(narrowed)}`), await get(`/content/notes?query=${q(narrowed)}`)]);
		expect(ok[0]).toEqual({ status: 200, body: { total: 1 } });
		expect({ status: ok[1].status, titles: ok[1].body.items.map((d: { title: string }) => d.title), total: ok[1].body.total }).toEqual({
			status: 200,
			titles: ["note 7"],
			total: 1,
		});
		// The 600 notes tagged t7, twice.
		if (rows !== undefined) expect(rows).toBe(1200);
		const wide = [await get(`/content/notes/count?query=${q(word)}`), await get(`/content/notes?query=${q(word)}`), await get(`/content/notes/cursor?query=${q(word)}`)];
		expect(wide).toEqual([
			{ status: 400, body: TOO_MANY },
			{ status: 400, body: TOO_MANY },
			{ status: 400, body: TOO_MANY },
		]);
	}, 120_000);
});
