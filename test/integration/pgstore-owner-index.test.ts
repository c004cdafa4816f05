/**
 * The owner zone's index on PostgreSQL (issue 22 item 4): the stored `owner` column and the partial b-trees of the live
 * rows serve the caller's list (page in index order, exact total counted from the index), with exactly the results of
 * the one-condition statement (`ownerSplit` in stores/pg.query.ts):
 * - randomized documents (owners as strings, arrays, numbers, missing; shares; every form of deleted; ties and missing
 *   `created_at`) and zone filters: pages, totals, cursor walks and counts equal those of the same filter read whole;
 * - the plan: the owned half's page is an index scan in sort order (no Sort node above it), its total an index-only scan;
 * - a table made before the column gets it (and its indexes) on start, with the data, once.
 */
import { Client } from "pg";
import { PgStore, type StoredDoc } from "../../stores";
import { ownerSplit, Params } from "../../stores/pg.query";
import { openRelational, releaseRelational } from "../../runtime/relational";
import { hexId, unique } from "../helpers/samples";
import { storeDatabase } from "../helpers/pg";

jest.setTimeout(120_000);

const { up, cfg } = storeDatabase("pgstore-owner-");

function rng(seed: number) {
	let s = seed >>> 0;
	return () => (s = (s * 1664525 + 1013904223) >>> 0) / 2 ** 32;
}

const USERS = ["u0", "u1", "u2", "u3", "u4"];

function randomDocs(n: number): StoredDoc[] {
	const r = rng(2026);
	const pick = <T>(xs: T[]) => xs[Math.floor(r() * xs.length)];
	const OWNERS: unknown[] = [...USERS, ...USERS, ...USERS, ["u1", "u2"], ["u3"], 7, { id: "u1" }, null, undefined, "U1", "u1 "];
	const DELETED: unknown[] = [null, null, null, null, undefined, "2026-01-01T00:00:00.000Z", [null], ["x"], 0];
	// Few distinct values: many ties, which the `id` breaks.
	const CREATED: unknown[] = ["2025-01-01T00:00:00.000Z", "2025-01-01T00:00:00.001Z", "2025-06-01T00:00:00.000Z", "2026-01-01T00:00:00.000Z", null, undefined, 5];
	return Array.from({ length: n }, (_, i) => {
		const d: StoredDoc = { id: hexId(i * 7919) };
		for (const [k, v] of [
			["owner", pick(OWNERS)],
			["deleted_at", pick(DELETED)],
			["created_at", pick(CREATED)],
			["shares", r() < 0.7 ? USERS.filter(() => r() < 0.2) : r() < 0.5 ? pick(USERS) : undefined],
			["groups", r() < 0.5 ? [pick(["g1", "g2"])] : []],
			["clients", [pick(["c0", "c1"]), "cx"]],
			["n", Math.floor(r() * 10)],
		] as Array<[string, unknown]>)
			if (v !== undefined) d[k] = v;
		return d;
	});
}

/** The zone filters as the authority layer writes them (soft delete, zones, a grant's rows, the caller's query). */
function zoneQueries(x: string): Record<string, unknown>[] {
	const share = { $or: [{ owner: x }, { shares: x }] };
	const all = { $or: [{ owner: x }, { shares: x }, { groups: { $in: ["g1"] }, "clients.0": "c0" }, { clients: "c1" }] };
	return [
		{ deleted_at: null, owner: x },
		{ deleted_at: null, ...share },
		{ deleted_at: null, ...all },
		{ deleted_at: null, ...share, $and: [{ n: { $gt: 3 } }] },
		{ deleted_at: null, owner: x, $and: [{ owner: x }, { n: { $in: [1, 2, 3, 8] } }] },
		{ $and: [{ deleted_at: null }, share, { groups: "g2" }] },
	];
}

const SORTS: Array<Record<string, 1 | -1> | undefined> = [{ created_at: -1 }, { created_at: 1 }, { id: 1 }, { id: -1 }, { id: -1 }, { n: 1 }, { created_at: -1, n: 1 }, undefined];
const WINDOWS = [
	{ skip: 0, limit: 20 },
	{ skip: 5, limit: 7 },
	{ skip: 13, limit: 3 },
	{ skip: 0, limit: 1000 },
	{ skip: 200, limit: 10 },
];

/** The same filter read as one condition (an `$or` of one branch: ownerSplit finds no top-level zone in it). */
const whole = (q: Record<string, unknown>) => ({ $or: [q] });
const ids = (docs: StoredDoc[]) => docs.map((d) => d.id);

describe("the owner zone's index (PostgreSQL)", () => {
	test("pages, totals, cursor walks and counts equal those of the filter read whole, on randomized documents", async () => {
		if (!up()) return;
		const store = new PgStore(cfg(), `owner_${unique()}`);
		await store.connect();
		try {
			const docs = randomDocs(400);
			await store.insertMany(docs);
			let cases = 0;
			for (const x of [...USERS, "nobody", "u1 "])
				for (const q of zoneQueries(x)) {
					expect(ownerSplit(q, new Params())).toBeDefined();
					expect(ownerSplit(whole(q), new Params())).toBeUndefined();
					expect(await store.count(q)).toBe(await store.count(whole(q)));
					for (const sort of SORTS) {
						for (const w of WINDOWS) {
							const o = { sort, ...w };
							const [got, want] = [await store.findPage({ query: q, ...o }), await store.findPage({ query: whole(q), ...o })];
							expect({ q, o, ids: ids(got.docs), total: got.total }).toEqual({ q, o, ids: ids(want.docs), total: want.total });
							expect(ids(await store.find({ query: q, ...o }))).toEqual(ids(want.docs));
							cases++;
						}
						// A cursor's walk, 7 at a time, from keyset to keyset.
						const walk = async (query: Record<string, unknown>) => {
							const out: string[] = [];
							for (let after: Awaited<ReturnType<PgStore["findAfter"]>>["next"], n = 0; n < 100; n++) {
								const page = await store.findAfter({ query, sort, limit: 7, after });
								out.push(...ids(page.docs));
								if (!page.next || page.docs.length < 7) break;
								after = page.next;
							}
							return out;
						};
						const walked = await walk(q);
						expect(walked).toEqual(await walk(whole(q)));
						expect(walked).toEqual(ids((await store.findPage({ query: whole(q), sort, skip: 0, limit: 1000 })).docs));
					}
				}
			expect(cases).toBeGreaterThan(1500);
			// The randomized set reaches the cases: an owner array, missing and non-string owners, deleted forms.
			const ofX = await store.findPage({ query: zoneQueries("u3")[0], sort: { created_at: -1 }, skip: 0, limit: 1000 });
			expect(ofX.docs.some((d) => Array.isArray(d.owner))).toBe(true);
			expect(ofX.docs.some((d) => Array.isArray(d.deleted_at))).toBe(true);
			expect(ofX.docs.some((d) => !("deleted_at" in d))).toBe(true);
			expect(ofX.docs.some((d) => !("created_at" in d) || d.created_at === null)).toBe(true);
		} finally {
			await store.disconnect();
		}
	});

	test("the owned half is an index scan in sort order (no Sort above it), its total an index-only scan", async () => {
		if (!up()) return;
		const store = new PgStore(cfg(), `owner_${unique()}`);
		await store.connect();
		const db = await openRelational(cfg());
		const table = `"docs/${store.name}"`;
		try {
			const many = Array.from({ length: 8000 }, (_, i) => ({
				id: hexId(100_000 + i),
				owner: `u${i % 40}`,
				shares: i % 97 === 0 ? ["u1"] : [],
				clients: ["c1"],
				deleted_at: i % 10 === 9 ? "2026-01-01T00:00:00.000Z" : null,
				created_at: new Date(1_700_000_000_000 + Math.floor(i / 3) * 1000).toISOString(),
				title: "lorem ipsum ".repeat(40),
			}));
			await store.insertMany(many);
			await db.query(`vacuum analyze ${table}`);
			const query = { deleted_at: null, $or: [{ owner: "u1" }, { shares: "u1" }] };
			for (const [sort, index] of [
				[{ created_at: -1 }, "owner_created"],
				[{ created_at: 1 }, "owner_created"],
				[{ id: 1 }, "owner_id"],
			] as const) {
				const sent: Array<{ text: string; values: unknown[] }> = [];
				// Capture the statement the store sends (its text and values), then EXPLAIN it.
				const query$ = Client.prototype.query;
				Client.prototype.query = function (this: Client, ...args: any[]) {
					const s = args[0];
					// A named statement (text and values), or beyond the named ones a text and its values.
					if (typeof s === "object" && s?.text?.startsWith("with o as materialized")) sent.push({ text: s.text, values: s.values });
					else if (typeof s === "string" && s.startsWith("with o as materialized")) sent.push({ text: s, values: args[1] });
					return (query$ as any).apply(this, args);
				} as any;
				let page;
				try {
					page = await store.findPage({ query, sort, skip: 0, limit: 20 });
				} finally {
					Client.prototype.query = query$;
				}
				const expected = many.filter((d) => !d.deleted_at && (d.owner === "u1" || d.shares.includes("u1")));
				expect(page.total).toBe(expected.length);
				expect(sent).toHaveLength(1);
				const { rows } = await db.query<{ "QUERY PLAN": any }>(`explain (analyze, format json) ${sent[0].text}`, sent[0].values);
				const root = rows[0]["QUERY PLAN"][0].Plan;
				// Every node with the path from the plan's root to it.
				const nodes: Array<{ node: any; path: any[] }> = [];
				const walk = (node: any, path: any[]) => {
					nodes.push({ node, path });
					for (const c of node.Plans ?? []) walk(c, [...path, node]);
				};
				walk(root, []);
				const named = (n: any) => typeof n["Index Name"] === "string" && n["Index Name"].endsWith(`_${index}`);
				// (By `id`, the page's ids come from the index alone: an index-only scan.)
				const scan = nodes.find((n) => /^Index (Only )?Scan$/.test(n.node["Node Type"]) && named(n.node) && n.path.some((p) => p["Node Type"] === "Merge Append"));
				expect({ sort, scan: scan?.node["Node Type"], direction: scan?.node["Scan Direction"] }).toEqual({
					sort,
					scan: index === "owner_id" ? "Index Only Scan" : "Index Scan",
					direction: "created_at" in sort && sort.created_at === -1 ? "Backward" : "Forward",
				});
				// No Sort between the page and the owned half's scan; the scan stopped after the page (not all 180 rows).
				const below = scan!.path.slice(scan!.path.findIndex((p) => p["Node Type"] === "Merge Append"));
				expect(below.map((p) => p["Node Type"])).not.toContain("Sort");
				expect(scan!.node["Actual Rows"]).toBeLessThanOrEqual(20);
				// The owned half's total: counted from an owner index alone.
				const count = nodes.find((n) => n.node["Node Type"] === "Index Only Scan" && /_owner_(created|id)$/.test(n.node["Index Name"]));
				expect(count?.node["Heap Fetches"]).toBe(0);
				expect(count?.node["Actual Rows"]).toBe(many.filter((d) => !d.deleted_at && d.owner === "u1").length);
			}
		} finally {
			await releaseRelational(cfg());
			await store.disconnect();
		}
	});

	test("a table made before the owner column gets it and its indexes on start, with its data, once", async () => {
		if (!up()) return;
		const name = `owner_${unique()}`;
		const table = `"docs/${name}"`;
		const db = await openRelational(cfg());
		try {
			// The table as the version before made it, with documents in it.
			await db.query(
				`create table ${table} (id text collate "C" primary key, body json not null, doc jsonb generated always as (body::jsonb) stored) with (toast_tuple_target = 8160)`,
			);
			const docs = randomDocs(300);
			await db.query(`insert into ${table} (id, body) select x->>'id', x from json_array_elements($1::json) x`, [JSON.stringify(docs)]);
			const file = async () => (await db.query<{ f: string }>(`select pg_relation_filenode(to_regclass($1))::text as f`, [table])).rows[0].f;
			const before = await file();
			const store = new PgStore(cfg(), name);
			await store.connect();
			const afterFirst = await file();
			await store.disconnect();
			const again = new PgStore(cfg(), name);
			await again.connect();
			try {
				expect(afterFirst).not.toBe(before);
				// A second start changes nothing (no rewrite).
				expect(await file()).toBe(afterFirst);
				const wrong = await db.query(`select id from ${table} where owner is distinct from (case jsonb_typeof(doc->'owner') when 'string' then doc->>'owner' end)`);
				expect(wrong.rows).toEqual([]);
				expect((await db.query(`select count(*)::int as n from ${table} where owner is not null`)).rows[0].n).toBe(docs.filter((d) => typeof d.owner === "string").length);
				const indexes = (await db.query<{ n: string }>(`select indexname as n from pg_indexes where tablename = $1`, [`docs/${name}`])).rows.map((r) =>
					r.n.replace(/^docs_[0-9a-f]{12}_/, ""),
				);
				expect(indexes).toEqual(expect.arrayContaining(["owner_created", "owner_id", "owner_array"]));
				// The documents as they were, served by the split statements.
				for (const q of zoneQueries("u2")) {
					const got = await again.findPage({ query: q, sort: { created_at: -1 }, skip: 0, limit: 50 });
					const want = await again.findPage({ query: whole(q), sort: { created_at: -1 }, skip: 0, limit: 50 });
					expect(ids(got.docs)).toEqual(ids(want.docs));
					expect(got.total).toBe(want.total);
				}
				// Writes after the migration keep the column up to date.
				const fresh = hexId(999_999);
				await again.insert({ id: fresh, owner: "u2", deleted_at: null, created_at: "2030-01-01T00:00:00.000Z" });
				await again.setOne(docs[0].id, { owner: "u2", deleted_at: null, created_at: "2031-01-01T00:00:00.000Z" });
				const top = await again.findPage({ query: { ...zoneQueries("u2")[0], id: { $in: [docs[0].id, fresh, docs[1].id] } }, sort: { created_at: -1 }, skip: 0, limit: 5 });
				expect({ ids: ids(top.docs), total: top.total }).toEqual({ ids: [docs[0].id, fresh], total: 2 });
			} finally {
				await again.disconnect();
			}
		} finally {
			await releaseRelational(cfg());
		}
	});
});
