/**
 * Where a PostgreSQL create spends the server's time (`npx tsx bench/pg-statements.ts`): a platform child process with
 * DOCUMENT_STORE=postgres and pg_stat_statements preloaded (EMBEDDED_PG_ARGS), the peer bench's create load
 * (bench/create.ts), the workers' drain, then every statement's calls and execution time per create, and the CPU of
 * the platform process and of the PostgreSQL processes per create. BENCH_PLATFORM_DIR runs another checkout.
 */
import type { ChildProcess } from "child_process";
import { mkdtempSync, readFileSync } from "fs";
import os from "os";
import path from "path";
import { Client } from "pg";
import { cpuSplit, freePort, spawnPlatform, stopPlatform } from "./process";
import { createLoad, createSetup, idle } from "./create";

/** The server options that preload pg_stat_statements (the embedded server reads EMBEDDED_PG_ARGS). */
export const PG_STATEMENTS_ARGS = "-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all -c pg_stat_statements.max=5000";

/** A connection to a platform's embedded PostgreSQL (DATA_DIR). */
export async function embeddedClient(dataDir: string): Promise<Client> {
	const pgPort = Number(readFileSync(path.join(dataDir, "postgres", "postmaster.pid"), "utf8").split("\n")[3]);
	const { password } = JSON.parse(readFileSync(path.join(dataDir, "postgres.json"), "utf8"));
	const db = new Client({ host: "127.0.0.1", port: pgPort, user: "postgres", password, database: "postgres" });
	await db.connect();
	return db;
}

/** A connection to a platform's embedded PostgreSQL (DATA_DIR), pg_stat_statements created and reset. */
export async function statementsClient(dataDir: string): Promise<Client> {
	const db = await embeddedClient(dataDir);
	await db.query("create extension if not exists pg_stat_statements");
	await db.query("select pg_stat_statements_reset()");
	return db;
}

/** The statements since the last reset, the costliest first: calls and execution µs per `n` requests. */
export async function topStatements(db: Client, n: number, limit = 40): Promise<{ total: number; lines: string[] }> {
	const { rows } = await db.query(
		"select calls, round(total_exec_time::numeric, 1) as ms, left(regexp_replace(query, '\\s+', ' ', 'g'), 160) as q from pg_stat_statements " +
			"where query not like '%pg_stat_statements%' and query not like '%pg_stat_database%' order by total_exec_time desc",
	);
	const total = rows.reduce((s, x) => s + Number(x.calls), 0);
	const lines = rows.slice(0, limit).map((x) => `${(Number(x.calls) / n).toFixed(2).padStart(7)} calls/req ${((Number(x.ms) * 1000) / n).toFixed(0).padStart(6)} µs/req  ${x.q}`);
	return { total, lines };
}

async function main() {
	const dataDir = mkdtempSync(path.join(os.tmpdir(), "bench-pgstat-"));
	const port = await freePort();
	const base = `http://127.0.0.1:${port}`;
	const child: ChildProcess = spawnPlatform({
		PORT: String(port),
		DATA_DIR: dataDir,
		DOCUMENT_STORE: "postgres",
		EMBEDDED_PG_ARGS: PG_STATEMENTS_ARGS,
	});
	try {
		const token = await createSetup(base, dataDir, child.pid!);
		const db = await statementsClient(dataDir);
		const db0 = (await db.query("select xact_commit::bigint as c, xact_rollback::bigint as r from pg_stat_database where datname = 'postgres'")).rows[0];
		const a = cpuSplit(child.pid!);
		const r = await createLoad(base, token);
		const loadEnd = cpuSplit(child.pid!);
		const drainS = await idle(child.pid!);
		const b = cpuSplit(child.pid!);
		const n = Math.max(1, r.requests.total);
		const db1 = (await db.query("select xact_commit::bigint as c, xact_rollback::bigint as r from pg_stat_database where datname = 'postgres'")).rows[0];
		const { total, lines } = await topStatements(db, n);
		await db.end();
		const out = {
			platform: process.env.BENCH_PLATFORM_DIR ?? "this checkout",
			creates: n,
			rps: Math.round(r.requests.average),
			p99: r.latency.p99,
			non2xx: r.non2xx + r.errors,
			drainS,
			nodeUsLoad: Math.round(((loadEnd.node - a.node) * 10_000) / n),
			pgUsLoad: Math.round(((loadEnd.pg - a.pg) * 10_000) / n),
			nodeUsTotal: Math.round(((b.node - a.node) * 10_000) / n),
			pgUsTotal: Math.round(((b.pg - a.pg) * 10_000) / n),
			commitsPerCreate: Math.round(((Number(db1.c) - Number(db0.c)) / n) * 100) / 100,
			statementsPerCreate: Math.round((total / n) * 100) / 100,
		};
		console.log(JSON.stringify(out));
		if (process.env.STATEMENTS !== "0") for (const l of lines) console.log(l);
	} finally {
		await stopPlatform(child, dataDir);
	}
}

if (require.main === module)
	main().catch((err) => {
		console.error(err);
		process.exit(1);
	});
