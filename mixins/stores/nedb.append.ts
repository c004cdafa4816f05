/**
 * NeDB's write path, kept short: NeDB appends every write to its data file with `fs.appendFile`, which opens the
 * file, writes and closes it, three system calls and a file handle per write (a third of a create's CPU on the
 * embedded stores, docs/benchmarks.md "Profile"). Here each data file stays open for appending between writes, and a
 * write is one synchronous `write` of its lines to that descriptor: an asynchronous write on a file handle costs
 * about four times the CPU of the system call itself (a thread-pool hop, its promises and buffers; 5 000 sequential
 * 1.5 KB appends: 38-59 µs against 8-12 µs each), while the call only copies into the page cache (no fsync, as
 * before). Same bytes in the same order (NeDB runs one operation at a time per file and waits for its append).
 * Whatever replaces the file (compaction's write-then-rename, loading, dropping) closes the descriptor first, so the
 * next append opens the new file.
 */
import { closeSync, openSync, writeSync } from "fs";
import { open } from "fs/promises";
import path from "path";
import { Slices } from "./types";

interface Persistence {
	inMemoryOnly: boolean;
	filename: string;
	modes: { fileMode: number; dirMode: number };
	afterSerialization(s: string): string;
	persistNewStateAsync(docs: unknown[]): Promise<void>;
	persistCachedDatabaseAsync(): Promise<void>;
	loadDatabaseAsync(): Promise<void>;
	dropDatabaseAsync(): Promise<void>;
}

// eslint-disable-next-line @typescript-eslint/no-var-requires
const model = require("@seald-io/nedb/lib/model") as { serialize(doc: unknown): string };
// eslint-disable-next-line @typescript-eslint/no-var-requires
const storage = require("@seald-io/nedb/lib/storage") as {
	flushToStorageAsync(o: { filename: string; isDir?: boolean; mode: number }): Promise<void>;
	existsAsync(filename: string): Promise<boolean>;
	renameAsync(from: string, to: string): Promise<void>;
};

interface Datastore {
	persistence: Persistence;
	getAllData(): unknown[];
	indexes: Record<string, { unique?: boolean; sparse?: boolean }>;
	emit(event: string): void;
}

/** Whether a Date is anywhere in the value (NeDB writes a Date as `{"$$date": ms}`). */
function holdsDate(v: unknown): boolean {
	if (typeof v !== "object" || v === null) return false;
	if (v instanceof Date) return true;
	if (Array.isArray(v)) {
		for (const x of v) if (holdsDate(x)) return true;
		return false;
	}
	for (const k in v) if (holdsDate((v as Record<string, unknown>)[k])) return true;
	return false;
}

/**
 * NeDB's `model.serialize`, byte for byte: it is JSON.stringify with a replacer that turns Dates into `$$date` and
 * checks every key. The documents written here were checked by NeDB when they were inserted or modified, so a
 * document without a Date is written by JSON.stringify alone: no call back into JavaScript for every value (a
 * replacer's cost), 4 to 5 % of a create's CPU.
 */
export function serializeDoc(doc: unknown): string {
	return holdsDate(doc) ? model.serialize(doc) : JSON.stringify(doc);
}

export interface Appender {
	close(): Promise<void>;
}

/** Writes all of `buf` to `fd` (a regular file takes it in one call; a short write continues where it stopped). */
function writeAll(fd: number, buf: Buffer): void {
	for (let off = 0; off < buf.length; ) off += writeSync(fd, buf, off, buf.length - off);
}

/**
 * NeDB's rewrite of the whole file (compaction, and after loading) in time slices: NeDB serialises every document in
 * one synchronous loop, then streams the lines without backpressure (60 000 notes held the process 430 ms, then
 * 345 ms). Here documents are serialised and written a slice at a time, with NeDB's crash-safe steps (flush the
 * directory and the old file, write `<file>~`, flush it, rename, flush the directory). NeDB's executor runs the
 * rewrite as one operation, so no write changes the documents while it yields. Same lines, same order.
 */
async function rewriteInSlices(db: Datastore): Promise<void> {
	const p = db.persistence;
	if (p.inMemoryOnly) return;
	const { filename, modes } = p;
	const dir = { filename: path.dirname(filename), isDir: true, mode: modes.dirMode };
	await storage.flushToStorageAsync(dir);
	if (await storage.existsAsync(filename)) await storage.flushToStorageAsync({ filename, mode: modes.fileMode });
	const docs = db.getAllData();
	const temp = `${filename}~`;
	const fh = await open(temp, "w", modes.fileMode);
	try {
		const slices = new Slices();
		let text = "";
		for (let i = 0; i < docs.length; i++) {
			text += `${p.afterSerialization(serializeDoc(docs[i]))}\n`;
			if (text.length >= 1 << 20 || ((i & 63) === 63 && slices.due)) {
				await fh.writeFile(text, "utf8");
				text = "";
				if (slices.due) await slices.next();
			}
		}
		for (const [fieldName, idx] of Object.entries(db.indexes))
			if (fieldName !== "_id") text += `${p.afterSerialization(model.serialize({ $$indexCreated: { fieldName, unique: idx.unique, sparse: idx.sparse } }))}\n`;
		await fh.writeFile(text, "utf8");
		await fh.sync();
	} finally {
		await fh.close();
	}
	await storage.renameAsync(temp, filename);
	await storage.flushToStorageAsync(dir);
	db.emit("compaction.done");
}

/**
 * Replaces the datastore's per-write appendFile by writes to a file kept open, and its whole-file rewrite by one in
 * time slices; `close` when the store disconnects.
 */
export function keepDataFileOpen(db: Datastore): Appender {
	const p = db.persistence;
	let fd: number | undefined;
	const closeNow = () => {
		const was = fd;
		fd = undefined;
		if (was === undefined) return;
		try {
			closeSync(was);
		} catch {
			/* already gone */
		}
	};
	const close = async () => closeNow();
	if (p.inMemoryOnly) return { close };
	p.persistNewStateAsync = async (docs: unknown[]) => {
		let text = "";
		for (const doc of docs) text += `${p.afterSerialization(serializeDoc(doc))}\n`;
		if (!text) return;
		fd ??= openSync(p.filename, "a", p.modes.fileMode);
		try {
			writeAll(fd, Buffer.from(text, "utf8"));
		} catch (err) {
			// A descriptor that failed is not reused: the next write opens the file again.
			closeNow();
			throw err;
		}
	};
	p.persistCachedDatabaseAsync = async () => {
		closeNow();
		return rewriteInSlices(db);
	};
	for (const name of ["loadDatabaseAsync", "dropDatabaseAsync"] as const) {
		const original = p[name].bind(p);
		p[name] = async () => {
			closeNow();
			return original();
		};
	}
	return { close };
}
