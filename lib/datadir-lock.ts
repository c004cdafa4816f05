/**
 * A DATA_DIR with an embedded store (NeDB files, the embedded PostgreSQL) belongs to one platform process: a second
 * one would compact the NeDB files under the first (which goes on appending to unlinked files) and stop the first's
 * PostgreSQL as an orphan, and acknowledged writes would be lost. The process that holds the directory listens on a
 * Unix domain socket; binding is exclusive while it lives and the kernel takes it back when it dies (no pid file to
 * trust), so a crash never leaves the directory held.
 *
 *  - `DATA_DIR/platform.sock`: where a process finds the holder (it connects; the holder answers with one JSON line,
 *    `{"pid": <n>}`), also across containers sharing the directory, and later the operator console's channel to the
 *    running platform (the directory is its owner's only). A path longer than a socket path may be (107 bytes), or
 *    a file system without sockets, takes `<tmpdir>/platform-<uid>/<hash of the real path>.sock`. Where it is, is
 *    recorded in `DATA_DIR/platform.lock` (`{"pid", "socket"}`, 0600), written once held.
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
	constructor(readonly dataDir: string, readonly pid: number | undefined) {
		super(`DATA_DIR ${dataDir} is in use by pid ${pid ?? "unknown"}`);
	}
}

export interface DataDirLock {
	readonly dataDir: string;
	/** The socket a console (or a second process) connects to. */
	readonly socket: string;
	/** Gives the directory back: the sockets close (the file is removed) and so does the record. Idempotent. */
	release(): Promise<void>;
}

/** Whether a node keeps a store of its own in DATA_DIR: NeDB documents, or the embedded PostgreSQL (no DATABASE_URL). */
export function keepsStoreIn(cfg: Pick<PlatformConfig, "databaseUrl" | "mongoUri" | "documentStore">): boolean {
	return !cfg.databaseUrl || (!cfg.mongoUri && cfg.documentStore !== "postgres");
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

/**
 * Connects to `socket`: `undefined` when nobody listens there (no file, or a stale one), else the holder with its pid
 * (the record's when the holder does not answer in time: the connection alone proves it lives).
 */
function holderAt(socket: string, record: LockRecord): Promise<{ pid?: number } | undefined> {
	return new Promise((resolve) => {
		let text = "";
		let connected = false;
		const conn = net.connect(socket);
		const done = (pid?: number) => {
			clearTimeout(timer);
			conn.destroy();
			resolve(connected ? { pid: Number.isInteger(pid) ? pid : record.pid } : undefined);
		};
		const timer = setTimeout(() => done(), ANSWER_MS);
		conn.on("connect", () => (connected = true));
		conn.setEncoding("utf8");
		conn.on("data", (c: string) => {
			text += c;
			const eol = text.indexOf("\n");
			if (eol < 0) return;
			try {
				done((JSON.parse(text.slice(0, eol)) as LockRecord).pid);
			} catch {
				done();
			}
		});
		conn.on("end", () => done());
		// ECONNREFUSED (a socket file nobody listens on), ENOENT: not held there.
		conn.on("error", () => done());
	});
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

/** What the holder answers on every connection (a console attached later speaks after this line). */
function greet(conn: net.Socket): void {
	conn.on("error", () => undefined);
	conn.end(`${JSON.stringify({ pid: process.pid })}\n`);
}

const close = (server: net.Server) => new Promise<void>((resolve) => server.close(() => resolve()));

/**
 * Takes DATA_DIR for this process, or throws DataDirInUse naming the holder. `undefined` for a node that keeps no
 * store there (keepsStoreIn). A DATA_DIR that is missing is created (0700), one this user may not write is refused
 * (lib/config.ts says how): neither can be held by anyone.
 */
export async function lockDataDir(cfg: Pick<PlatformConfig, "dataDir" | "databaseUrl" | "mongoUri" | "documentStore">): Promise<DataDirLock | undefined> {
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
	const socket = await bind(dataDir, real, record, held).catch(async (err) => {
		await Promise.all(held.map(close));
		throw err;
	});
	writeRecord(dataDir, { pid: process.pid, socket });

	let released: Promise<void> | undefined;
	return {
		dataDir,
		socket,
		release() {
			return (released ??= (async () => {
				// Closing a server removes its socket file (Node unlinks it).
				await Promise.all(held.map(close));
				if (readRecord(dataDir).pid === process.pid) rmSync(path.join(dataDir, RECORD_FILE), { force: true });
			})());
		},
	};
}

/** Binds the abstract socket (Linux) and the socket file into `held`; throws DataDirInUse when another process holds them. */
async function bind(dataDir: string, real: string, record: LockRecord, held: net.Server[]): Promise<string> {
	const refused = (holder: { pid?: number } | undefined) => new DataDirInUse(dataDir, holder?.pid);
	if (process.platform === "linux") {
		const name = `\0platform-datadir-${hashOf(real)}`;
		const server = net.createServer(greet);
		if (!(await listen(server, name))) throw refused(await holderAt(name, record));
		held.push(server);
	}
	const primary = path.join(dataDir, SOCKET_FILE);
	const fallback = fallbackSocket(real);
	// The recorded socket when it is this directory's (a copy of a DATA_DIR carries the record of the original's holder);
	// under another TMPDIR than this process's, the fallback has another directory but the same name.
	const recorded = record.socket && path.basename(record.socket) === path.basename(fallback) ? record.socket : undefined;
	// A holder the abstract socket cannot see (another network namespace: a container sharing the directory).
	for (const s of new Set([recorded, fits(primary) ? primary : undefined, fallback])) {
		const holder = s ? await holderAt(s, record) : undefined;
		if (holder) throw refused(holder);
	}
	let socket = fits(primary) ? primary : fallback;
	for (let attempt = 0; ; attempt++) {
		const server = net.createServer(greet);
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
