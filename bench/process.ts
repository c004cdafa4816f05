/** What every bench scenario needs around a platform process: a free port, waiting for it, the root's token. */
import { spawn, type ChildProcess } from "child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "fs";
import os from "os";
import { createServer, type AddressInfo } from "net";
import path from "path";

export function freePort(): Promise<number> {
	return new Promise((resolve) => {
		const s = createServer();
		s.listen(0, "127.0.0.1", () => {
			const p = (s.address() as AddressInfo).port;
			s.close(() => resolve(p));
		});
	});
}

/** Resolves once `url` answers below 500 (the platform is ready); throws after `ms`. */
export async function waitFor(url: string, ms = 30_000): Promise<void> {
	const until = Date.now() + ms;
	while (Date.now() < until) {
		try {
			if ((await fetch(url)).status < 500) return;
		} catch {
			/* not yet */
		}
		await new Promise((r) => setTimeout(r, 200));
	}
	throw new Error(`${url} did not answer`);
}

/** The seeded root user's access token, from the platform's DATA_DIR/bootstrap.json. */
export async function rootToken(base: string, dataDir: string): Promise<string> {
	const cred = JSON.parse(readFileSync(path.join(dataDir, "bootstrap.json"), "utf8"));
	const r = (await fetch(`${base}/auth/token`, {
		method: "POST",
		headers: { "content-type": "application/json" },
		body: JSON.stringify({ grant_type: "password", client_id: cred.client_id, username: cred.username, password: cred.password }),
	}).then((x) => x.json())) as { data: { access_token: string } };
	return r.data.access_token;
}

/**
 * A process and its descendants (tsx's node, the embedded PostgreSQL): name and CPU ticks (user + system) of each,
 * and of its children that ended (`reaped`: cutime + cstime, what the process collected when it waited for them).
 */
export function processTree(pid: number): Map<number, { comm: string; ticks: number; reaped: number }> | undefined {
	const stats = new Map<number, { ppid: number; ticks: number; reaped: number; comm: string }>();
	try {
		for (const d of readdirSync("/proc")) {
			if (!/^\d+$/.test(d)) continue;
			try {
				const s = readFileSync(`/proc/${d}/stat`, "utf8");
				const f = s.slice(s.lastIndexOf(") ") + 2).split(" ");
				stats.set(Number(d), {
					ppid: Number(f[1]),
					ticks: Number(f[11]) + Number(f[12]),
					reaped: Number(f[13]) + Number(f[14]),
					comm: s.slice(s.indexOf("(") + 1, s.lastIndexOf(")")),
				});
			} catch {
				/* gone meanwhile */
			}
		}
	} catch {
		return undefined;
	}
	if (!stats.has(pid)) return undefined;
	const tree = new Map([[pid, stats.get(pid)!]]);
	for (let grew = true; grew;) {
		grew = false;
		for (const [p, s] of stats)
			if (!tree.has(p) && tree.has(s.ppid)) {
				tree.set(p, s);
				grew = true;
			}
	}
	return tree;
}

/**
 * CPU ticks (1/100 s) of the platform process itself and of the PostgreSQL server processes below it, those that
 * ended included (the postmaster collects its ended backends' time: a pool that closes idle connections during a run
 * would otherwise take their time out of the sum).
 */
export function cpuSplit(pid: number): { node: number; pg: number } {
	const tree = processTree(pid) ?? new Map();
	let pg = 0;
	for (const [p, s] of tree) if (p !== pid && s.comm.startsWith("postgres")) pg += s.ticks + s.reaped;
	return { node: tree.get(pid)?.ticks ?? 0, pg };
}

/**
 * CPU time (user + system, in clock ticks) a process and its descendants (tsx's node, the embedded PostgreSQL) have
 * used so far; undefined where /proc is missing.
 */
export function cpuTicksOf(pid: number): number | undefined {
	const tree = processTree(pid);
	if (!tree) return undefined;
	let ticks = 0;
	for (const s of tree.values()) ticks += s.ticks;
	return ticks;
}

/**
 * Waits until a platform process tree is nearly idle (under 30 % of a core over a second, twice in a row: an idle
 * platform still polls its stream, deliveries and timers), at most `ms`: after seeding, the workers are still
 * handling the seed's change events, which would be measured with the scenario that follows (on PostgreSQL they
 * write to the same database the reads use). Returns the wait in ms.
 */
export async function quiet(pid: number, ms = 60_000): Promise<number> {
	const start = Date.now();
	let calm = 0;
	let last = cpuTicksOf(pid);
	while (last !== undefined && calm < 2 && Date.now() - start < ms) {
		await new Promise((r) => setTimeout(r, 1000));
		const now = cpuTicksOf(pid);
		if (now === undefined) break;
		// Clock ticks are 1/100 s: 30 ticks in a second is 30 % of a core.
		calm = now - last < 30 ? calm + 1 : 0;
		last = now;
	}
	return Date.now() - start;
}

/** The platform checkout a scenario runs (BENCH_PLATFORM_DIR: another worktree, for a before/after on one machine). */
export const PLATFORM_DIR = process.env.BENCH_PLATFORM_DIR ?? path.resolve(__dirname, "..");

/**
 * `start.ts` of PLATFORM_DIR (or `dir`) in a child process with `env` on top of this one's (LOG_LEVEL warn); PROFILE=dir runs it
 * under `node --cpu-prof` into dir (read with bench/cpuprofile.ts).
 */
export function spawnPlatform(env: Record<string, string>, dir = PLATFORM_DIR): ChildProcess {
	const prof = process.env.PROFILE ? ["--cpu-prof", `--cpu-prof-dir=${process.env.PROFILE}`] : [];
	return spawn(process.execPath, [...prof, "--import", "tsx", "start.ts"], {
		cwd: dir,
		env: { ...process.env, LOG_LEVEL: "warn", ...env },
		stdio: ["ignore", "ignore", "inherit"],
	});
}

/** SIGTERM to a platform child (unless it has already exited), then its DATA_DIR removed. */
export async function stopPlatform(child: ChildProcess, dataDir?: string): Promise<void> {
	if (child.exitCode === null && child.signalCode === null) await new Promise((r) => (child.once("exit", r), child.kill("SIGTERM")));
	if (dataDir) rmSync(dataDir, { recursive: true, force: true, maxRetries: 5, retryDelay: 200 });
}

/**
 * A scenario run alone (`npx tsx bench/<scenario>.ts`): a platform of its own in a child process (PLATFORM_DIR) on a
 * free port with a fresh DATA_DIR, `run` against it, then the platform stopped and its data removed.
 */
export function runAlone(name: string, run: (base: string, dataDir: string) => Promise<unknown>): void {
	(async () => {
		const dataDir = mkdtempSync(path.join(os.tmpdir(), `bench-${name}-`));
		const port = await freePort();
		const base = `http://127.0.0.1:${port}`;
		const child = spawnPlatform({ PORT: String(port), DATA_DIR: dataDir });
		try {
			await waitFor(`${base}/status`, 60_000);
			await run(base, dataDir);
		} finally {
			await stopPlatform(child, dataDir);
		}
	})().catch((err) => {
		console.error(err);
		process.exit(1);
	});
}
