/**
 * Cost that grows with data (`npx tsx bench/million-pg.ts`, opt-in: about 10 minutes, a few GB under the OS
 * temporary directory): the peer bench's scenarios (bench/reads-pg.ts: get, the caller's list of 20, create; CPU per
 * request of the platform and of PostgreSQL, the platform's resident memory) on DOCUMENT_STORE=postgres, first with the
 * peer bench's 10 000 notes (100 users, 100 each, 10 % soft-deleted), then with 1 000 000 in the same collection
 * (10 000 per user, 10 % soft-deleted, created over the year before; the caller's 20 newest stay the same notes).
 *
 * The 990 000 extra notes are written by SQL, not through the API (at the API's seeding rate that would take hours):
 * each a copy of one of its owner's notes with its own id, creation time and deletion stamp; the collection's
 * indexes are dropped before and built again after, as a bulk load would, then the table is analysed. Prints one JSON
 * line per scenario and size, and the seed's duration. BENCH_MILLION_PER_USER changes the 10 000. BENCH_MIGRATION=1 then
 * times the start that adds the `owner` column and its indexes to the 1 000 000-row table (see migration below).
 */
import type { ChildProcess } from "child_process";
import { mkdtempSync, readFileSync } from "fs";
import os from "os";
import path from "path";
import { freePort, quiet, rootToken, spawnPlatform, stopPlatform, waitFor } from "./process";
import { peerSeed } from "./peer-seed";
import { Client } from "pg";
import { PgStore } from "../stores/pg.store";
import { embeddedClient } from "./pg-statements";
import { pgScenarios, rssMb } from "./reads-pg";

const PER_USER = Number(process.env.BENCH_MILLION_PER_USER ?? 10_000);
const TABLE = `"docs/content/notes"`;

/** Grows every owner's notes to PER_USER by SQL (see above); returns the seconds it took and the live notes per owner. */
async function grow(dataDir: string): Promise<{ seconds: number; rows: number }> {
	const db = await embeddedClient(dataDir);
	const t0 = Date.now();
	try {
		await db.query("set maintenance_work_mem = '512MB'");
		const { rows: indexes } = await db.query<{ name: string; def: string }>(
			"select indexname as name, indexdef as def from pg_indexes where schemaname = 'public' and tablename = 'docs/content/notes' and indexname <> 'docs/content/notes_pkey'",
		);
		for (const i of indexes) await db.query(`drop index "${i.name}"`);
		// Each owner up to PER_USER notes (the caller's creates of the first round count), from one of its notes as the
		// template; ids from a hash of owner and number (24 hex).
		await db.query(
			`insert into ${TABLE} (id, doc) select x.id, jsonb_set(jsonb_set(jsonb_set(o.doc, '{_id}', to_jsonb(x.id)), '{created_at}', ` +
				`to_jsonb(to_char(timestamp '2025-01-01' + g * interval '3 second' + o.k * interval '1 millisecond', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))), ` +
				`'{deleted_at}', case when g % 10 = 9 then to_jsonb('2025-12-01T00:00:00.000Z'::text) else 'null'::jsonb end) ` +
				`from (select distinct on (doc->>'owner') doc->>'owner' as owner, doc, dense_rank() over (order by doc->>'owner') as k, count(*) over (partition by doc->>'owner') as n ` +
				`from ${TABLE} order by doc->>'owner', id) o, generate_series(1, $1::int - o.n::int) g, lateral (select substr(md5(o.owner || ':' || g), 1, 24) as id) x`,
			[PER_USER],
		);
		for (const i of indexes) await db.query(i.def);
		await db.query(`vacuum analyze ${TABLE}`);
		const { rows } = await db.query(`select count(*)::int as n, count(distinct doc->>'owner')::int as owners from ${TABLE}`);
		console.error(`${rows[0].owners} owners`);
		return { seconds: Math.round((Date.now() - t0) / 1000), rows: rows[0].n };
	} finally {
		await db.end();
	}
}

/**
 * EXPLAIN (ANALYZE, BUFFERS) of the caller's list statement (BENCH_EXPLAIN=1): the statement the store sends for the
 * default zones (own, share) and the soft-delete condition, newest 20 first, its text taken as the store sends it.
 */
async function explainList(dataDir: string, token: string): Promise<string> {
	const uid = JSON.parse(Buffer.from(token.split(".")[1], "base64url").toString()).uid as string;
	const db = await embeddedClient(dataDir);
	const store = new PgStore({ dataDir, databaseUrl: `postgres://postgres:${encodeURIComponent(db.password ?? "")}@127.0.0.1:${db.port}/postgres` }, "content/notes");
	await store.connect();
	const query = Client.prototype.query as (...a: unknown[]) => unknown;
	let sent: { text: string; values?: unknown[] } | undefined;
	const spy = function (this: Client, ...a: unknown[]) {
		const s = a[0] as string | { text: string; values?: unknown[] };
		if (!sent && (typeof s === "string" ? s : s.text).startsWith("with ")) sent = typeof s === "string" ? { text: s, values: a[1] as unknown[] } : s;
		return query.apply(this, a);
	};
	Client.prototype.query = spy as typeof Client.prototype.query;
	try {
		await store.findPage({ query: { $and: [{ deleted_at: null }, { $or: [{ owner: uid }, { shares: uid }] }] }, sort: { created_at: -1 }, skip: 0, limit: 20 });
	} finally {
		Client.prototype.query = query as typeof Client.prototype.query;
		await store.disconnect();
	}
	const { rows } = await db.query(`explain (analyze, buffers) ${sent!.text}`, sent!.values);
	await db.end();
	return rows.map((r) => r["QUERY PLAN"]).join("\n");
}

/**
 * The migration of a table made before the `owner` column (BENCH_MIGRATION=1, after the scenarios): the column and its
 * indexes dropped, then the store's start adds them again, the platform running. Returns the seconds the start took.
 */
async function migration(dataDir: string): Promise<number> {
	const db = await embeddedClient(dataDir);
	try {
		await db.query(`alter table ${TABLE} drop column owner`);
		const store = new PgStore({ dataDir, databaseUrl: `postgres://postgres:${encodeURIComponent(db.password ?? "")}@127.0.0.1:${db.port}/postgres` }, "content/notes");
		const t0 = Date.now();
		await store.connect();
		const seconds = (Date.now() - t0) / 1000;
		await store.disconnect();
		return seconds;
	} finally {
		await db.end();
	}
}

async function main() {
	const dataDir = mkdtempSync(path.join(os.tmpdir(), "bench-million-pg-"));
	const port = await freePort();
	const base = `http://127.0.0.1:${port}`;
	const child: ChildProcess = spawnPlatform({ PORT: String(port), DATA_DIR: dataDir, DOCUMENT_STORE: "postgres" });
	const out = (size: number, r: object) => console.log(JSON.stringify({ platform: process.env.BENCH_PLATFORM_DIR ?? "this checkout", documents: size, ...r }));
	try {
		await waitFor(`${base}/status`, 120_000);
		const boot = JSON.parse(readFileSync(path.join(dataDir, "bootstrap.json"), "utf8"));
		const t0 = Date.now();
		const seed = await peerSeed(base, { authorization: `Bearer ${await rootToken(base, dataDir)}` }, boot.domain ?? "root.local", boot.client_id);
		console.error(`10 000 notes through the API in ${Math.round((Date.now() - t0) / 1000)} s; workers idle after ${await quiet(child.pid!, 300_000)} ms`);
		out(10_000, { rssMbIdle: rssMb(child.pid!) });
		for (const r of await pgScenarios(child.pid!, base, seed, dataDir, seed.live.length)) out(10_000, r);
		const grown = await grow(dataDir);
		console.error(`grown to ${grown.rows} notes in ${grown.seconds} s; platform idle after ${await quiet(child.pid!, 300_000)} ms`);
		out(grown.rows, { seedSeconds: grown.seconds, rssMbIdle: rssMb(child.pid!) });
		// The caller's live notes now: its 90, the creates of the first round, and 90 % of the copies.
		const counted = (await (await fetch(`${base}/content/notes/count?query=%7B%7D`, { headers: { authorization: `Bearer ${seed.token}` } })).json()) as { total: number };
		const live = counted.total;
		for (const r of await pgScenarios(child.pid!, base, seed, dataDir, live)) out(grown.rows, r);
		if (process.env.BENCH_EXPLAIN === "1") console.error(await explainList(dataDir, seed.token));
		if (process.env.BENCH_MIGRATION === "1") out(grown.rows, { migrationSeconds: await migration(dataDir) });
	} finally {
		await stopPlatform(child, dataDir);
	}
}

if (require.main === module)
	main().catch((err) => {
		console.error(err);
		process.exit(1);
	});
