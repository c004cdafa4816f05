/**
 * Create load as the peer bench runs it (`npx tsx bench/create.ts`): a platform child process (PostgreSQL:
 * DATABASE_URL as in the environment, else the embedded server), a normal user with read and write grants on content:notes, POST /content/notes of a 1 KB note
 * with 50 connections, then the time the in-process workers take to consume the backlog (the child's CPU falls
 * idle). PROFILE=dir profiles the child, BENCH_PLATFORM_DIR runs another checkout (bench/process.ts).
 */
import type { ChildProcess } from "child_process";
import { mkdtempSync, readFileSync } from "fs";
import os from "os";
import path from "path";
import autocannon from "autocannon";
import { cpuSplit, freePort, rootToken, spawnPlatform, waitFor, stopPlatform } from "./process";

const DURATION = Number(process.env.BENCH_DURATION ?? 10);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 50);

export interface CreateRow {
	rps: number;
	p50: number;
	p99: number;
	non2xx: number;
	/** Seconds from the end of the load until the workers went idle. */
	drainS: number;
	/**
	 * CPU time the platform process used per create, request and workers' consumption included (load and drain):
	 * less sensitive than req/s to other jobs sharing the machine.
	 */
	cpuMsPerCreate: number;
	/** The same for the embedded PostgreSQL server's processes below the platform; 0 with DATABASE_URL. */
	pgCpuMsPerCreate: number;
}

/** ~900 characters of words, about 1 KB as JSON with its title: the peer bench's note. */
export function kbNote(k: number): Record<string, unknown> {
	const words = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore et dolore".split(" ");
	let s = "";
	for (let i = 0; s.length < 900; i++) s += `${words[(i * 7 + k) % words.length]} `;
	return { title: `note ${k}`, content: s.slice(0, 900), props: { n: k } };
}

/** CPU ticks (user + system) the process has used so far. */
function ticks(pid: number): number {
	const f = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
	return Number(f[11]) + Number(f[12]);
}

/**
 * Resolves once the process used under 10 % of a core in each of two seconds (the workers caught up; an idle
 * platform's timers use a few %); the seconds it was busy before.
 */
export async function idle(pid: number, maxS = 180): Promise<number> {
	const t0 = Date.now();
	let last = ticks(pid);
	let quiet = 0;
	while (Date.now() - t0 < maxS * 1000) {
		await new Promise((r) => setTimeout(r, 1000));
		const now = ticks(pid);
		quiet = now - last < 10 ? quiet + 1 : 0;
		last = now;
		if (quiet === 2) return Math.max(0, (Date.now() - t0 - 2000) / 1000);
	}
	return maxS;
}

/** Every answer this reads is one document's: a user, a grant, a token. */
async function post(base: string, p: string, body: unknown, headers: Record<string, string>): Promise<{ data: { id: string; access_token: string } }> {
	const r = await fetch(`${base}${p}`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });
	if (r.status !== 200) throw new Error(`${p}: ${r.status} ${await r.text()}`);
	return r.json() as Promise<{ data: { id: string; access_token: string } }>;
}

/** A user holding read and write grants on content:notes (as the peer bench seeds it); its access token. */
export async function noteWriter(base: string, rootAuth: Record<string, string>, domain: string, clientId: string): Promise<string> {
	const u = await post(base, "/identity/users", { username: "bench-writer", password: "Bench#writer-1" }, rootAuth);
	for (const action of ["read", "write"]) await post(base, "/auth/grants", { subject: `${u.data.id}@${domain}`, action, object: "content:notes" }, rootAuth);
	const login = await post(base, "/auth/token", { grant_type: "password", client_id: clientId, username: "bench-writer", password: "Bench#writer-1" }, {});
	return login.data.access_token;
}

/** The platform at `base` (its DATA_DIR, its process) with a note writer, once its workers are idle: the writer's token. */
export async function createSetup(base: string, dataDir: string, pid: number): Promise<string> {
	await waitFor(`${base}/status`, 120_000);
	const boot = JSON.parse(readFileSync(path.join(dataDir, "bootstrap.json"), "utf8"));
	const rootAuth = { authorization: `Bearer ${await rootToken(base, dataDir)}` };
	const token = await noteWriter(base, rootAuth, boot.domain ?? "root.local", boot.client_id);
	await idle(pid);
	return token;
}

/** The create load: POST /content/notes of a 1 KB note, CONNECTIONS connections for DURATION seconds. */
export function createLoad(base: string, token: string): Promise<autocannon.Result> {
	return autocannon({
		url: `${base}/content/notes`,
		method: "POST",
		connections: CONNECTIONS,
		duration: DURATION,
		headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
		body: JSON.stringify(kbNote(9999)),
	});
}

export async function createScenario(env: Record<string, string> = {}): Promise<CreateRow> {
	const dataDir = mkdtempSync(path.join(os.tmpdir(), "bench-create-"));
	const port = await freePort();
	const base = `http://127.0.0.1:${port}`;
	const child: ChildProcess = spawnPlatform({ PORT: String(port), DATA_DIR: dataDir, ...env });
	try {
		const token = await createSetup(base, dataDir, child.pid!);
		const cpu0 = ticks(child.pid!);
		const pg0 = cpuSplit(child.pid!).pg;
		const r = await createLoad(base, token);
		const drainS = await idle(child.pid!);
		// Clock ticks are 10 ms; the two quiet seconds idle() waited for are left in (a few ticks).
		const perCreate = (t: number) => Math.round((t * 10 * 1000) / Math.max(1, r.requests.total)) / 1000;
		const cpuMsPerCreate = perCreate(ticks(child.pid!) - cpu0);
		const pgCpuMsPerCreate = perCreate(cpuSplit(child.pid!).pg - pg0);
		return { rps: Math.round(r.requests.average), p50: r.latency.p50, p99: r.latency.p99, non2xx: r.non2xx + r.errors, drainS, cpuMsPerCreate, pgCpuMsPerCreate };
	} finally {
		await stopPlatform(child, dataDir);
	}
}

if (require.main === module)
	createScenario()
		.then((row) => console.log(JSON.stringify({ store: "postgres", ...row })))
		.catch((err) => {
			console.error(err);
			process.exit(1);
		});
