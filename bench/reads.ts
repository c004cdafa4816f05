/**
 * A normal user's reads as the peer bench runs them (`npx tsx bench/reads.ts`): a platform child process
 * (PostgreSQL: DATABASE_URL as in the environment, else the embedded server), 10 000 notes of which 100 are the user's (it holds read and write grants on
 * content:notes), every 10th note soft-deleted; then get by id rotating over 50 of the user's live ids and the user's
 * list of its 20 newest, 50 connections each. Reported per scenario: req/s, p50/p99 (ms) and the CPU time the
 * platform process tree used per request (from /proc), the figure that predicts a platform pinned to one core.
 * PROFILE=dir profiles the child, BENCH_PLATFORM_DIR runs another checkout (bench/process.ts); BENCH_COMPARE=dirA,dirB
 * starts both and measures them in turns, BENCH_ROUNDS times each (medians reported).
 */
import type { ChildProcess } from "child_process";
import { mkdtempSync, readFileSync } from "fs";
import os from "os";
import path from "path";
import autocannon from "autocannon";
import { kbNote, noteWriter } from "./create";
import { cpuTicksOf, freePort, PLATFORM_DIR, quiet, rootToken, spawnPlatform, waitFor, stopPlatform } from "./process";

const DURATION = Number(process.env.BENCH_DURATION ?? 10);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 50);
const DOCS = Number(process.env.BENCH_DOCS ?? 10_000);
const MINE = 100;
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 1);

export interface ReadRow {
	scenario: string;
	rps: number;
	p50: number;
	p99: number;
	non2xx: number;
	/** CPU time of the platform process tree per request, in µs. */
	cpuUsPerRequest: number;
	/**
	 * User-mode CPU time of the platform process per request, in µs: without the kernel's socket work (a loopback
	 * write also delivers to the load generator), which swings most with other jobs on the machine.
	 */
	userUsPerRequest: number;
}

/** User-mode clock ticks the process has used so far. */
function userTicks(pid: number): number {
	return Number(readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ")[11]);
}

async function bulk(base: string, auth: Record<string, string>, items: unknown[]): Promise<string[]> {
	const r = await fetch(`${base}/content/notes/bulk`, { method: "POST", headers: { ...auth, "content-type": "application/json" }, body: JSON.stringify({ items }) });
	if (r.status !== 200) throw new Error(`seeding failed: ${r.status} ${await r.text()}`);
	return ((await r.json()) as { items: Array<{ id: string }> }).items.map((d) => d.id);
}

async function measure(pid: number, scenario: string, opts: autocannon.Options): Promise<ReadRow> {
	await quiet(pid, 30_000);
	// A warm-up, discarded (as the peer bench does): a platform just thawed first runs its overdue timers.
	await autocannon({ connections: CONNECTIONS, duration: 2, ...opts });
	const cpu0 = cpuTicksOf(pid)!;
	const user0 = userTicks(pid);
	const r = await autocannon({ connections: CONNECTIONS, duration: DURATION, ...opts });
	const cpu1 = cpuTicksOf(pid)!;
	// Clock ticks are 10 ms.
	const perRequest = (ticks: number) => Math.round((ticks * 10_000) / Math.max(1, r.requests.total));
	return {
		scenario,
		rps: Math.round(r.requests.average),
		p50: r.latency.p50,
		p99: r.latency.p99,
		non2xx: r.non2xx + r.errors + r.timeouts,
		cpuUsPerRequest: perRequest(cpu1 - cpu0),
		userUsPerRequest: perRequest(userTicks(pid) - user0),
	};
}

interface Seeded {
	dir: string;
	child: ChildProcess;
	dataDir: string;
	base: string;
	auth: Record<string, string>;
	/** 50 of the user's live notes. */
	live: string[];
}

const LIST_PATH = `/content/notes?query=${encodeURIComponent("{}")}&pagination=${encodeURIComponent(JSON.stringify({ limit: 20, sort: { created_at: -1 } }))}`;

/** A platform of `dir` on a free port, seeded as the peer bench does, its answers checked. */
async function seeded(dir: string, env: Record<string, string>): Promise<Seeded> {
	const dataDir = mkdtempSync(path.join(os.tmpdir(), "bench-reads-"));
	const port = await freePort();
	const base = `http://127.0.0.1:${port}`;
	const child: ChildProcess = spawnPlatform({ PORT: String(port), DATA_DIR: dataDir, ...env }, dir);
	const s: Seeded = { dir, child, dataDir, base, auth: {}, live: [] };
	try {
		await waitFor(`${base}/status`, 120_000);
		const boot = JSON.parse(readFileSync(path.join(dataDir, "bootstrap.json"), "utf8"));
		const rootAuth = { authorization: `Bearer ${await rootToken(base, dataDir)}` };
		const token = await noteWriter(base, rootAuth, boot.domain ?? "root.local", boot.client_id);
		s.auth = { authorization: `Bearer ${token}` };
		const others: string[] = [];
		for (let i = 0; i < DOCS - MINE; i += 100)
			others.push(
				...(await bulk(
					base,
					rootAuth,
					Array.from({ length: Math.min(100, DOCS - MINE - i) }, (_, k) => kbNote(i + k)),
				)),
			);
		const mine = await bulk(
			base,
			s.auth,
			Array.from({ length: MINE }, (_, k) => kbNote(DOCS + k)),
		);
		for (const [ids, a] of [
			[others, rootAuth],
			[mine, s.auth],
		] as const)
			for (let i = 9; i < ids.length; i += 10) {
				const r = await fetch(`${base}/content/notes/${ids[i]}`, { method: "DELETE", headers: a });
				if (r.status !== 200) throw new Error(`soft delete: ${r.status} ${await r.text()}`);
			}
		s.live = mine.filter((_, i) => i % 10 !== 9).slice(0, 50);
		// The answers are checked before measuring: an error page is fast, not a read.
		const got = await fetch(`${base}/content/notes/${s.live[0]}`, { headers: s.auth });
		const list = await fetch(`${base}${LIST_PATH}`, { headers: s.auth });
		const listBody = (await list.json()) as { items: unknown[]; total: number };
		if (got.status !== 200 || listBody.items?.length !== 20 || listBody.total !== MINE - MINE / 10)
			throw new Error(`check failed: get ${got.status}, list ${list.status} ${JSON.stringify(listBody).slice(0, 200)}`);
		return s;
	} catch (err) {
		await stop(s);
		throw err;
	}
}

async function stop(s: Seeded): Promise<void> {
	const child = s.child;
	if (child.exitCode === null) child.kill("SIGCONT");
	await stopPlatform(child, s.dataDir);
}

/**
 * Each checkout of `dirs` started and seeded, then ROUNDS rounds of each scenario, the checkouts taking turns (the
 * others frozen with SIGSTOP meanwhile, so that their timers and workers take no CPU from the measured one).
 */
export async function readScenarios(dirs: string[] = [PLATFORM_DIR], env: Record<string, string> = {}): Promise<Array<ReadRow & { dir: string; round: number }>> {
	const platforms: Seeded[] = [];
	const rows: Array<ReadRow & { dir: string; round: number }> = [];
	const freeze = (except?: Seeded) => {
		for (const p of platforms) p.child.kill(p === except ? "SIGCONT" : "SIGSTOP");
	};
	try {
		for (const dir of dirs) {
			freeze();
			const p = await seeded(dir, env);
			platforms.push(p);
			// The seed's change events handled before this platform is frozen (else it measures its own backlog).
			console.error(`${dir}: seeded; workers idle after ${await quiet(p.child.pid!, 240_000)} ms`);
		}
		const which = (process.env.BENCH_SCENARIOS ?? "get list").split(/\s+/);
		for (let round = 1; round <= ROUNDS; round++)
			for (const scenario of which)
				for (const p of platforms) {
					freeze(p);
					const opts: autocannon.Options =
						scenario === "get"
							? { url: p.base, headers: p.auth, requests: p.live.map((id) => ({ method: "GET" as const, path: `/content/notes/${id}` })) }
							: { url: `${p.base}${LIST_PATH}`, headers: p.auth };
					const row = { dir: p.dir, round, ...(await measure(p.child.pid!, scenario, opts)) };
					console.error(JSON.stringify(row));
					rows.push(row);
				}
		return rows;
	} finally {
		for (const p of platforms) await stop(p);
	}
}

if (require.main === module)
	readScenarios(process.env.BENCH_COMPARE ? process.env.BENCH_COMPARE.split(",") : undefined)
		.then((rows) => {
			// Per checkout and scenario: the median of the rounds (the machine is shared: single runs are noisy).
			const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)];
			const keys = [...new Set(rows.map((r) => `${r.dir}\t${r.scenario}`))];
			for (const k of keys) {
				const rs = rows.filter((r) => `${r.dir}\t${r.scenario}` === k);
				console.log(
					JSON.stringify({
						store: "postgres",
						platform: rs[0].dir,
						scenario: rs[0].scenario,
						rounds: rs.length,
						rps: med(rs.map((r) => r.rps)),
						p99: med(rs.map((r) => r.p99)),
						cpuUsPerRequest: med(rs.map((r) => r.cpuUsPerRequest)),
						cpuUsMin: Math.min(...rs.map((r) => r.cpuUsPerRequest)),
						userUsPerRequest: med(rs.map((r) => r.userUsPerRequest)),
						non2xx: rs.reduce((a, r) => a + r.non2xx, 0),
					}),
				);
			}
		})
		.catch((err) => {
			console.error(err);
			process.exit(1);
		});
