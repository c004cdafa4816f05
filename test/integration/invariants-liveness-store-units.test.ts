/**
 * Liveness of the document store (the conformance style of store-conformance.test.ts): what one read costs, counted in
 * rows read rather than in time.
 *
 * - A cursor's pages (findAfter) start after the keyset of the page before, so a whole cursor reads each document
 *   about once (PostgreSQL skipped by OFFSET before).
 * - `$regex` (the subset whose meaning RE2 and PostgreSQL share) and `$elemMatch` are SQL, so a list reads
 *   its page, not the view (a `$regex` list of 60 000 notes read all of them: 2.2 s, +60 MB); what remains matched in
 *   JavaScript is read in bounded batches after a keyset, never all at once, and never again from the start for the
 *   next page of a cursor.
 */
import { rmSync } from "fs";
import { PgStore, type DocumentStore, type FindOptions, type Keyset, type StoredDoc } from "../../stores";
import { Params, pgPattern, whereOf } from "../../stores/pg.query";
import { compileSafe, RegexBudget, SafeRegExp } from "../../lib/safe-regex";
import { testDatabase, type TestDatabase } from "../helpers/pg";
import { needServers, tempDir } from "../helpers/platform";
import { hexId, unique } from "../helpers/samples";

const N = 20_000;
const dir = tempDir("liveness-store-");
let pg: TestDatabase | undefined;
const PG = needServers(["PostgreSQL", 5432]);

beforeAll(async () => {
	if (PG.up) pg = await testDatabase();
}, 30_000);
afterAll(async () => {
	rmSync(dir, { recursive: true, force: true });
	await pg?.drop();
});

/** Documents shaped like the engine's, with a sort field that has ties and gaps. */
function docs(n: number): StoredDoc[] {
	return Array.from({ length: n }, (_, i) => ({
		id: hexId(i),
		owner: `u${i % 3}`,
		title: `note ${i}`,
		content: `content ${i} ${"x".repeat(60)}`,
		...(i % 11 === 0 ? {} : { rank: i % 7 }),
		relations: [
			{ kind: `k${i % 5}`, n: i % 100 },
			{ kind: "all", n: -1 },
		],
		deleted_at: null,
	}));
}

/** What a store reads: the rows PostgreSQL returns. */
interface Reads {
	rows: number;
	/** Most rows of one statement (PostgreSQL). */
	most: number;
	stop(): void;
}

function countReads(store: DocumentStore): Reads {
	const reads: Reads = { rows: 0, most: 0, stop: () => undefined };
	const db = (store as any).db as Record<"read" | "readOrdered", (text: string, values?: unknown[]) => Promise<{ rows: unknown[] }>>;
	const originals = { read: db.read, readOrdered: db.readOrdered };
	for (const k of ["read", "readOrdered"] as const)
		db[k] = async (text, values) => {
			const r = await originals[k](text, values);
			reads.rows += r.rows.length;
			reads.most = Math.max(reads.most, r.rows.length);
			return r;
		};
	reads.stop = () => Object.assign(db, originals);
	return reads;
}

/** Every page of a cursor through findAfter, each after the keyset of the page before. */
async function cursor(store: DocumentStore, o: FindOptions, size: number): Promise<{ ids: string[]; pages: number }> {
	const ids: string[] = [];
	let after: Keyset | undefined;
	let pages = 0;
	for (;;) {
		const page = await store.findAfter!({ ...o, limit: size, after });
		pages++;
		ids.push(...page.docs.map((d) => d.id));
		if (page.docs.length < size) return { ids, pages };
		after = page.next;
	}
}

// The PostgreSQL cases need the local server: reported as skipped (or failing under REQUIRE_SERVERS=1) without it.
const stores: Array<{ name: string; make(): DocumentStore }> = [
	...(PG.up ? [{ name: "PgStore", make: () => new PgStore({ dataDir: dir, databaseUrl: pg!.url }, `liveness_${unique()}`) }] : []),
];

describe.each(stores)("%s", ({ name, make }) => {
	let store: DocumentStore;
	const all = docs(N);

	beforeAll(async () => {
		store = make();
		await store.connect();
		for (let i = 0; i < N; i += 5000) await store.insertMany(all.slice(i, i + 5000).map((d) => structuredClone(d)));
	}, 120_000);
	afterAll(async () => {
		await store?.disconnect();
	});

	test("a cursor pages by keyset: each document once, in the sort's order (ties, missing values), each page reading about its own size", async () => {
		// Every document by id (the cursor's default order); a third of them by a field without an index (which
		// PostgreSQL sorts for each page).
		const cases: Array<[Record<string, unknown>, Record<string, 1 | -1>, number]> = [
			[{ deleted_at: null }, { id: 1 }, N],
			[{ owner: "u0" }, { rank: 1 }, Math.ceil(N / 3)],
			[{ owner: "u0" }, { rank: -1 }, Math.ceil(N / 3)],
			[{ owner: "u0" }, { rank: 1, title: -1 }, Math.ceil(N / 3)],
		];
		for (const [query, sort, n] of cases) {
			const expected = (await store.find({ query, sort })).map((d) => d.id);
			expect(expected.length).toBe(n);
			const reads = countReads(store);
			const { ids, pages } = await cursor(store, { query, sort }, 100);
			reads.stop();
			expect({ sort, same: ids.length === expected.length && ids.every((id, i) => id === expected[i]) }).toEqual({ sort, same: true });
			// Each document about once in all (each page's rows).
			expect({ sort, reads: reads.rows <= n + pages }).toEqual({ sort, reads: true });
		}
	}, 120_000);

	test("$regex and $elemMatch lists: the same page and total on both stores; on PostgreSQL, only the page is read", async () => {
		const re = (src: string, flags = "") => compileSafe("$regex", "title", src, flags, new RegexBudget());
		const cases: Array<[string, Record<string, unknown>, (d: StoredDoc) => boolean]> = [
			["/^note 1234\\d?$/", { title: { $regex: re("^note 1234\\d?$") } }, (d) => /^note 1234\d?$/.test(d.title as string)],
			["/^NOTE 77$/i", { title: { $regex: re("^NOTE 77$", "i") } }, (d) => d.title === "note 77"],
			[
				"$elemMatch",
				{ relations: { $elemMatch: { kind: "k3", n: { $gte: 98 } } } },
				(d) => (d.relations as Array<{ kind: string; n: number }>).some((r) => r.kind === "k3" && r.n >= 98),
			],
		];
		for (const [label, query, pick] of cases) {
			const expected = all.filter(pick).map((d) => d.id);
			const reads = countReads(store);
			const page = await store.findPage!({ query, sort: { id: 1 }, limit: 10 });
			reads.stop();
			expect({ label, ids: page.docs.map((d) => d.id), total: page.total }).toEqual({ label, ids: expected.slice(0, 10), total: expected.length });
			if (name === "PgStore") expect({ label, rows: reads.rows }).toEqual({ label, rows: Math.min(10, expected.length) });
		}
	}, 120_000);

	test("a filter matched in JavaScript (a pattern outside the SQL subset) is read in batches; a cursor over it reads each row about once", async () => {
		// `\b` is read differently by PostgreSQL: RE2 decides.
		const query = { title: { $regex: compileSafe("$regex", "title", "\\bnote 1\\d{3}\\b", "", new RegexBudget()) } };
		expect(whereOf(query, new Params()).exact).toBe(false);
		const expected = all.filter((d) => /\bnote 1\d{3}\b/.test(d.title as string)).map((d) => d.id);
		const reads = countReads(store);
		const page = await store.findPage!({ query, sort: { id: 1 }, skip: 5, limit: 10 });
		reads.stop();
		expect({ ids: page.docs.map((d) => d.id), total: page.total }).toEqual({ ids: expected.slice(5, 15), total: expected.length });
		if (name === "PgStore") expect({ most: reads.most, bounded: reads.most <= 1000 }).toEqual({ most: reads.most, bounded: true });
		const walk = countReads(store);
		const { ids } = await cursor(store, { query, sort: { id: 1 } }, 100);
		walk.stop();
		expect(ids).toEqual(expected);
		expect({ rows: walk.rows, aboutOnce: walk.rows <= 1.5 * N }).toEqual({ rows: walk.rows, aboutOnce: true });
	}, 120_000);
});

describe("PostgreSQL's `~` and RE2 agree on the patterns translated", () => {
	const strings = [
		"note 1",
		"note 19",
		"Note 2",
		"abc",
		"a\nc",
		"a\nb",
		"x\nx",
		"\u212a",
		"\u017f",
		"Kelvin",
		"kelvin",
		"S",
		"ABZ",
		"12",
		"1234",
		"me@host.com",
		"tab\there",
		"abe",
		"cde",
		"ababab",
		"aaa",
		"color",
		"colour",
		"a.b",
		"$5",
		"]",
		" x",
		"ax",
		"é",
		"É",
		"",
		"k",
		"z",
		"_",
		"\n",
		"-",
		"x\n",
		"a+b",
		"(a)",
		"[x]",
	];
	const atoms = ["a", "b", "k", "s", "x", "1", ".", "\\d", "\\w", "\\s", "\\S", "[a-c]", "[^a]", "[kx]", "(ab|cd)", "(?:a|x)", "\\.", "\\+", "\\(", "é", " ", "\\n", "[\\]x]"];
	const quants = ["", "", "", "*", "+", "?", "{2}", "{1,3}", "*?"];
	/** A seeded generator of patterns from RE2 syntax the translation knows and some it leaves out. */
	function patterns(n: number): Array<[string, string]> {
		let seed = 11;
		const r = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
		const pick = <T>(xs: T[]) => xs[Math.floor(r() * xs.length)];
		return Array.from({ length: n }, () => {
			let src = r() < 0.3 ? "^" : "";
			for (let k = 1 + Math.floor(r() * 4); k > 0; k--) src += pick(atoms) + pick(quants);
			if (r() < 0.3) src += "$";
			if (r() < 0.1) src = `${src}|${pick(atoms)}`;
			if (r() < 0.05) src = `\\b${src}`;
			return [src, pick(["", "", "i", "m", "s", "im"])];
		});
	}

	PG.test(
		"300 generated patterns over 40 strings: the same matches, or not translated",
		async () => {
			const { Client } = await import("pg");
			const c = new Client({ connectionString: pg!.url });
			await c.connect();
			try {
				let translated = 0;
				for (const [src, flags] of patterns(300)) {
					const sql = pgPattern(src, flags);
					if (sql === undefined) continue;
					translated++;
					const re = new SafeRegExp(src, flags);
					const { rows } = await c.query("select s, s ~ $1 as m from unnest($2::text[]) with ordinality u(s, o) order by o", [sql, strings]);
					expect({ src, flags, sql, got: rows.map((x) => x.m) }).toEqual({ src, flags, sql, got: strings.map((s) => re.test(s)) });
				}
				expect(translated).toBeGreaterThan(200);
			} finally {
				await c.end();
			}
		},
		60_000,
	);

	test("what PostgreSQL would read otherwise, or could not match in bounded time, is left to RE2", () => {
		for (const src of ["\\bx", "\\p{L}", "(a+)+", "(a*)*b", "a{300}", "\\1", "[[:alpha:]]", "(?i)a", "\\x41", "a|", "()"])
			expect({ src, sql: pgPattern(src, "") }).toEqual({ src, sql: undefined });
		// Case folding beyond ASCII is RE2's to decide.
		expect(pgPattern("é", "i")).toBeUndefined();
		// At most 16 patterns per statement go to PostgreSQL (it keeps 32 compiled per connection).
		const many = { $or: Array.from({ length: 20 }, (_, i) => ({ title: { $regex: new SafeRegExp(`^n${i}`, "") } })) };
		const w = whereOf(many, new Params());
		expect({ exact: w.exact, inSql: (w.sql.match(/ ~ /g) ?? []).length / 2 }).toEqual({ exact: false, inSql: 16 });
	});
});
