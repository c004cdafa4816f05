/**
 * DATA_DIR on disk: its directories kept its owner's only, and the private JSON files (bootstrap values, generated
 * keys, the embedded PostgreSQL's password) written whole. runtime/config.ts re-exports them.
 */
import { accessSync, chmodSync, closeSync, constants, existsSync, fsyncSync, mkdirSync, openSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeSync } from "fs";
import path from "path";
import { StartupError } from "./config-env";

export function ensureDir(dir: string): string {
	if (!existsSync(dir)) mkdirSync(dir, { recursive: true });
	return dir;
}

/**
 * A directory of DATA_DIR: its owner's only (0700), created so or narrowed when it exists. One exception
 * (`keepSearch`, for what may be DATA_DIR itself): as root the embedded PostgreSQL runs as its own system user, which
 * must pass through DATA_DIR to its data directory; runtime/relational.ts gives DATA_DIR that user's group with search
 * only (0710), and this keeps it while the group is the one of DATA_DIR/postgres (never for others: no `o` bit stays).
 */
export function ensurePrivateDir(dir: string, keepSearch = false): string {
	if (!existsSync(dir)) mkdirSync(dir, { recursive: true, mode: 0o700 });
	try {
		const st = statSync(dir);
		const want = keepSearch && groupIsEmbeddedServers(dir, st.gid) ? 0o710 : 0o700;
		if ((st.mode & 0o777) !== want) chmodSync(dir, want);
	} catch {
		/* not ours to change (another owner): left as is */
	}
	return dir;
}

/** Running as root, `gid` (not root's) is the group of `dir`/postgres, the embedded PostgreSQL's data directory. */
function groupIsEmbeddedServers(dir: string, gid: number): boolean {
	if (gid === 0 || typeof process.getuid !== "function" || process.getuid() !== 0) return false;
	try {
		return statSync(path.join(dir, "postgres")).gid === gid;
	} catch {
		return false;
	}
}

/**
 * DATA_DIR made its owner's only at start, also when an earlier version left it readable or searchable by others: the
 * directory (above), every file 0600 and every sub-directory 0700, except the embedded PostgreSQL's data directory
 * (initdb's own 0700).
 */
export function privateDataDir(dir: string): void {
	writableDataDir(dir);
	const walk = (d: string, depth: number) => {
		for (const e of readdirSync(d, { withFileTypes: true })) {
			const p = path.join(d, e.name);
			try {
				if (e.isDirectory()) {
					if (depth === 0 && e.name === "postgres") continue;
					ensurePrivateDir(p);
					if (depth < 4) walk(p, depth + 1);
				} else if (e.isFile() && statSync(p).mode & 0o077) chmodSync(p, 0o600);
			} catch {
				/* gone meanwhile, or not ours */
			}
		}
	};
	walk(dir, 0);
}

/**
 * DATA_DIR created (0700) or found, and writable by this user; otherwise a StartupError saying what to do. The case
 * this guards: an image run as an unprivileged user over a root-owned app directory, without a volume for DATA_DIR.
 */
function writableDataDir(dir: string): void {
	try {
		ensurePrivateDir(dir, true);
		accessSync(dir, constants.W_OK | constants.X_OK);
	} catch (err) {
		const e = err as NodeJS.ErrnoException;
		const who = typeof process.getuid === "function" ? ` (uid ${process.getuid()})` : "";
		throw new StartupError(
			`DATA_DIR ${dir} cannot be created or written by this user${who}: ${e.code ?? e.message}. ` +
				`Set DATA_DIR to a directory this user may write (in the image: the volume at /data), or give this user that directory`,
		);
	}
}

/**
 * A JSON file readable by its owner only (bootstrap values, generated keys, the embedded PostgreSQL's password),
 * replaced whole: written to a file of its own beside it, flushed to disk, then renamed over it. A reader (another
 * process, the platform's next start after a crash mid-write) sees the old content or the new, never a truncated file
 * that would leave the keys or the root credentials unreadable.
 */
export function writePrivateJson(file: string, value: unknown): void {
	ensurePrivateDir(path.dirname(file), true);
	const tmp = `${file}.${process.pid}.tmp`;
	try {
		const fd = openSync(tmp, "w", 0o600);
		try {
			writeSync(fd, JSON.stringify(value, null, 2));
			fsyncSync(fd);
		} finally {
			closeSync(fd);
		}
		chmodSync(tmp, 0o600);
		renameSync(tmp, file);
	} catch (err) {
		rmSync(tmp, { force: true });
		throw err;
	}
}

export function readJson<T>(file: string): T | undefined {
	return existsSync(file) ? (JSON.parse(readFileSync(file, "utf8")) as T) : undefined;
}
