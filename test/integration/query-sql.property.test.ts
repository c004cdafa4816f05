/**
 * The query language in memory (lib/query.ts) and its SQL translation (stores/pg.query.ts) agree: on random
 * documents and random filters, the ids PostgreSQL selects with the translated condition are the ids `matches` accepts
 * where the translation says it is exact, and a superset of them where it says it is not (the store then decides in
 * JavaScript). Runs on the local server's `test` database in a schema of its own, created and dropped here; skipped
 * with a message when PostgreSQL does not answer (a failure with REQUIRE_SERVERS=1). No platform is started.
 */
import { randomBytes } from "crypto";
import fc from "fast-check";
import { Client } from "pg";
import { matches, type Filter } from "../../lib/query";
import { compileSafe, RegexBudget } from "../../lib/safe-regex";
import { bind, Params, whereOf } from "../../stores/pg.query";
import { needServers } from "../helpers/platform";
import { PG_BASE } from "../helpers/pg";

const servers = needServers(["PostgreSQL", 5432]);
const schema = `qprop_${randomBytes(5).toString("hex")}`;
const table = `${schema}.docs`;
let client: Client;

beforeAll(async () => {
	if (!servers.up) return;
	client = new Client({ connectionString: `${PG_BASE}/test` });
	await client.connect();
	await client.query(`create schema ${schema}`);
	// The store's own shape of a row: the id (byte order, as PgStore's) and the document as jsonb.
	await client.query(`create table ${table} (id text collate "C" primary key, doc jsonb not null)`);
});
afterAll(async () => {
	if (!client) return;
	await client.query(`drop schema if exists ${schema} cascade`);
	await client.end();
});

// Strings that order differently by UTF-16 unit and by code point (U+E000 below an astral character by code point).
const STRINGS = ["a", "b", "A", "", "ab", "é", "\ue000", "😀", "x y"];
const scalar = fc.oneof(fc.constantFrom<unknown>(0, 1, 2, -1, 2.5, true, false, null), fc.constantFrom(...STRINGS));
const KEYS = ["v", "w", "0"];

/** A JSON value up to `depth` levels of arrays and sub-documents. */
const valueOf = (depth: number): fc.Arbitrary<unknown> =>
	depth === 0
		? scalar
		: fc.oneof(
				{ weight: 3, arbitrary: scalar },
				{ weight: 2, arbitrary: fc.array(valueOf(depth - 1), { maxLength: 3 }) },
				{ weight: 2, arbitrary: fc.dictionary(fc.constantFrom(...KEYS), valueOf(depth - 1), { maxKeys: 3 }) },
			);

const docBody = fc.record({ a: valueOf(3), b: valueOf(2), c: valueOf(1), n: fc.oneof(fc.integer({ min: -3, max: 3 }), fc.constant(null)) }, { requiredKeys: [] });
/** Ids by index: plain, in the private-use area, astral (their order differs between UTF-16 and code points). */
const idOf = (i: number) => [`k${i}`, `\ue000${i}`, `😀${i}`][i % 3];

const FIELDS = ["a", "b", "c", "n", "a.v", "a.w", "b.v", "a.v.w", "a.0", "b.1", "a.0.v", "a.v.0", "missing", "missing.v"];
const field = fc.constantFrom(...FIELDS);
const PATTERNS = ["^a", "b$", "^$", "[A-Z]", "é", "a|b", "^\\d", "x\\sy", "\\bx"];
const pattern = fc.tuple(fc.constantFrom(...PATTERNS), fc.constantFrom("", "i")).map(([src, flags]) => compileSafe("$regex", "q", src, flags, new RegexBudget()));
const cmpOp = fc.constantFrom("$gt", "$gte", "$lt", "$lte");

/** Operators that test one element under `$elemMatch` (some of them the SQL's exact forms). */
const elementOps: fc.Arbitrary<Filter> = fc.oneof(
	fc.record({ op: cmpOp, v: scalar }).map(({ op, v }) => ({ [op]: v })),
	fc.tuple(cmpOp, scalar, cmpOp, scalar).map(([o1, v1, o2, v2]) => ({ [o1]: v1, [o2]: v2 })),
	fc.array(scalar, { maxLength: 3 }).map((vs) => ({ $in: vs })),
	pattern.map((re) => ({ $regex: re })),
	fc.tuple(pattern, scalar).map(([re, v]) => ({ $regex: re, $gte: v })),
	scalar.map((v) => ({ $ne: v })),
);

const leaf = (f: fc.Arbitrary<string>, sub: fc.Arbitrary<Filter> | undefined): fc.Arbitrary<Filter> =>
	fc.oneof(
		fc.tuple(f, scalar).map(([k, v]) => ({ [k]: v })),
		fc.tuple(f, valueOf(2)).map(([k, v]) => ({ [k]: v })),
		fc.tuple(f, scalar).map(([k, v]) => ({ [k]: { $ne: v } })),
		fc.tuple(f, fc.array(scalar, { maxLength: 3 })).map(([k, v]) => ({ [k]: { $in: v } })),
		fc.tuple(f, fc.array(scalar, { maxLength: 3 })).map(([k, v]) => ({ [k]: { $nin: v } })),
		fc.tuple(f, cmpOp, scalar).map(([k, op, v]) => ({ [k]: { [op]: v } })),
		fc.tuple(f, cmpOp, scalar, cmpOp, scalar).map(([k, o1, v1, o2, v2]) => ({ [k]: { [o1]: v1, [o2]: v2 } })),
		fc.tuple(f, fc.boolean()).map(([k, v]) => ({ [k]: { $exists: v } })),
		fc.tuple(f, fc.integer({ min: 0, max: 3 })).map(([k, v]) => ({ [k]: { $size: v } })),
		fc.tuple(f, cmpOp, scalar).map(([k, op, v]) => ({ [k]: { $not: { [op]: v } } })),
		fc.tuple(f, pattern).map(([k, re]) => ({ [k]: { $regex: re } })),
		fc.tuple(f, pattern).map(([k, re]) => ({ [k]: re })),
		fc.tuple(f, pattern).map(([k, re]) => ({ [k]: { $not: re } })),
		fc.tuple(f, elementOps).map(([k, ops]) => ({ [k]: { $elemMatch: ops } })),
		...(sub ? [fc.tuple(f, sub).map(([k, q]) => ({ [k]: { $elemMatch: q } }))] : []),
		fc.tuple(fc.constantFrom("$gt", "$lt", "$gte"), fc.constantFrom("k1", "\ue000", "😀", "z", "")).map(([op, v]) => ({ id: { [op]: v } })),
		fc.constantFrom(...["k1", "k4", "\ue0002", "😀5", "nope"]).map((v) => ({ id: v })),
	);

/** A sub-query inside `$elemMatch`: its fields are the element's. */
const subQuery = leaf(fc.constantFrom("v", "w", "v.w", "0", "missing"), undefined);

const filter: fc.Arbitrary<Filter> = fc.letrec<{ node: Filter }>((tie) => ({
	node: fc.oneof(
		{ depthSize: "small", withCrossShrink: true },
		leaf(field, subQuery),
		fc.array(tie("node"), { minLength: 1, maxLength: 3 }).map((xs) => ({ $or: xs })),
		fc.array(tie("node"), { minLength: 1, maxLength: 3 }).map((xs) => ({ $and: xs })),
		tie("node").map((x) => ({ $not: x })),
		fc.tuple(leaf(field, subQuery), leaf(field, subQuery)).map(([x, y]) => ({ ...x, ...y })),
	),
})).node;

async function selected(q: Filter): Promise<{ ids: string[]; exact: boolean }> {
	const p = new Params();
	const w = whereOf(q, p);
	const [text, values] = bind(`select id from ${table} where ${w.sql} order by id`, p);
	return { ids: (await client.query(text, values)).rows.map((r) => r.id as string), exact: w.exact };
}

/** Shown on a failure: RegExp values as their source and flags. */
const shown = (q: unknown) => JSON.stringify(q, (_k, v) => (v instanceof RegExp ? `/${v.source}/${v.flags}` : v));

servers.describe("the query language and its SQL translation", () => {
	test("exact translations select what `matches` accepts; inexact ones a superset of it", async () => {
		let exact = 0;
		let inexact = 0;
		await fc.assert(
			fc.asyncProperty(fc.array(docBody, { minLength: 1, maxLength: 12 }), fc.array(filter, { minLength: 1, maxLength: 15 }), async (bodies, filters) => {
				const docs = bodies.map((b, i) => ({ id: idOf(i), ...b }));
				await client.query(`truncate ${table}`);
				await client.query(`insert into ${table} (id, doc) select x->>'id', x from jsonb_array_elements($1::jsonb) x`, [JSON.stringify(docs)]);
				for (const q of filters) {
					const expected = docs
						.filter((d) => matches(d, q))
						.map((d) => d.id)
						.sort((x, y) => Buffer.compare(Buffer.from(x), Buffer.from(y)));
					const got = await selected(q);
					if (got.exact) {
						exact++;
						expect({ q: shown(q), docs: JSON.stringify(docs), ids: got.ids }).toEqual({ q: shown(q), docs: JSON.stringify(docs), ids: expected });
					} else {
						inexact++;
						const missing = expected.filter((id) => !got.ids.includes(id));
						expect({ q: shown(q), docs: JSON.stringify(docs), missing }).toEqual({ q: shown(q), docs: JSON.stringify(docs), missing: [] });
					}
				}
			}),
			{ numRuns: Number(process.env.QUERY_PROPERTY_RUNS ?? 100) },
		);
		// Both sides are exercised: a good share of the filters is translated exactly, some are left to JavaScript.
		expect(exact).toBeGreaterThan((exact + inexact) / 4);
		expect(inexact).toBeGreaterThan(0);
	}, 120_000);

	test("the forms the platform itself writes are translated exactly", async () => {
		const forms: Filter[] = [
			{ deleted_at: null },
			{ owner: "u1", deleted_at: null },
			{ $or: [{ owner: "u1" }, { shares: "u1" }], deleted_at: null },
			{ groups: { $in: ["g1", "g2"] }, "clients.0": "c1" },
			{ ref: "r1" },
			{ id: { $in: ["a", "b"] } },
			{ seq: { $gt: 5 } },
			{ created_at: { $gte: "2026-01-01", $lt: "2027-01-01" } },
			{ tags: { $nin: ["secret"] } },
			{ tags: { $exists: true } },
			{ "props.n": 3 },
			{ "lines.sku": null },
		];
		for (const q of forms) expect({ q, exact: (await selected(q)).exact }).toEqual({ q, exact: true });
	});
});
