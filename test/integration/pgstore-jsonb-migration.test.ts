/**
 * Each document stored once (issue 34 item 3): a collection's table of the earlier form, `(id, body json, doc jsonb
 * generated from body, owner generated from body)`, becomes `(id, doc jsonb, owner)` when a store of this version
 * connects to it (stores/pg.store.ts `storeOnce`), and documents that hold their id as `_id` (every earlier version)
 * hold it as `id` (`idOnce`), in a table of either form:
 * - every document reads back equal (nested objects, arrays, unicode, numbers such as 1e21 and 0.1, soft-deleted ones);
 * - queries by zone, owner and `created_at` select what the same SQL selected on the table before;
 * - the table has no `body` any more, one `doc jsonb`, its `owner` column and every index of the store; writes go on;
 * - a second start on the migrated table changes nothing (no rewrite, no row written: the table's comment says so);
 * - a backup taken of a table of an earlier form (rows `{id, body}`, or `{id, doc}` whose documents hold `_id`)
 *   restores into today's form (data-backup.ts).
 */
import { createReadStream, createWriteStream, mkdirSync } from "fs";
import path from "path";
import { once } from "events";
import { createHash } from "crypto";
import { PgStore, type Keyset, type StoredDoc } from "../../stores";
import { bind, orderOf, Params, whereOf } from "../../stores/pg.query";
import { openRelational, releaseRelational, type Relational } from "../../runtime/relational";
import { readConfig } from "../../runtime/config";
import { restoreBackup, writeBackup } from "../../data-backup";
import { hexId, unique } from "../helpers/samples";
import { storeDatabase, testDatabase } from "../helpers/pg";

jest.setTimeout(120_000);

const { dir, up, url, cfg } = storeDatabase("pgstore-jsonb-");

/** The table exactly as the earlier version made it, and the indexes it had on `doc` and `owner` (some of them). */
async function earlierForm(db: Relational, name: string): Promise<string> {
	const table = `"docs/${name}"`;
	const short = createHash("sha256").update(name).digest("hex").slice(0, 12);
	await db.query(
		`create table ${table} (id text collate "C" primary key, body json not null, doc jsonb generated always as (body::jsonb) stored, ` +
			`owner text generated always as (case json_typeof(body->'owner') when 'string' then body->>'owner' end) stored) with (toast_tuple_target = 8160)`,
	);
	await db.query(`create index "docs_${short}_doc" on ${table} using gin (doc jsonb_path_ops) with (fastupdate = off)`);
	await db.query(`create unique index "docs_${short}_tref" on ${table} ((doc->'tenant_ref')) where doc ? 'tenant_ref'`);
	await db.query(`create index "docs_${short}_owner_id" on ${table} (owner, id) where owner is not null and (doc->'deleted_at' is null or doc->'deleted_at' = 'null')`);
	return table;
}

/** A document as the earlier versions stored it: its id as `_id`. */
type EarlierDoc = Record<string, unknown> & { _id: string };

/** Documents of every shape a JSON text can hold, as JSON.stringify writes them (what the earlier version stored). */
function documents(): EarlierDoc[] {
	const owners: unknown[] = ["u1", "u2", "u3", ["u1", "u2"], 7, null, undefined, "U1", "ü-ñ 用户"];
	const created: unknown[] = ["2025-01-01T00:00:00.000Z", "2025-06-01T00:00:00.000Z", "2026-01-01T00:00:00.000Z", null, undefined, 5];
	const numbers = [1e21, 0.1, 0.30000000000000004, -12.5, 2 ** 53 + 2, 1.7976931348623157e308, 5e-324, 1e-7, 123456789.12345679, 0];
	const out: EarlierDoc[] = [];
	for (let i = 0; i < 120; i++) {
		const d: EarlierDoc = { _id: hexId(i * 7919), zeta: i, title: `note ${i}` };
		const owner = owners[i % owners.length];
		if (owner !== undefined) d.owner = owner;
		const at = created[i % created.length];
		if (at !== undefined) d.created_at = at;
		d.deleted_at = i % 7 === 3 ? "2026-02-01T00:00:00.000Z" : null;
		d.shares = i % 3 === 0 ? ["u1"] : i % 3 === 1 ? [] : ["u2", "u3"];
		d.n = numbers[i % numbers.length];
		d.nested = { b: { deep: [1, "two", { three: 3, list: [[], {}, [null, true, false]] }] }, a: i % 2 === 0 };
		d.text = ["plain", "é à ü ß", "日本語テキスト", "emoji 😀👍🏽", "quotes \" ' \\ and\nnew\tlines", "\u2028\u2029 separators", "<b>&amp;</b>"][i % 7];
		d[`key ${["é", "😀", "z", "a", "$x", ""][i % 6]}`] = i;
		if (i % 11 === 0) d.ref = `ref-${i}`;
		if (i % 11 === 0) d.tenant_ref = `c1:ref-${i}`;
		out.push(d);
	}
	// Soft-deleted, owned by u1, newest: the zones must leave it out.
	out.push({ _id: hexId(999_001), owner: "u1", created_at: "2030-01-01T00:00:00.000Z", deleted_at: "2030-01-02T00:00:00.000Z", n: 1e21, shares: ["u1"] });
	return out;
}

/** The zone, owner, id and `created_at` queries (as the store takes them) and sorts read before and after. */
const QUERIES: Array<{ query: Record<string, unknown>; sort: Record<string, 1 | -1> }> = [
	{ query: { deleted_at: null, owner: "u1" }, sort: { created_at: -1 } },
	{ query: { deleted_at: null, $or: [{ owner: "u1" }, { shares: "u1" }] }, sort: { created_at: -1 } },
	{ query: { deleted_at: null, $or: [{ owner: "u2" }, { shares: "u2" }] }, sort: { id: 1 } },
	{ query: { owner: "ü-ñ 用户" }, sort: { id: -1 } },
	{ query: { created_at: { $gte: "2025-06-01T00:00:00.000Z" } }, sort: { created_at: 1 } },
	{ query: { created_at: null }, sort: { id: 1 } },
	{ query: { deleted_at: { $ne: null } }, sort: { id: 1 } },
	{ query: { n: 1e21 }, sort: { id: 1 } },
	{ query: { n: { $lt: 0.2 } }, sort: { n: 1 } },
	{ query: { "nested.a": true, text: "emoji 😀👍🏽" }, sort: { id: 1 } },
	{ query: { tenant_ref: "c1:ref-22" }, sort: { id: 1 } },
	{ query: { id: { $lt: "0004" } }, sort: { id: -1 } },
	{ query: { id: { $gt: "0008" }, deleted_at: null, owner: { $in: ["u1", "u2"] } }, sort: { id: 1 } },
];

/** Ids and total of each query, by the SQL the store translates it to, read on the table as it is. */
async function bySql(db: Relational, table: string): Promise<Array<{ ids: string[]; total: number }>> {
	const out = [];
	for (const { query, sort } of QUERIES) {
		const p = new Params();
		const w = whereOf(query, p);
		expect(w.exact).toBe(true);
		const { rows } = await db.query<{ id: string }>(...bind(`select id from ${table} where ${w.sql} order by ${orderOf(sort)}`, p));
		out.push({ ids: rows.map((r) => r.id), total: rows.length });
	}
	return out;
}

const columnsOf = async (db: Relational, table: string) =>
	(
		await db.query<{ name: string; type: string; generated: string }>(
			`select attname::text as name, format_type(atttypid, atttypmod) as type, attgenerated::text as generated from pg_attribute ` +
				`where attrelid = to_regclass($1) and attnum > 0 and not attisdropped order by attnum`,
			[table],
		)
	).rows;

const filenode = async (db: Relational, table: string) => (await db.query<{ f: string }>(`select pg_relation_filenode(to_regclass($1))::text as f`, [table])).rows[0].f;

/** The documents as a JSON round trip gives them (what any store can return: no `undefined`), their id as `id`. */
const asJson = (docs: EarlierDoc[]): StoredDoc[] =>
	(JSON.parse(JSON.stringify(docs)) as EarlierDoc[]).map(({ _id, ...rest }) => ({ ...rest, id: _id })).sort((a, b) => (a.id < b.id ? -1 : 1));

/** Each row's transaction id (xmin) in id order: unchanged when no statement wrote the table. */
const xmins = async (db: Relational, table: string) => (await db.query<{ x: string }>(`select string_agg(xmin::text, ',' order by id) as x from ${table}`)).rows[0].x;

/** What the table's rows hold: documents still holding `_id`, and documents whose `id` is not their row's. */
const leftovers = async (db: Relational, table: string) =>
	(
		await db.query<{ legacy: number; astray: number }>(
			`select count(*) filter (where doc ? '_id')::int as legacy, count(*) filter (where doc->>'id' is distinct from id)::int as astray from ${table}`,
		)
	).rows[0];

const markOf = async (db: Relational, table: string) => (await db.query<{ c: string | null }>(`select obj_description(to_regclass($1), 'pg_class') as c`, [table])).rows[0].c;

/** The table as the version before this one made it: today's columns and indexes, no mark, documents holding `_id`. */
async function previousForm(db: Relational, name: string, docs: EarlierDoc[]): Promise<string> {
	const table = `"docs/${name}"`;
	const store = new PgStore(cfg(), name);
	await store.connect();
	await store.disconnect();
	await db.query(`comment on table ${table} is null`);
	await db.query(`insert into ${table} (id, doc) select x->>'_id', x from jsonb_array_elements($1::jsonb) x`, [JSON.stringify(docs)]);
	return table;
}

const indexesOf = async (db: Relational, name: string) => {
	const short = createHash("sha256").update(name).digest("hex").slice(0, 12);
	const indexes = (await db.query<{ n: string }>(`select indexname as n from pg_indexes where tablename = $1`, [`docs/${name}`])).rows.map((r) => r.n).sort();
	expect(indexes).toEqual(
		["created_at", "deleted_v2", "doc", "owner_array", "owner_created", "owner_id", "tref"]
			.map((s) => `docs_${short}_${s}`)
			.concat(`docs/${name}_pkey`)
			.sort(),
	);
};

/** What a restore made: its summary, the target's config and a connection to it, the table's store and documents. */
interface Restored {
	restored: Awaited<ReturnType<typeof restoreBackup>>;
	dst: Parameters<typeof restoreBackup>[0];
	tdb: Relational;
	name: string;
	docs: EarlierDoc[];
}

/**
 * A table `make` fills with documents(), in the test's database, backed up (data-backup.ts) and restored into a new
 * database, every row counted on both sides; `check` then reads the target.
 */
async function throughBackup(tag: string, make: (db: Relational, name: string, docs: EarlierDoc[]) => Promise<unknown>, check: (r: Restored) => Promise<void>): Promise<void> {
	const target = await testDatabase();
	const name = `${tag}_${unique()}`;
	const src = { ...readConfig(), s3: undefined, dataDir: path.join(dir, `backup-source-${tag}`), databaseUrl: url() };
	const dst = { ...readConfig(), s3: undefined, dataDir: path.join(dir, `backup-target-${tag}`), databaseUrl: target!.url };
	mkdirSync(src.dataDir, { recursive: true });
	const file = path.join(dir, `${tag}.backup`);
	const docs = documents();
	try {
		const db = await openRelational(src);
		try {
			await make(db, name, docs);
		} finally {
			await releaseRelational(src);
		}
		const out = createWriteStream(file);
		const written = await writeBackup(src, out);
		if (!out.closed) await once(out, "close");
		expect(written.tables[`docs/${name}`]).toBe(docs.length);
		const restored = await restoreBackup(dst, createReadStream(file));
		expect(restored.tables[`docs/${name}`]).toBe(docs.length);
		const tdb = await openRelational(dst);
		await check({ restored, dst, tdb, name, docs });
	} finally {
		await releaseRelational(dst).catch(() => undefined);
		await target?.drop();
	}
}

describe("documents stored once as jsonb (PostgreSQL)", () => {
	test("a table of the earlier form becomes (id, doc jsonb, owner) on start, every document kept, queries as before; once", async () => {
		if (!up()) return;
		const name = `jsonb_${unique()}`;
		const db = await openRelational(cfg());
		try {
			const table = await earlierForm(db, name);
			const docs = documents();
			await db.query(`insert into ${table} (id, body) select x->>'_id', x from json_array_elements($1::json) x`, [JSON.stringify(docs)]);
			const before = await bySql(db, table);
			// The queries select something (else equal results would prove little).
			expect(before.filter((r) => r.total > 0)).toHaveLength(QUERIES.length);
			const nodeBefore = await filenode(db, table);

			const store = new PgStore(cfg(), name);
			await store.connect();
			const nodeAfter = await filenode(db, table);
			await store.disconnect();
			const rowsAfter = await xmins(db, table);
			const again = new PgStore(cfg(), name);
			await again.connect();
			try {
				expect(nodeAfter).not.toBe(nodeBefore);
				// The second start: no rewrite, no row written, the same columns.
				expect(await filenode(db, table)).toBe(nodeAfter);
				expect(await xmins(db, table)).toBe(rowsAfter);
				expect(await markOf(db, table)).toMatch(/^platform-docs:v3 schema:[0-9a-f]{16}$/);
				expect(await leftovers(db, table)).toEqual({ legacy: 0, astray: 0 });
				expect(await columnsOf(db, table)).toEqual([
					{ name: "id", type: "text", generated: "" },
					{ name: "doc", type: "jsonb", generated: "" },
					{ name: "owner", type: "text", generated: "s" },
				]);
				await indexesOf(db, name);

				// Every document as written, as a document (jsonb's key order).
				const all = await again.find({ query: {}, sort: { id: 1 } });
				expect(all).toStrictEqual(asJson(docs));
				for (const d of docs.slice(0, 12)) expect(await again.findOne({ id: d._id })).toStrictEqual(asJson([d])[0]);
				expect((await again.find({ query: { n: 1e21 } })).map((d) => d.n)).toEqual(docs.filter((d) => d.n === 1e21).map(() => 1e21));

				// The same SQL selects the same rows, and the store's reads (the owner zone's split statements among them) too.
				expect(await bySql(db, table)).toEqual(before);
				for (const [i, { query, sort }] of QUERIES.entries()) {
					const page = await again.findPage({ query, sort, skip: 0, limit: 1000 });
					expect({ i, ids: page.docs.map((d) => d.id), total: page.total }).toEqual({ i, ...before[i] });
					expect(await again.count(query)).toBe(before[i].total);
				}
				// The owner column as the document says.
				const wrong = await db.query(`select id from ${table} where owner is distinct from (case jsonb_typeof(doc->'owner') when 'string' then doc->>'owner' end)`);
				expect(wrong.rows).toEqual([]);
				expect((await db.query(`select count(*)::int as n from ${table} where owner is not null`)).rows[0].n).toBe(docs.filter((d) => typeof d.owner === "string").length);

				// Writes go on: a create, a set of top-level fields, an update read and written back, a clash on tenant_ref.
				const fresh = { id: hexId(999_002), owner: "u1", created_at: "2031-01-01T00:00:00.000Z", deleted_at: null, n: 0.1, text: "日本語" };
				await again.insert({ ...fresh });
				expect(await again.findOne({ id: fresh.id })).toStrictEqual(fresh);
				const set = await again.setOne(docs[1]._id, { owner: "u1", created_at: "2032-01-01T00:00:00.000Z", nested: { x: [1e21] } });
				expect(set).toStrictEqual({ ...asJson([docs[1]])[0], owner: "u1", created_at: "2032-01-01T00:00:00.000Z", nested: { x: [1e21] } });
				expect(await again.updateIf({ id: docs[2]._id }, { $inc: { zeta: 10 }, $unset: { text: true } })).toStrictEqual(
					(({ text: _t, ...rest }) => ({ ...rest, zeta: 12 }))(asJson([docs[2]])[0]),
				);
				await expect(again.insert({ id: hexId(999_003), tenant_ref: "c1:ref-22" })).rejects.toThrow();
				const top = await again.findPage({ query: QUERIES[0].query, sort: { created_at: -1 }, skip: 0, limit: 2 });
				expect(top.docs.map((d) => d.id)).toEqual([docs[1]._id, fresh.id]);
				expect(top.total).toBe(before[0].total + 2);
			} finally {
				await again.disconnect();
			}
		} finally {
			await releaseRelational(cfg());
		}
	});

	test("a table of the previous version (documents holding `_id`) holds them with `id` after a start, queries as before; once", async () => {
		if (!up()) return;
		const name = `idkey_${unique()}`;
		const db = await openRelational(cfg());
		try {
			const docs = documents();
			const table = await previousForm(db, name, docs);
			expect(await markOf(db, table)).toBeNull();
			expect((await leftovers(db, table)).legacy).toBe(docs.length);
			const before = await bySql(db, table);
			expect(before.filter((r) => r.total > 0)).toHaveLength(QUERIES.length);

			const store = new PgStore(cfg(), name);
			await store.connect();
			await store.disconnect();
			expect(await markOf(db, table)).toMatch(/^platform-docs:v3 schema:[0-9a-f]{16}$/);
			expect(await leftovers(db, table)).toEqual({ legacy: 0, astray: 0 });
			const rowsAfter = await xmins(db, table);
			const again = new PgStore(cfg(), name);
			await again.connect();
			try {
				// The second start writes no row.
				expect(await xmins(db, table)).toBe(rowsAfter);
				await indexesOf(db, name);
				expect(await again.find({ query: {}, sort: { id: 1 } })).toStrictEqual(asJson(docs));
				for (const d of docs.slice(0, 12)) expect(await again.findOne({ id: d._id })).toStrictEqual(asJson([d])[0]);
				expect(await bySql(db, table)).toEqual(before);
				for (const [i, { query, sort }] of QUERIES.entries()) {
					const page = await again.findPage({ query, sort, skip: 0, limit: 1000 });
					expect({ i, ids: page.docs.map((d) => d.id), total: page.total }).toEqual({ i, ...before[i] });
					expect(await again.count(query)).toBe(before[i].total);
					const kept: string[] = [];
					for (let after: Keyset | undefined, n = 0; n < 100; n++) {
						const pg = await again.findAfter({ query, sort, limit: 7, after });
						kept.push(...pg.docs.map((d) => d.id));
						if (!pg.next || pg.docs.length < 7) break;
						after = pg.next;
					}
					expect({ i, ids: kept }).toEqual({ i, ids: before[i].ids });
				}
				// Writes go on, and a document's `_id` is no key of the store any more.
				const set = await again.setOne(docs[1]._id, { title: "renamed" });
				expect(set).toStrictEqual({ ...asJson([docs[1]])[0], title: "renamed" });
				expect(await leftovers(db, table)).toEqual({ legacy: 0, astray: 0 });
			} finally {
				await again.disconnect();
			}
		} finally {
			await releaseRelational(cfg());
		}
	});

	test("a backup of a table of the previous version (documents holding `_id`) restores with `id`", async () => {
		if (!up()) return;
		await throughBackup(
			"idkey",
			(db, name, docs) => previousForm(db, name, docs),
			async ({ dst, name, docs, tdb }) => {
				expect(await markOf(tdb, `"docs/${name}"`)).toMatch(/^platform-docs:v3 schema:[0-9a-f]{16}$/);
				expect(await leftovers(tdb, `"docs/${name}"`)).toEqual({ legacy: 0, astray: 0 });
				const store = new PgStore(dst, name);
				await store.connect();
				try {
					expect(await store.find({ query: {}, sort: { id: 1 } })).toStrictEqual(asJson(docs));
					expect(await store.count({ deleted_at: null, owner: "u1" })).toBe(
						docs.filter((d) => !d.deleted_at && (d.owner === "u1" || (Array.isArray(d.owner) && d.owner.includes("u1")))).length,
					);
				} finally {
					await store.disconnect();
				}
			},
		);
	});

	test("a backup of a table of the earlier form restores into today's form, every document kept", async () => {
		if (!up()) return;
		await throughBackup(
			"jsonb",
			async (db, name, docs) => {
				const table = await earlierForm(db, name);
				await db.query(`insert into ${table} (id, body) select x->>'_id', x from json_array_elements($1::json) x`, [JSON.stringify(docs)]);
			},
			async ({ restored, dst, name, docs, tdb }) => {
				expect(restored.header.tables.find((t) => t.name === `docs/${name}`)?.columns).toEqual(["id", "body"]);
				expect(await leftovers(tdb, `"docs/${name}"`)).toEqual({ legacy: 0, astray: 0 });
				const store = new PgStore(dst, name);
				await store.connect();
				try {
					expect(await store.find({ query: {}, sort: { id: 1 } })).toStrictEqual(asJson(docs));
					expect((await columnsOf(tdb, `"docs/${name}"`)).map((c) => `${c.name} ${c.type}`)).toEqual(["id text", "doc jsonb", "owner text"]);
					expect(await store.count({ deleted_at: null, $or: [{ owner: "u1" }, { shares: "u1" }] })).toBe(
						docs.filter((d) => !d.deleted_at && (d.owner === "u1" || (Array.isArray(d.owner) && d.owner.includes("u1")) || (d.shares as string[]).includes("u1"))).length,
					);
				} finally {
					await store.disconnect();
				}
			},
		);
	});
});
