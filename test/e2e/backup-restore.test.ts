/**
 * The PostgreSQL backup and restore procedure of docs/production.md ("Backup and restore"), run against a platform's
 * database on the local server: `pg_dump --format=custom` while the platform runs and writes, the database destroyed
 * (`dropdb --force`), made again (`createdb -T template0`) and restored (`pg_restore`); the platform started again on
 * it has every document and every outbox event back, and goes on writing after the last event. The dump is taken on
 * a snapshot this test also reads, so "everything" is checked table by table, not only through the API.
 * Skips with a message when PostgreSQL or its client tools are missing (fails under REQUIRE_SERVERS=1).
 */
import { spawnSync } from "child_process";
import { mkdtempSync, rmSync } from "fs";
import os from "os";
import path from "path";
import { Client } from "pg";
import { bootPlatform, needServers, type TestPlatform } from "../helpers/platform";
import { outboxRecords, pgPlatformKeepingEvents, testDatabase, type TestDatabase } from "../helpers/pg";
import { unique } from "../helpers/samples";

const servers = needServers(["PostgreSQL", 5432]);
const TOOLS = ["pg_dump", "pg_restore", "dropdb", "createdb"];
const missing = TOOLS.filter((t) => spawnSync("sh", ["-c", `command -v ${t}`], { stdio: "ignore" }).status !== 0);
if (missing.length && process.env.REQUIRE_SERVERS === "1") throw new Error(`${missing.join(", ")} not installed (REQUIRE_SERVERS=1)`);
if (missing.length) console.warn(`SKIPPED: ${missing.join(", ")} not installed (apt-get install postgresql-client); the backup test is reported as skipped`);
const live = missing.length ? test.skip : servers.test;

jest.setTimeout(180_000);

let db: TestDatabase | undefined;
let p: TestPlatform | undefined;
const dir = mkdtempSync(path.join(os.tmpdir(), "backup-"));

beforeAll(async () => {
	db = await testDatabase();
}, 30_000);
afterAll(async () => {
	await p?.cleanup();
	await db?.drop();
	rmSync(dir, { recursive: true, force: true });
});

/** Runs a PostgreSQL client tool against the local server; its output when it fails. */
function pgTool(tool: string, ...args: string[]): void {
	const r = spawnSync(tool, ["--host=127.0.0.1", "--port=5432", "--username=postgres", ...args], { encoding: "utf8" });
	if (r.status !== 0) throw new Error(`${tool} ${args.join(" ")} failed (${r.status}): ${r.stderr}`);
	expect([tool, r.stderr.trim()]).toEqual([tool, ""]);
}

/** Rows and a digest of every table of the database's own schemas, read in `client`'s transaction. */
async function contents(client: Client): Promise<Record<string, { rows: number; digest: string }>> {
	const tables = await client.query(
		"select table_schema as s, table_name as t from information_schema.tables where table_type = 'BASE TABLE' and table_schema not in ('pg_catalog', 'information_schema') order by 1, 2",
	);
	const out: Record<string, { rows: number; digest: string }> = {};
	for (const { s, t } of tables.rows) {
		const name = `${client.escapeIdentifier(s)}.${client.escapeIdentifier(t)}`;
		const r = await client.query(`select count(*)::int as rows, md5(coalesce(string_agg(x::text, E'\\n' order by x::text), '')) as digest from ${name} x`);
		out[`${s}.${t}`] = r.rows[0];
	}
	return out;
}

/** Every note the root sees, by id, as the API answers it. */
async function notes(token: string): Promise<Record<string, unknown>> {
	const r = await p!.http("GET", `/content/notes?pagination=${encodeURIComponent(JSON.stringify({ limit: 100 }))}`, { token });
	expect(r.status).toBe(200);
	expect(r.body.total).toBeLessThan(100);
	return Object.fromEntries((r.body.items as Array<{ id: string }>).map((n) => [n.id, n]));
}

live("pg_dump while it runs, the database destroyed and restored: every document and outbox event is back", async () => {
	if (!db) return;
	p = await pgPlatformKeepingEvents(db.url);
	let token = await p.rootToken();
	const tag = unique();
	const ids: string[] = [];
	for (let i = 0; i < 12; i++) {
		const r = await p.http("POST", "/content/notes", { token, body: { title: `backup-${tag}-${i}`, content: `note ${i}` } });
		expect(r.status).toBe(200);
		ids.push(r.body.data.id);
	}
	expect((await p.http("PATCH", `/content/notes/${ids[0]}`, { token, body: { title: `backup-${tag}-patched` } })).status).toBe(200);
	expect((await p.http("DELETE", `/content/notes/${ids[1]}`, { token })).status).toBe(200);
	const notesBefore = await notes(token);
	expect(Object.keys(notesBefore)).toHaveLength(11);

	// The backup, online: pg_dump on a snapshot this transaction exported, so that what it reads is what the dump holds.
	const file = path.join(dir, "platform.dump");
	const snap = new Client({ connectionString: db.url });
	await snap.connect();
	let dumped: Awaited<ReturnType<typeof contents>>;
	let lastSeq: number;
	try {
		await snap.query("begin isolation level repeatable read");
		const id = (await snap.query("select pg_export_snapshot() as id")).rows[0].id as string;
		dumped = await contents(snap);
		lastSeq = Number((await snap.query(`select max(seq) as last from "_outbox"`)).rows[0].last);
		pgTool("pg_dump", "--format=custom", `--snapshot=${id}`, `--file=${file}`, `--dbname=${db.url}`);
		await snap.query("commit");
	} finally {
		await snap.end();
	}
	// The events the dump holds (the workers may have written more since: the observer's statistics).
	const eventsBefore = (await outboxRecords(p)).filter((e) => e.seq <= lastSeq);
	expect(
		eventsBefore
			.filter((e) => ids.includes(e.event.id))
			.map((e) => e.event.op)
			.sort(),
	).toEqual([...Array(12).fill("c"), "d", "u"].sort());
	expect(dumped["public._outbox"].rows).toBe(eventsBefore.length);
	const dataDir = p.dataDir;
	await p.stop();

	// Destroyed, made again empty, restored.
	pgTool("dropdb", "--force", db.name);
	pgTool("createdb", "--template=template0", db.name);
	pgTool("pg_restore", "--exit-on-error", "--no-owner", `--dbname=${db.url}`, file);
	const check = new Client({ connectionString: db.url });
	await check.connect();
	try {
		expect(await contents(check)).toEqual(dumped);
	} finally {
		await check.end();
	}

	// The platform again, on the restored database (DATA_DIR keeps the keys: a deployment keeps them as secrets).
	p = await bootPlatform({ databaseUrl: db.url, dataDir });
	token = await p.rootToken();
	expect(await notes(token)).toEqual(notesBefore);
	expect((await p.http("GET", `/content/notes/${ids[1]}`, { token })).status).toBe(404);
	expect((await outboxRecords(p)).filter((e) => e.seq <= lastSeq)).toEqual(eventsBefore);
	// Writing goes on after the last event (the sequences came back with the rows).
	const next = await p.http("POST", "/content/notes", { token, body: { title: `backup-${tag}-after`, content: "after" } });
	expect(next.status).toBe(200);
	const created = (await outboxRecords(p)).filter((e) => e.event.id === next.body.data.id);
	expect(created).toHaveLength(1);
	expect(created[0].seq).toBeGreaterThan(lastSeq);
});
