/**
 * A DATA_DIR with an embedded store (the embedded PostgreSQL) belongs to one platform process: a second one would stop
 * the first's PostgreSQL as an orphan, and acknowledged writes would be lost. The process that holds the directory listens on a
 * Unix domain socket; binding is exclusive while it lives and the kernel takes it back when it dies (no pid file to
 * trust), so a crash never leaves the directory held.
 *
 *  - `DATA_DIR/platform.sock`: where a process finds the holder (it connects; the holder answers with one JSON line,
 *    `{"pid": <n>}`), also across containers sharing the directory, and the operator console's channel to the
 *    running platform: a console that sends `{"console":true}` next gets `{"console":true}` and a session
 *    (runtime/repl.ts), or `{"refused": <why>}`. The socket is 0600 in a directory of its owner's only: only the owner
 *    attaches (never through the abstract socket below, which any local user can reach). A path longer than a socket
 *    path may be (107 bytes), or a file system without sockets, takes `<tmpdir>/platform-<uid>/<hash of the real
 *    path>.sock`. Where it is, is recorded in `DATA_DIR/platform.lock` (`{"pid", "socket"}`, 0600), written once held.
 *  - On Linux, first an abstract socket named by a hash of the real path: exclusive and released by the kernel, so
 *    that two processes that find the same stale `platform.sock` (its holder was killed) cannot both take it over.
 *
 * A process that finds the directory held exits with `DATA_DIR <path> is in use by pid <n>` having written nothing.
 * The lock is the very first thing a node takes once DATA_DIR is known (start.ts, platform.ts, the runner's config)
 * and the last it gives back (Platform.stop). Nodes that keep no store in DATA_DIR (documents and relational store on
 * a DATABASE_URL) take none: their replicas may share a directory (docs/production.md).
 */
import { createHash } from "crypto";
import { accessSync, chmodSync, constants, lstatSync, mkdirSync, readFileSync, realpathSync, renameSync, rmSync, unlinkSync, writeFileSync } from "fs";
import net from "net";
import os from "os";
import path from "path";
import { privateDataDir, StartupError, type PlatformConfig } from "./config";

export const SOCKET_FILE = "platform.sock";
export const RECORD_FILE = "platform.lock";

/** The refusal; start.ts and the runner print its message alone. */
export class DataDirInUse extends StartupError {
	constructor(
		readonly dataDir: string,
		readonly pid: number | undefined,
	) {
		super(`DATA_DIR ${dataDir} is in use by pid ${pid ?? "unknown"}`);
	}
}

export interface DataDirLock {
	readonly dataDir: string;
	/** The socket a console (or a second process) connects to. */
	readonly socket: string;
	/**
	 * From now on a console that asks on the socket file is handed to `session` (its connection, and what it sent after
	 * its request); before, it is refused (the platform is still starting).
	 */
	serveConsoles(session: ConsoleHandler): void;
	/** Gives the directory back: the sockets close (the file is removed, consoles are cut) and so does the record. Idempotent. */
	release(): Promise<void>;
}

/** Serves one attached console on `conn`; `rest` is what the console sent after its request line. */
export type ConsoleHandler = (conn: net.Socket, rest: Buffer) => void;

/** The console's request, and the holder's acceptance, after the pid line. */
const CONSOLE_HELLO = `${JSON.stringify({ console: true })}\n`;

/** Whether a node keeps a store of its own in DATA_DIR: the embedded PostgreSQL (no DATABASE_URL). */
export function keepsStoreIn(cfg: Pick<PlatformConfig, "databaseUrl">): boolean {
	return !cfg.databaseUrl;
}

/** Longest socket path (sun_path less its terminating NUL). */
const MAX_SOCKET_PATH = process.platform === "linux" ? 107 : 103;
/** How long a holder may take to say its pid (its event loop may be busy); the connection alone proves it lives. */
const ANSWER_MS = 3000;

const hashOf = (real: string) => createHash("sha256").update(real).digest("hex");
const fits = (p: string) => Buffer.byteLength(p) <= MAX_SOCKET_PATH;

/** The socket outside DATA_DIR, in a directory of this user's only. */
function fallbackSocket(real: string): string {
	const dir = path.join(os.tmpdir(), `platform-${process.getuid?.() ?? "u"}`);
	return path.join(dir, `${hashOf(real).slice(0, 32)}.sock`);
}

function privateSocketDir(file: string): void {
	const dir = path.dirname(file);
	mkdirSync(dir, { recursive: true, mode: 0o700 });
	const st = lstatSync(dir);
	if (!st.isDirectory() || (typeof process.getuid === "function" && st.uid !== process.getuid()) || (st.mode & 0o077) !== 0)
		throw new StartupError(`${dir} (where the socket of a DATA_DIR with a long path goes) must be a directory of this user's only`);
	if (!fits(file)) throw new StartupError(`the socket path ${file} is longer than ${MAX_SOCKET_PATH} bytes: set TMPDIR to a shorter directory, or use a shorter DATA_DIR`);
}

interface LockRecord {
	pid?: number;
	socket?: string;
}

function readRecord(dataDir: string): LockRecord {
	try {
		return JSON.parse(readFileSync(path.join(dataDir, RECORD_FILE), "utf8")) as LockRecord;
	} catch {
		return {};
	}
}

/** A connection to `socket`; `undefined` when nobody listens there (no file, a stale one) or it does not accept in `ms`. */
function connectTo(socket: string, ms = ANSWER_MS): Promise<net.Socket | undefined> {
	return new Promise((resolve) => {
		const conn = net.connect(socket);
		const failed = () => {
			clearTimeout(timer);
			conn.destroy();
			resolve(undefined);
		};
		const timer = setTimeout(failed, ms);
		// ECONNREFUSED (a socket file nobody listens on), ENOENT: not held there.
		conn.once("error", failed);
		conn.once("connect", () => {
			clearTimeout(timer);
			conn.off("error", failed);
			conn.on("error", () => undefined);
			resolve(conn);
		});
	});
}

/**
 * The first line `conn` sends (at most `max` bytes) and what came after it, the connection paused; `undefined` when it
 * ends, fails or stays silent `ms` first.
 */
function firstLine(conn: net.Socket, ms: number, max = 4096): Promise<{ line: string; rest: Buffer } | undefined> {
	return new Promise((resolve) => {
		let text = Buffer.alloc(0);
		const done = (found?: { line: string; rest: Buffer }) => {
			clearTimeout(timer);
			conn.off("data", onData).off("end", onEnd).off("close", onEnd);
			conn.pause();
			resolve(found);
		};
		const onEnd = () => done();
		const onData = (c: Buffer) => {
			text = Buffer.concat([text, c]);
			const eol = text.indexOf(10);
			if (eol >= 0) done({ line: text.subarray(0, eol).toString("utf8"), rest: text.subarray(eol + 1) });
			else if (text.length > max) done();
		};
		const timer = setTimeout(onEnd, ms);
		conn.on("data", onData).once("end", onEnd).once("close", onEnd);
		conn.resume();
	});
}

/** A line's JSON object, or `{}`. */
function parsed(line: string | undefined): Record<string, unknown> {
	try {
		const v = JSON.parse(line ?? "");
		return v && typeof v === "object" ? v : {};
	} catch {
		return {};
	}
}

/**
 * Connects to `socket`: `undefined` when nobody listens there, else the holder with its pid (the record's when the
 * holder does not answer in time: the connection alone proves it lives).
 */
async function holderAt(socket: string, record: LockRecord): Promise<{ pid?: number } | undefined> {
	const conn = await connectTo(socket);
	if (!conn) return undefined;
	const pid = parsed((await firstLine(conn, ANSWER_MS))?.line).pid;
	conn.destroy();
	return { pid: Number.isInteger(pid) ? (pid as number) : record.pid };
}

/** Listens on `where`; false when it is taken (EADDRINUSE). */
function listen(server: net.Server, where: string): Promise<boolean> {
	return new Promise((resolve, reject) => {
		const onError = (err: NodeJS.ErrnoException) => (err.code === "EADDRINUSE" ? resolve(false) : reject(err));
		server.once("error", onError);
		server.listen(where, () => {
			server.off("error", onError);
			server.unref();
			resolve(true);
		});
	});
}

/** What the holder answers on every connection: its pid. */
const pidLine = () => `${JSON.stringify({ pid: process.pid })}\n`;

/** A server whose connections `release` can cut (a server closes only once its last connection has). */
function lockServer(onConnection: (conn: net.Socket) => void, open: Set<net.Socket>): net.Server {
	return net.createServer((conn) => {
		open.add(conn);
		conn.once("close", () => open.delete(conn));
		conn.on("error", () => undefined);
		onConnection(conn);
	});
}

/**
 * The socket file's answer: the pid line, then, to a console that asks next (within ANSWER_MS), a session when the
 * platform serves consoles, else a refusal. Anything else ends the connection.
 */
async function greetOrAttach(conn: net.Socket, consoles: () => ConsoleHandler | undefined): Promise<void> {
	conn.write(pidLine());
	const first = await firstLine(conn, ANSWER_MS);
	const session = consoles();
	if (!first || parsed(first.line).console !== true || conn.destroyed) return void conn.end();
	if (!session) return void conn.end(`${JSON.stringify({ refused: "the platform on this DATA_DIR is still starting: try again in a moment" })}\n`);
	conn.write(CONSOLE_HELLO);
	session(conn, first.rest);
}

const close = (server: net.Server) => new Promise<void>((resolve) => server.close(() => resolve()));

/**
 * Takes DATA_DIR for this process, or throws DataDirInUse naming the holder. `undefined` for a node that keeps no
 * store there (keepsStoreIn). A DATA_DIR that is missing is created (0700), one this user may not write is refused
 * (runtime/config-files.ts says how): neither can be held by anyone.
 */
export async function lockDataDir(cfg: Pick<PlatformConfig, "dataDir" | "databaseUrl">): Promise<DataDirLock | undefined> {
	if (!keepsStoreIn(cfg)) return undefined;
	const dataDir = cfg.dataDir;
	try {
		accessSync(dataDir, constants.W_OK | constants.X_OK);
	} catch {
		privateDataDir(dataDir);
	}
	const real = realpathSync(dataDir);
	const record = readRecord(dataDir);
	const held: net.Server[] = [];
	const open = new Set<net.Socket>();
	let consoles: ConsoleHandler | undefined;
	const serve = { abstract: lockServer((conn) => conn.end(pidLine()), open), file: () => lockServer((conn) => void greetOrAttach(conn, () => consoles), open) };
	const socket = await bind(dataDir, real, record, held, serve).catch(async (err) => {
		await Promise.all(held.map(close));
		throw err;
	});
	writeRecord(dataDir, { pid: process.pid, socket });

	let released: Promise<void> | undefined;
	return {
		dataDir,
		socket,
		serveConsoles(session) {
			consoles = session;
		},
		release() {
			return (released ??= (async () => {
				consoles = undefined;
				// Closing a server removes its socket file (Node unlinks it), once its connections (consoles) are gone.
				for (const conn of open) conn.destroy();
				await Promise.all(held.map(close));
				if (readRecord(dataDir).pid === process.pid) rmSync(path.join(dataDir, RECORD_FILE), { force: true });
			})());
		},
	};
}

/**
 * Where a holder of DATA_DIR may listen, in the order to try: the recorded socket when it is this directory's (a copy of
 * a DATA_DIR carries the record of the original's holder; under another TMPDIR than this process's, the fallback has
 * another directory but the same name), `DATA_DIR/platform.sock` when its path fits, the fallback.
 */
function socketsOf(dataDir: string, real: string, record: LockRecord): string[] {
	const primary = path.join(dataDir, SOCKET_FILE);
	const fallback = fallbackSocket(real);
	const recorded = record.socket && path.basename(record.socket) === path.basename(fallback) ? record.socket : undefined;
	return [...new Set([recorded, fits(primary) ? primary : undefined, fallback])].filter((s): s is string => !!s);
}

/**
 * Binds the abstract socket (Linux) and the socket file into `held`; throws DataDirInUse when another process holds
 * them. `serve`: the abstract socket's server (it answers the pid only), and a new server for the socket file.
 */
async function bind(dataDir: string, real: string, record: LockRecord, held: net.Server[], serve: { abstract: net.Server; file: () => net.Server }): Promise<string> {
	const refused = (holder: { pid?: number } | undefined) => new DataDirInUse(dataDir, holder?.pid);
	if (process.platform === "linux") {
		const name = `\0platform-datadir-${hashOf(real)}`;
		if (!(await listen(serve.abstract, name))) throw refused(await holderAt(name, record));
		held.push(serve.abstract);
	}
	const primary = path.join(dataDir, SOCKET_FILE);
	const fallback = fallbackSocket(real);
	// A holder the abstract socket cannot see (another network namespace: a container sharing the directory).
	for (const s of socketsOf(dataDir, real, record)) {
		const holder = await holderAt(s, record);
		if (holder) throw refused(holder);
	}
	let socket = fits(primary) ? primary : fallback;
	for (let attempt = 0; ; attempt++) {
		const server = serve.file();
		try {
			if (socket === fallback) privateSocketDir(fallback);
			if (await listen(server, socket)) {
				held.push(server);
				break;
			}
		} catch (err) {
			// A file system without sockets (some network and shared-folder mounts): the socket goes outside.
			if (err instanceof StartupError || socket === fallback) throw err;
			socket = fallback;
			continue;
		}
		// A stale file (its holder was killed): removed and bound again. Elsewhere than on Linux (no abstract socket),
		// a holder may also have come since the check.
		const holder = await holderAt(socket, record);
		if (holder || attempt >= 3) throw refused(holder);
		rmSync(socket, { force: true });
	}
	// Like every file of DATA_DIR, its owner's only (connecting needs write permission on it).
	chmodSync(socket, 0o600);
	return socket;
}

/** A console's channel to the platform holding DATA_DIR: the connection once accepted, and what came after the acceptance. */
export interface ConsoleLink {
	pid?: number;
	socket: string;
	conn: net.Socket;
	rest: Buffer;
}

/**
 * Asks the platform holding DATA_DIR for a console through its socket file (the pid line, the request, the
 * acceptance): `undefined` when no process listens there (none runs on DATA_DIR, or the node keeps no store there),
 * `{ refused }` with the holder's reason (still starting, or a version that serves no console).
 */
export async function attachConsole(cfg: Pick<PlatformConfig, "dataDir" | "databaseUrl">): Promise<ConsoleLink | { refused: string } | undefined> {
	if (!keepsStoreIn(cfg)) return undefined;
	let real: string;
	try {
		real = realpathSync(cfg.dataDir);
	} catch {
		return undefined; // no DATA_DIR: nobody holds it
	}
	const record = readRecord(cfg.dataDir);
	for (const socket of socketsOf(cfg.dataDir, real, record)) {
		const conn = await connectTo(socket);
		if (!conn) continue;
		const pid = parsed((await firstLine(conn, ANSWER_MS))?.line).pid;
		const holder = `the platform on DATA_DIR ${cfg.dataDir} (pid ${Number.isInteger(pid) ? pid : (record.pid ?? "unknown")})`;
		conn.write(CONSOLE_HELLO);
		const answer = await firstLine(conn, ANSWER_MS);
		const reply = parsed(answer?.line);
		if (answer && reply.console === true) return { pid: pid as number | undefined, socket, conn, rest: answer.rest };
		conn.destroy();
		return { refused: `${holder} refused the console: ${typeof reply.refused === "string" ? reply.refused : "it serves none (an older version?)"}` };
	}
	return undefined;
}

/** The record, replaced whole (a reader never sees half of it); best effort: the socket is the lock. */
function writeRecord(dataDir: string, value: LockRecord): void {
	const file = path.join(dataDir, RECORD_FILE);
	const tmp = `${file}.${process.pid}`;
	try {
		writeFileSync(tmp, JSON.stringify(value), { mode: 0o600 });
		renameSync(tmp, file);
	} catch {
		try {
			unlinkSync(tmp);
		} catch {
			/* never written */
		}
	}
}
