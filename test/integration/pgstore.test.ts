/**
 * The PostgreSQL document store beyond the shared conformance suite (store-conformance.test.ts):
 * - differential: hundreds of generated filters over documents of mixed shapes (arrays, nulls, missing fields,
 *   sub-documents) give through PgStore (find, count, findPage) exactly the documents the query language in memory
 *   (lib/query.ts) accepts,
 *   whether the filter is translated to SQL exactly or partly evaluated in JavaScript;
 * - values never become SQL text (an injection attempt is matched as a literal, the statement's text has no value);
 * - the zone and soft-delete queries are translated exactly (no JavaScript pass) and use the indexes;
 * - text PostgreSQL cannot store is a 400, never a 500.
 */
import { rmSync } from "fs";
import { compileSafe, RegexBudget } from "../../lib/safe-regex";
import { matches } from "../../lib/query";
import { PgStore, type StoredDoc } from "../../stores";
import { MAX_NAMED_STATEMENTS } from "../../stores/pg.store";
import { Params, whereOf } from "../../stores/pg.query";
import { openRelational, releaseRelational } from "../../runtime/relational";
import { tempDir } from "../helpers/platform";
import { hexId, unique } from "../helpers/samples";
import { testDatabase, type TestDatabase } from "../helpers/pg";

const dir = tempDir("pgstore-");
let pg: TestDatabase | undefined;
let store: PgStore;
const cfg = () => ({ dataDir: dir, databaseUrl: pg!.url });

beforeAll(async () => {
	pg = await testDatabase();
	if (!pg) return;
	store = new PgStore(cfg(), `pgstore_${unique()}`);
	await store.connect();
}, 30_000);
afterAll(async () => {
	if (pg) {
		await store.disconnect();
		await pg.drop();
	}
	rmSync(dir, { recursive: true, force: true });
});

/** A seeded generator: the same cases on every run. */
function rng(seed: number) {
	let s = seed >>> 0;
	return () => (s = (s * 1664525 + 1013904223) >>> 0) / 2 ** 32;
}

const VALUES: unknown[] = [0, 1, 2, 7, -1, 2.5, "a", "b", "A", "", "x y", "é", true, false, null];
const SHAPES = (r: () => number): unknown => {
	const pick = <T>(xs: T[]) => xs[Math.floor(r() * xs.length)];
	const k = r();
	if (k < 0.45) return pick(VALUES);
	// Non-empty: a null or `$exists` test on a dotted path through an empty array is where the stores differ (the
	// embedded matcher sees the path present); empty arrays are covered by `shares` below and the conformance suite.
	if (k < 0.75) return Array.from({ length: 1 + Math.floor(r() * 3) }, () => pick(VALUES));
	if (k < 0.9) return { v: pick(VALUES), w: [pick(VALUES), pick(VALUES)] };
	return [{ v: pick(VALUES) }, { v: pick(VALUES), w: pick(VALUES) }];
};

function docs(): StoredDoc[] {
	const r = rng(42);
	return Array.from({ length: 60 }, (_, i) => {
		const d: StoredDoc = {
			id: hexId(i),
			i,
			deleted_at: i % 7 === 0 ? "2026-01-01T00:00:00.000Z" : null,
			owner: `u${i % 5}`,
			shares: i % 3 ? [`u${(i + 1) % 5}`] : [],
			clients: [`c${i % 2}`, "cx"],
		};
		for (const f of ["a", "b", "c"]) if (r() < 0.85) d[f] = SHAPES(r);
		return d;
	});
}

function queries(): Record<string, unknown>[] {
	const r = rng(7);
	const pick = <T>(xs: T[]) => xs[Math.floor(r() * xs.length)];
	// Not `a.0`: the oracle reads a falsy first element as missing and indexes strings; see the test of `f.N` below.
	const field = () => pick(["a", "b", "c", "a.v", "b.v", "c.w", "missing"]);
	const scalar = () => pick(VALUES);
	const leaf = (): Record<string, unknown> => {
		const f = field();
		switch (Math.floor(r() * 13)) {
			case 0:
				return { [f]: scalar() };
			case 1:
				return { [f]: { $ne: scalar() } };
			case 2:
				return { [f]: { $in: [scalar(), scalar()] } };
			case 3:
				return { [f]: { $nin: [scalar(), scalar()] } };
			case 4:
				return { [f]: { [pick(["$gt", "$gte", "$lt", "$lte"])]: pick([0, 1, 2, "a", "b", ""]) } };
			case 5:
				return { [pick(["a", "b", "c", "missing"])]: { $exists: r() < 0.5 } };
			case 6:
				return { [pick(["a", "b", "c", "shares"])]: pick([{ $size: Math.floor(r() * 3) }, { $exists: r() < 0.5 }, { $in: ["u1", null] }, { $ne: "u2" }]) };
			case 7:
				return { [f]: { $not: { [pick(["$gt", "$lt"])]: pick([0, 1, "a"]) } } };
			case 8:
				return { [f]: { $regex: compileSafe("$regex", f, pick(["^a", "b$", "^$", "[A-Z]", "é"]), pick(["", "i"]), new RegexBudget()) } };
			case 9:
				return { [pick(["a", "b", "c"])]: { $elemMatch: pick([{ v: scalar() }, { $gt: 0 }, { $in: ["a", 1] }]) } };
			case 10:
				return { [f]: { $gte: 0, $lt: 3 } };
			case 11:
				return { [pick(["a", "b"])]: [scalar(), scalar()] };
			default:
				return { [f]: null };
		}
	};
	const node = (depth: number): Record<string, unknown> => {
		const k = r();
		if (depth > 1 || k < 0.5) return leaf();
		if (k < 0.7) return { $or: [node(depth + 1), node(depth + 1)] };
		if (k < 0.85) return { $and: [node(depth + 1), node(depth + 1)] };
		return { $not: node(depth + 1) };
	};
	return Array.from({ length: 400 }, () => node(0));
}

const up = () => !!pg;

/** The oracle: the query language in memory (lib/query.ts), on the filter as the store takes it. */
const oracle = (q: Record<string, unknown>) => q;

describe("PgStore: the same documents as the query language in memory", () => {
	test("400 generated filters (exact SQL and JavaScript-evaluated alike)", async () => {
		if (!up()) return;
		const all = docs();
		await store.removeMany({});
		await store.insertMany(all);
		let exact = 0;
		for (const q of queries()) {
			const expected = all.filter((d) => matches(d, oracle(q))).map((d) => d.id);
			const got = (await store.find({ query: q, sort: { id: 1 } })).map((d) => d.id);
			if (whereOf(q, new Params()).exact) exact++;
			if (process.env.PGSTORE_DEBUG && JSON.stringify(got) !== JSON.stringify(expected)) {
				const diff = all.filter((d) => got.includes(d.id) !== expected.includes(d.id));
				console.log(JSON.stringify(q), whereOf(q, new Params()).exact, JSON.stringify(diff.slice(0, 3)));
				continue;
			}
			expect({ q, ids: got }).toEqual({ q, ids: expected });
			expect({ q, n: await store.count(q) }).toEqual({ q, n: expected.length });
			// A list's page and total in one statement: the same documents and number.
			const page = await store.findPage({ query: q, sort: { id: -1 }, skip: 1, limit: 4 });
			expect({ q, ids: page.docs.map((d) => d.id), total: page.total }).toEqual({ q, ids: [...expected].reverse().slice(1, 5), total: expected.length });
		}
		// Most generated filters take the SQL path: the comparison is not only of the JavaScript fallback.
		expect(exact).toBeGreaterThan(200);
	}, 120_000);
});

describe("PgStore: $elemMatch of element tests is exact SQL", () => {
	test("the documents the query language in memory accepts, over scalars, sub-documents, nested arrays and missing fields; no JavaScript pass", async () => {
		if (!up()) return;
		const all: StoredDoc[] = [
			...docs(),
			{ id: hexId(100), a: [[2, "b"], "x"] },
			{ id: hexId(101), a: [[0, 10]] },
			{ id: hexId(102), a: [{ v: 1 }, 1, "a"] },
			{ id: hexId(103), a: [null, true] },
		];
		await store.removeMany({});
		await store.insertMany(all);
		const re = (src: string, flags = "") => compileSafe("$regex", "a", src, flags, new RegexBudget());
		const tests: Record<string, unknown>[] = [
			{ $gt: 0 },
			{ $gte: 1, $lt: 3 },
			{ $gt: "a" },
			{ $lte: "b", $gt: "" },
			{ $in: ["a", 1] },
			{ $in: [null] },
			{ $in: [true, "x y"] },
			{ $in: ["é", 2.5], $gte: 0 },
			{ $in: [] },
			{ $regex: re("^a") },
			{ $regex: re("[A-Z]", "i") },
			{ $regex: re("^$") },
		];
		for (const t of tests)
			for (const f of ["a", "b", "c", "shares", "missing"]) {
				const q = { [f]: { $elemMatch: t } };
				const expected = all.filter((d) => matches(d, oracle(q))).map((d) => d.id);
				expect({ q, exact: whereOf(q, new Params()).exact }).toEqual({ q, exact: true });
				expect({ q, ids: (await store.find({ query: q, sort: { id: 1 } })).map((d) => d.id) }).toEqual({ q, ids: expected });
				expect({ q, n: await store.count(q) }).toEqual({ q, n: expected.length });
			}
		// Beside other tests, a $regex is evaluated in JavaScript, with the same answer.
		const mixed = { a: { $elemMatch: { $regex: re("a"), $gte: "a" } } };
		expect(whereOf(mixed, new Params()).exact).toBe(false);
		expect((await store.find({ query: mixed, sort: { id: 1 } })).map((d) => d.id)).toEqual(all.filter((d) => matches(d, oracle(mixed))).map((d) => d.id));
	}, 60_000);
});

describe("PgStore: a numeric path segment (`clients.0`, the grouping zone) reads as MongoDB does", () => {
	test("the element of an array, the key of a sub-document, never a scalar's character; a falsy element is present", async () => {
		if (!up()) return;
		await store.removeMany({});
		const rows: StoredDoc[] = [
			{ id: hexId(1), a: ["c1", "c2"] },
			{ id: hexId(2), a: ["c2", "c1"] },
			{ id: hexId(3), a: { "0": "c1" } },
			{ id: hexId(4), a: "c1" },
			{ id: hexId(5), a: [false, "c1"] },
			{ id: hexId(6), a: [] },
			{ id: hexId(7) },
			{ id: hexId(8), a: [{ b: "x" }, { b: "y" }] },
		];
		await store.insertMany(rows);
		const ids = async (query: Record<string, unknown>) => (await store.find({ query, sort: { id: 1 } })).map((d) => rows.findIndex((r) => r.id === d.id) + 1);
		expect(await ids({ "a.0": "c1" })).toEqual([1, 3]);
		expect(await ids({ "a.0": false })).toEqual([5]);
		expect(await ids({ "a.0": null })).toEqual([4, 6, 7]);
		expect(await ids({ "a.0": { $exists: true } })).toEqual([1, 2, 3, 5, 8]);
		expect(await ids({ "a.0": { $ne: "c1" } })).toEqual([2, 4, 5, 6, 7, 8]);
		expect(await ids({ "a.0.b": "x" })).toEqual([8]);
		expect(await ids({ "a.1.b": { $in: ["y", "z"] } })).toEqual([8]);
		expect(await ids({ "a.0": { $gt: "c1" } })).toEqual([2]);
		// A path through an array of sub-documents exists when one of them has it (MongoDB).
		expect(await ids({ "a.b": { $exists: true } })).toEqual([8]);
		expect(await ids({ "a.b": { $exists: false } })).toEqual([1, 2, 3, 4, 5, 6, 7]);
	});
});

describe("PgStore: parameterised SQL", () => {
	test("a value is a bind parameter, never SQL text; an injection attempt is matched literally", async () => {
		if (!up()) return;
		const evil = "x'); drop table pg_class; --";
		const p = new Params();
		const w = whereOf({ name: evil, "a.b": { $gt: evil }, tags: { $in: [evil] }, id: evil }, p);
		expect(w.exact).toBe(true);
		expect(w.sql).not.toContain("drop");
		expect(JSON.stringify(p.values)).toContain("drop table");
		await store.removeMany({});
		await store.insert({ id: hexId(1), name: evil, deleted_at: null });
		expect((await store.find({ query: { name: evil } })).map((d) => d.name)).toEqual([evil]);
		expect(await store.count({ name: { $in: [evil, "other"] } })).toBe(1);
	});

	test("the zone, soft-delete and group queries are exact SQL served by the indexes", async () => {
		if (!up()) return;
		const zone = { deleted_at: null, $or: [{ owner: "u1" }, { shares: "u1" }] };
		const group = { deleted_at: null, $or: [{ groups: { $in: ["g1.example", "g2.example"] }, "clients.0": "c1" }] };
		for (const q of [zone, group, { deleted_at: null, clients: "c1" }, { ref: "r", deleted_at: null }]) expect(whereOf(q, new Params()).exact).toBe(true);
		await store.removeMany({});
		const many = Array.from({ length: 3000 }, (_, i) => ({
			id: hexId(10_000 + i),
			owner: `u${i % 300}`,
			shares: i % 50 === 0 ? ["u1"] : [],
			clients: [`c${i % 3}`],
			deleted_at: null,
			created_at: new Date(1_700_000_000_000 + i).toISOString(),
		}));
		await store.insertMany(many);
		const db = await openRelational(cfg());
		try {
			await db.query(`analyze "docs/${store.name}"`);
			const p = new Params();
			const w = whereOf(zone, p);
			const { rows } = await db.query<{ "QUERY PLAN": string }>(`explain select doc from "docs/${store.name}" where ${w.sql} order by id limit 20`, p.values);
			const plan = rows.map((r) => r["QUERY PLAN"]).join("\n");
			expect(plan).toMatch(/Bitmap Index Scan on "?docs_[0-9a-f]{12}_doc/);
			expect(plan).not.toMatch(/Seq Scan/);
		} finally {
			await releaseRelational(cfg());
		}
		const expected = many
			.filter((d) => d.owner === "u1" || d.shares.includes("u1"))
			.map((d) => d.id)
			.sort();
		expect((await store.find({ query: zone, sort: { id: 1 }, limit: 100 })).map((d) => d.id)).toEqual(expected);
		// The common sort: newest first.
		const newest = await store.find({ query: { deleted_at: null }, sort: { created_at: -1 }, limit: 3 });
		expect(newest.map((d) => d.id)).toEqual(
			many
				.slice(-3)
				.reverse()
				.map((d) => d.id),
		);
	}, 60_000);

	test("rows up to 8 KB are stored uncompressed; the soft-deleted rows' index serves `deleted_at != null` and replaces the earlier one", async () => {
		if (!up()) return;
		await store.removeMany({});
		const live = Array.from({ length: 2000 }, (_, i) => ({
			id: hexId(20_000 + i),
			owner: "u1",
			content: "lorem ipsum ".repeat(120),
			deleted_at: i % 500 === 0 ? "2026-01-01T00:00:00.000Z" : null,
		}));
		const big = { id: hexId(30_000), content: "lorem ipsum ".repeat(2000), deleted_at: null };
		await store.insertMany([...live, big]);
		const db = await openRelational(cfg());
		const table = `"docs/${store.name}"`;
		try {
			const sizes = await db.query<{ id: string; doc: string | null }>(`select id, pg_column_compression(doc) as doc from ${table} where id = any($1::text[]) order by id`, [
				[live[1].id, big.id],
			]);
			// 1.4 KB of text that compresses well: kept as it is (PostgreSQL's default compresses rows above about 2 KB).
			expect(sizes.rows[0]).toEqual({ id: live[1].id, doc: null });
			// 24 KB: compressed as before.
			expect(sizes.rows[1].doc).not.toBeNull();
			await db.query(`analyze ${table}`);
			const p = new Params();
			const w = whereOf({ deleted_at: { $ne: null } }, p);
			const plan = (await db.query<{ "QUERY PLAN": string }>(`explain select id from ${table} where ${w.sql}`, p.values)).rows.map((r) => r["QUERY PLAN"]).join("\n");
			expect(plan).toMatch(/docs_[0-9a-f]{12}_deleted_v2/);
			expect((await store.find({ query: { deleted_at: { $ne: null } }, sort: { id: 1 } })).map((d) => d.id)).toEqual(live.filter((d) => d.deleted_at).map((d) => d.id));
			expect(await store.count({ deleted_at: null })).toBe(live.length - 4 + 1);
			const options = async () => (await db.query<{ o: string[] | null }>(`select reloptions as o from pg_class where oid = to_regclass($1)`, [table])).rows[0].o;
			expect(await options()).toEqual(["toast_tuple_target=8160"]);
			// A table made by an earlier version (its mark without this version's schema hash, the earlier form of the
			// index, default storage): a new connection drops that index and sets the storage.
			const short = (await import("crypto")).createHash("sha256").update(store.name).digest("hex").slice(0, 12);
			await db.query(`create index "docs_${short}_deleted" on ${table} (id) where (doc->'deleted_at') is not null`);
			await db.query(`alter table ${table} reset (toast_tuple_target)`);
			await db.query(`comment on table ${table} is 'platform-docs:v3'`);
			expect(await options()).toBeNull();
			const again = new PgStore(cfg(), store.name);
			await again.connect();
			await again.disconnect();
			const names = (await db.query<{ n: string }>(`select indexname as n from pg_indexes where tablename = $1 order by 1`, [`docs/${store.name}`])).rows.map((r) => r.n);
			expect(names).toContain(`docs_${short}_deleted_v2`);
			expect(names).not.toContain(`docs_${short}_deleted`);
			expect(await options()).toEqual(["toast_tuple_target=8160"]);
		} finally {
			await releaseRelational(cfg());
		}
	}, 60_000);

	test("a read returns the document written; a change sets its fields (key order is jsonb's, not the order written)", async () => {
		if (!up()) return;
		await store.removeMany({});
		const doc = { id: hexId(700), zeta: 1, alpha: { y: 1, b: 2 }, mid: "m", deleted_at: null };
		await store.insert({ ...doc });
		expect(await store.findOne({ id: doc.id })).toStrictEqual(doc);
		const after = await store.setOne(doc.id, { mid: "n", added: true, "alpha.a": 0 });
		expect(after).toStrictEqual({ id: doc.id, zeta: 1, alpha: { y: 1, b: 2, a: 0 }, mid: "n", deleted_at: null, added: true });
		const inPlace = await store.setOne(doc.id, { zeta: 2, more: [1, { z: null }] });
		expect(inPlace).toStrictEqual({ ...after, zeta: 2, more: [1, { z: null }] });
		expect(await store.findOne({ id: doc.id })).toStrictEqual(inPlace);
		expect((await store.findPage({ query: { id: doc.id }, limit: 1 })).docs).toStrictEqual([inPlace]);
	});

	test("statements are prepared once per connection, the first MAX_NAMED_STATEMENTS texts only: later texts run unnamed, with the same results", async () => {
		if (!up()) return;
		await store.removeMany({});
		const rows = Array.from({ length: 5 }, (_, i) => ({ id: hexId(800 + i), [`f${i}`]: i, deleted_at: null }));
		await store.insertMany(rows);
		// More distinct statement texts than get names (each field name makes a new text): all answer alike.
		for (let i = 0; i < MAX_NAMED_STATEMENTS + 20; i++) {
			const f = `f${i % 5}_${i}`;
			expect(await store.count({ [f]: { $exists: false } })).toBe(5);
		}
		for (let i = 0; i < 5; i++) expect((await store.find({ query: { [`f${i}`]: i } })).map((d) => d.id)).toEqual([rows[i].id]);
		// A named statement reused on the same connection (read by id) keeps answering after a change of the row.
		await store.setOne(rows[0].id, { f0: 10 });
		expect((await store.findOne({ id: rows[0].id }))?.f0).toBe(10);
	});

	test("text PostgreSQL cannot store (NUL, unpaired surrogates) is a 400 with a clear message", async () => {
		if (!up()) return;
		for (const bad of ["a\u0000b", "\ud800x"]) {
			const err = await store.insert({ id: hexId(900), name: bad, deleted_at: null }).then(
				() => null,
				(e) => e,
			);
			expect(err).toMatchObject({ code: 400, message: "text containing NUL characters or unpaired surrogates cannot be stored" });
		}
	});
});
