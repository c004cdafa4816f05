/** Blob store on the local file system: one file per key under `dir` (DATA_DIR/files), written to a temporary name then renamed. */
import { createWriteStream, promises as fs } from "fs";
import path from "path";
import { randomBytes } from "crypto";
import { pipeline } from "stream/promises";
import type { Readable } from "stream";
import { checkKey, BLOB_KEY, type BlobInfo, type BlobStore } from "./types";

/** Partly written blobs; never listed, removed by `list` consumers through `sweepPartial`. */
const PARTIAL = ".partial";

export class LocalBlobStore implements BlobStore {
	readonly kind = "local" as const;
	private ready?: Promise<void>;

	constructor(readonly dir: string) {}

	private ensure(): Promise<void> {
		this.ready ??= fs.mkdir(path.join(this.dir, PARTIAL), { recursive: true, mode: 0o700 }).then(() => undefined);
		return this.ready;
	}

	private file(key: string): string {
		return path.join(this.dir, checkKey(key));
	}

	async put(key: string, body: Readable, size: number): Promise<void> {
		const target = this.file(key);
		await this.ensure();
		const tmp = path.join(this.dir, PARTIAL, `${key}.${randomBytes(6).toString("hex")}`);
		try {
			await pipeline(body, createWriteStream(tmp, { mode: 0o600 }));
			const st = await fs.stat(tmp);
			if (st.size !== size) throw new Error(`blob ${key}: expected ${size} bytes, got ${st.size}`);
			await fs.rename(tmp, target);
		} catch (err) {
			await fs.rm(tmp, { force: true });
			throw err;
		}
	}

	/** Moves a complete file of the same file system in as the blob `key` (the upload's spool file: no second write). */
	async adopt(key: string, file: string): Promise<void> {
		const target = this.file(key);
		await this.ensure();
		await fs.rename(file, target);
	}

	async get(key: string, range?: { start: number; end: number }): Promise<Readable | null> {
		const file = this.file(key);
		// Opened before answering, so a missing blob is null rather than a stream that fails later.
		let handle: fs.FileHandle;
		try {
			handle = await fs.open(file, "r");
		} catch (err) {
			if ((err as NodeJS.ErrnoException).code === "ENOENT") return null;
			throw err;
		}
		return handle.createReadStream({ highWaterMark: 256 * 1024, ...(range ? { start: range.start, end: range.end } : {}) });
	}

	async stat(key: string): Promise<BlobInfo | null> {
		try {
			const st = await fs.stat(this.file(key));
			return { key, size: st.size, modified: st.mtimeMs };
		} catch (err) {
			if ((err as NodeJS.ErrnoException).code === "ENOENT") return null;
			throw err;
		}
	}

	async remove(key: string): Promise<void> {
		await fs.rm(this.file(key), { force: true });
	}

	async *list(): AsyncIterable<BlobInfo> {
		// Listing and sweeping create nothing: a node that never stored a file keeps no files directory (the compose
		// file gives a lasting volume only to the node that stores uploads).
		const dir = await fs.opendir(this.dir).catch((err: NodeJS.ErrnoException) => {
			if (err.code === "ENOENT") return null;
			throw err;
		});
		if (!dir) return;
		for await (const e of dir) {
			if (!e.isFile() || !BLOB_KEY.test(e.name)) continue;
			const info = await this.stat(e.name);
			if (info) yield info;
		}
	}

	/** Removes partly written blobs older than `olderThanMs` (a process that died mid-write); the number removed. */
	async sweepPartial(olderThanMs: number): Promise<number> {
		let n = 0;
		const dir = path.join(this.dir, PARTIAL);
		const names = await fs.readdir(dir).catch((err: NodeJS.ErrnoException) => {
			if (err.code === "ENOENT") return [];
			throw err;
		});
		for (const name of names) {
			const f = path.join(dir, name);
			const st = await fs.stat(f).catch(() => null);
			if (st && Date.now() - st.mtimeMs >= olderThanMs) {
				await fs.rm(f, { force: true });
				n++;
			}
		}
		return n;
	}

	async ping(): Promise<boolean> {
		try {
			await this.ensure();
			await fs.access(this.dir);
			return true;
		} catch {
			return false;
		}
	}

	async close(): Promise<void> {
		/* nothing held open */
	}
}
