/**
 * Issue 13 item 7: process hygiene of `npm start`. A restart after a crash (SIGKILL of the platform: its embedded
 * PostgreSQL survives with its postmaster.pid) works with no manual step; a stale postmaster.pid is removed; SIGTERM
 * to npm's process stops node and the embedded PostgreSQL, in order, each step logged, without the workers polling
 * a stopped PostgreSQL; Ctrl-C in a terminal (one SIGINT from the terminal, one forwarded by npm) is one ordered stop
 * with exit code 0; the start is quiet (no route lines, no "X.health is not registered").
 */
import { spawn, execFileSync, type ChildProcess } from "child_process";
import { existsSync, readFileSync, rmSync, writeFileSync } from "fs";
import path from "path";
import { tempDir } from "../helpers/platform";
import { freePort } from "../helpers/ports";
import { sleep } from "../helpers/wait";
import { alive } from "../../runtime/pids";

jest.setTimeout(240_000);

const ROOT = path.resolve(__dirname, "../..");
const childrenOf = (pid: number): number[] => {
	try {
		return execFileSync("ps", ["-o", "pid=", "--ppid", String(pid)], { encoding: "utf8" })
			.split("\n")
			.map(Number)
			.filter(Boolean);
	} catch {
		return [];
	}
};
async function until(what: string, check: () => boolean | Promise<boolean>, ms: number): Promise<void> {
	const end = Date.now() + ms;
	while (Date.now() < end) {
		if (await check()) return;
		await sleep(200);
	}
	throw new Error(`timed out: ${what}`);
}

interface Run {
	npm: ChildProcess;
	out: () => string;
	exited: Promise<number | null>;
}

let dataDir: string;
let port: number;
const started: Run[] = [];

/** `detached`: npm leads a process group of its own, as a terminal's foreground job does (Ctrl-C signals the group). */
function npmStart(detached = false): Run {
	const npm = spawn("npm", ["start"], {
		cwd: ROOT,
		detached,
		// The default store (the embedded PostgreSQL), whatever the test's environment names.
		env: { ...process.env, DOCUMENT_STORE: undefined, DATABASE_URL: undefined, PORT: String(port), HOST: "127.0.0.1", DATA_DIR: dataDir, MQTT_PORT: "0", LOG_LEVEL: "info" },
		stdio: ["ignore", "pipe", "pipe"],
	});
	let text = "";
	npm.stdout!.on("data", (c) => (text += c));
	npm.stderr!.on("data", (c) => (text += c));
	const exited = new Promise<number | null>((r) => npm.once("exit", (code) => r(code)));
	const run = { npm, out: () => text, exited };
	started.push(run);
	return run;
}

async function healthy(run: Run): Promise<void> {
	await until(
		`GET /status 200 (log: ${run.out().slice(-3000)})`,
		async () => {
			if (run.npm.exitCode !== null) throw new Error(`npm start exited ${run.npm.exitCode}: ${run.out().slice(-3000)}`);
			// The gateway listens before the last service has started: the start is done when it says so.
			if (!run.out().includes("Platform gateway listening on")) return false;
			try {
				return (await fetch(`http://127.0.0.1:${port}/status`)).status === 200;
			} catch {
				return false;
			}
		},
		90_000,
	);
}

const pgPid = () => Number(readFileSync(path.join(dataDir, "postgres", "postmaster.pid"), "utf8").split("\n")[0]);

beforeAll(async () => {
	dataDir = tempDir("hygiene-");
	port = await freePort();
});
afterAll(async () => {
	// Whatever a failed test left: only the processes this suite started, by their pids.
	for (const r of started) for (const pid of [...childrenOf(r.npm.pid!), r.npm.pid!]) if (alive(pid)) process.kill(pid, "SIGKILL");
	const pidFile = path.join(dataDir, "postgres", "postmaster.pid");
	if (existsSync(pidFile)) {
		const pid = pgPid();
		if (pid > 1 && alive(pid) && readFileSync(`/proc/${pid}/cmdline`, "utf8").includes(dataDir)) process.kill(pid, "SIGKILL");
	}
	rmSync(dataDir, { recursive: true, force: true });
});

describe("npm start: crash, restart, stop", () => {
	let first: Run;
	let orphan: number;

	test("the start is quiet: no route lines, no 'is not registered' warnings", async () => {
		first = npmStart();
		await healthy(first);
		await sleep(1500);
		const out = first.out();
		expect(out).toContain("Platform gateway listening on");
		expect(out).not.toMatch(/is not registered/);
		expect(out).not.toMatch(/ => [a-z]+\.[a-z]/); // moleculer-web's "GET /x => service.action" lines
	});

	test("after SIGKILL of the platform, npm start on the same DATA_DIR works (the orphan PostgreSQL is stopped)", async () => {
		const node = childrenOf(first.npm.pid!)[0];
		expect(node).toBeGreaterThan(0);
		orphan = pgPid();
		expect(alive(orphan)).toBe(true);
		process.kill(node, "SIGKILL");
		await first.exited;
		// The crash leaves the embedded PostgreSQL running with its postmaster.pid: the situation to recover from.
		expect(alive(orphan)).toBe(true);
		const second = npmStart();
		await healthy(second);
		expect(alive(orphan)).toBe(false);
		expect(pgPid()).not.toBe(orphan);
		expect(second.out()).toContain(`a server of ${path.join(dataDir, "postgres")} still runs (pid ${orphan}`);
		expect(second.out()).not.toMatch(/Cannot read properties of undefined/);
		first = second;
	});

	test("SIGTERM to npm's process stops node and PostgreSQL, in order, each step logged", async () => {
		const node = childrenOf(first.npm.pid!)[0];
		const pg = pgPid();
		first.npm.kill("SIGTERM");
		await until("node exits", () => !alive(node), 60_000);
		await until("PostgreSQL exits", () => !alive(pg), 10_000);
		await first.exited;
		const out = first.out();
		// The embedded PostgreSQL's last users are the event streams (the outbox and the groups' positions, on the default
		// store): it stops after the services and workers, before the streams report closed; the cache closes last.
		const steps = [
			"SIGTERM received: stopping",
			"stop: gateway closed",
			"stop: services and workers stopped",
			`embedded PostgreSQL stopped (pid ${pg})`,
			"stop: event streams closed",
			"stop: cache closed",
		];
		const at = steps.map((s) => out.indexOf(s));
		expect(at.every((i) => i >= 0)).toBe(true);
		expect([...at].sort((a, b) => a - b)).toEqual(at);
		expect(out).not.toMatch(/ECONNREFUSED/);
		expect(existsSync(path.join(dataDir, "postgres", "postmaster.pid"))).toBe(false);
	});

	test("Ctrl-C in a terminal (SIGINT to npm's process group, npm forwarding its own) stops in order and exits 0", async () => {
		const run = npmStart(true);
		await healthy(run);
		const node = childrenOf(run.npm.pid!)[0];
		const pg = pgPid();
		process.kill(-run.npm.pid!, "SIGINT");
		expect(await run.exited).toBe(0);
		await until("node exits", () => !alive(node), 30_000);
		await until("PostgreSQL exits", () => !alive(pg), 10_000);
		const out = run.out();
		expect(out).not.toContain("again while stopping");
		const at = ["SIGINT received: stopping", "stop: services and workers stopped", `embedded PostgreSQL stopped (pid ${pg})`, "stop: cache closed"].map((s) => out.indexOf(s));
		expect(at.every((i) => i >= 0)).toBe(true);
		expect([...at].sort((a, b) => a - b)).toEqual(at);
	});

	test("a stale postmaster.pid (its process is gone) is removed at the start", async () => {
		const pidFile = path.join(dataDir, "postgres", "postmaster.pid");
		writeFileSync(pidFile, `4194000\n${path.join(dataDir, "postgres")}\n1700000000\n5432\n`);
		const third = npmStart();
		await healthy(third);
		expect(third.out()).toContain(`removed the stale ${pidFile}`);
		third.npm.kill("SIGTERM");
		await third.exited;
		await until("node exits", () => childrenOf(third.npm.pid!).length === 0, 30_000);
	});
});
