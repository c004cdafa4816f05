/**
 * The peer bench's three scenarios on the PostgreSQL document store (`npx tsx bench/reads-pg.ts`): a platform child
 * process with DOCUMENT_STORE=postgres (the embedded PostgreSQL), seeded as the peer bench seeds it (bench/peer-seed.ts:
 * 100 users, 10 000 1 KB notes, 10 % of each user's soft-deleted), then as user 0: get by id (rotating over 50 of its
 * live notes), its list of the 20 newest (`query={}`, sort created_at -1, default zones own,share) and create.
 * Per request: CPU time of the platform process and of the PostgreSQL server processes (from /proc), which other jobs
 * on a shared machine disturb much less than req/s. BENCH_PLATFORM_DIR runs another checkout (before/after),
 * PROFILE=dir profiles the platform, SCENARIOS=get,list,create picks scenarios, PG_STATEMENTS=1 preloads
 * pg_stat_statements and prints each scenario's statements (calls and server time per request).
 */
import type { ChildProcess } from "child_process";
import { mkdtempSync, readFileSync } from "fs";
import os from "os";
import path from "path";
import autocannon from "autocannon";
import { cpuSplit, freePort, quiet, rootToken, spawnPlatform, waitFor, stopPlatform } from "./process";
import { peerSeed, type PeerSeed } from "./peer-seed";
import { PG_STATEMENTS_ARGS, statementsClient, topStatements } from "./pg-statements";

const DURATION = Number(process.env.BENCH_DURATION ?? 10);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 50);
const SCENARIOS = (process.env.SCENARIOS ?? "get,list,create").split(",");

export interface PgRow {
	scenario: string;
	rps: number;
	p99: number;
	non2xx: number;
	/** µs of CPU per request: the platform process, the PostgreSQL server. */
	nodeUs: number;
	pgUs: number;
	/** Resident memory of the platform process after the scenario, MiB. */
	rssMb: number;
}

/** Resident memory of a process, MiB (/proc). */
export function rssMb(pid: number): number {
	const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
	return m ? Math.round(Number(m[1]) / 1024) : 0;
}

const STATEMENTS = process.env.PG_STATEMENTS === "1";

/** When the platform child was started: PROFILE windows are printed in seconds since then (the profile's own clock, ±1 s). */
let spawnedAt = Date.now();

async function measure(pid: number, scenario: string, opts: autocannon.Options, dataDir: string): Promise<PgRow> {
	const db = STATEMENTS ? await statementsClient(dataDir) : undefined;
	const a = cpuSplit(pid);
	const from = (Date.now() - spawnedAt) / 1000;
	const r = await autocannon({ connections: CONNECTIONS, duration: DURATION, ...opts });
	const b = cpuSplit(pid);
	if (process.env.PROFILE) console.error(`${scenario}: profile window ${from.toFixed(0)}-${((Date.now() - spawnedAt) / 1000).toFixed(0)} s`);
	const n = Math.max(1, r.requests.total);
	if (db) {
		console.error(`${scenario}:\n${(await topStatements(db, n, 8)).lines.join("\n")}`);
		await db.end();
	}
	return {
		scenario,
		rps: Math.round(r.requests.average),
		p99: r.latency.p99,
		non2xx: r.non2xx + r.errors,
		nodeUs: Math.round(((b.node - a.node) * 10_000) / n),
		pgUs: Math.round(((b.pg - a.pg) * 10_000) / n),
		rssMb: rssMb(pid),
	};
}

/** The scenarios (SCENARIOS) as user 0 of a peer seed: get by id over 50 of its live notes, its list of 20, create. */
export async function pgScenarios(pid: number, base: string, seed: PeerSeed, dataDir: string, live: number): Promise<PgRow[]> {
	const auth = { authorization: `Bearer ${seed.token}` };
	const pag = encodeURIComponent(JSON.stringify({ limit: 20, sort: { created_at: -1 } }));
	const listPath = `/content/notes?query=${encodeURIComponent("{}")}&pagination=${pag}`;
	const list = (await fetch(`${base}${listPath}`, { headers: auth }).then((r) => r.json())) as { items: { id: string }[]; total: number };
	if (list.total !== live || list.items.length !== 20) throw new Error(`list check failed: total ${list.total}, ${list.items.length} items`);
	const rows: PgRow[] = [];
	const ids = seed.live.slice(0, 50);
	if (SCENARIOS.includes("get")) rows.push(await measure(pid, "get", { url: base, headers: auth, requests: ids.map((id) => ({ path: `/content/notes/${id}` })) }, dataDir));
	if (SCENARIOS.includes("list")) rows.push(await measure(pid, "list", { url: `${base}${listPath}`, headers: auth }, dataDir));
	if (SCENARIOS.includes("create")) {
		const body = JSON.stringify({ title: "bench", content: "x".repeat(900), props: { n: 1 } });
		rows.push(await measure(pid, "create", { url: `${base}/content/notes`, method: "POST", headers: { ...auth, "content-type": "application/json" }, body }, dataDir));
	}
	return rows;
}

export async function readsPg(): Promise<PgRow[]> {
	const dataDir = mkdtempSync(path.join(os.tmpdir(), "bench-reads-pg-"));
	const port = await freePort();
	const base = `http://127.0.0.1:${port}`;
	const child: ChildProcess = spawnPlatform({ PORT: String(port), DATA_DIR: dataDir, DOCUMENT_STORE: "postgres", ...(STATEMENTS ? { EMBEDDED_PG_ARGS: PG_STATEMENTS_ARGS } : {}) });
	spawnedAt = Date.now();
	try {
		await waitFor(`${base}/status`, 120_000);
		const boot = JSON.parse(readFileSync(path.join(dataDir, "bootstrap.json"), "utf8"));
		const rootAuth = { authorization: `Bearer ${await rootToken(base, dataDir)}` };
		const seed = await peerSeed(base, rootAuth, boot.domain ?? "root.local", boot.client_id, Number(process.env.BENCH_USERS ?? 100));
		console.error(`seeded; workers idle after ${await quiet(child.pid!, 120_000)} ms`);
		return await pgScenarios(child.pid!, base, seed, dataDir, seed.live.length);
	} finally {
		await stopPlatform(child, dataDir);
	}
}

/**
 * Issue 35's targets, CPU per request of the platform and PostgreSQL together (µs): a get on a cache miss (no answer
 * cache exists yet, so every get is one), a list of 20, a create with the workers' share (they run in the platform
 * process).
 */
export const CPU_TARGETS_US: Record<string, number> = { get: 250, list: 600, create: 600 };

if (require.main === module)
	readsPg()
		.then((rows) => {
			for (const r of rows) console.log(JSON.stringify({ platform: process.env.BENCH_PLATFORM_DIR ?? "this checkout", ...r }));
			for (const r of rows) {
				const target = CPU_TARGETS_US[r.scenario];
				const total = r.nodeUs + r.pgUs;
				if (target)
					console.log(`${r.scenario}: ${total} µs of CPU per request (platform ${r.nodeUs}, PostgreSQL ${r.pgUs}); target ≤ ${target}: ${total <= target ? "met" : "not met"}`);
			}
		})
		.catch((err) => {
			console.error(err);
			process.exit(1);
		});
