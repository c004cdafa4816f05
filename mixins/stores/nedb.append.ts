/**
 * NeDB's write path, kept short: NeDB appends every write to its data file with `fs.appendFile`, which opens the
 * file, writes and closes it, three system calls and a file handle per write (a third of a create's CPU on the
 * embedded stores, docs/benchmarks.md "Profile"). Here each data file stays open for appending between writes: one
 * write per insert, update or removal. Same bytes in the same order (NeDB runs one operation at a time per file and
 * waits for its append). Whatever replaces the file (compaction's write-then-rename, loading, dropping) closes the
 * handle first, so the next append opens the new file.
 */
import { open, type FileHandle } from "fs/promises";

interface Persistence {
	inMemoryOnly: boolean;
	filename: string;
	modes: { fileMode: number };
	afterSerialization(s: string): string;
	persistNewStateAsync(docs: unknown[]): Promise<void>;
	persistCachedDatabaseAsync(): Promise<void>;
	loadDatabaseAsync(): Promise<void>;
	dropDatabaseAsync(): Promise<void>;
}

// eslint-disable-next-line @typescript-eslint/no-var-requires
const model = require("@seald-io/nedb/lib/model") as { serialize(doc: unknown): string };

export interface Appender {
	close(): Promise<void>;
}

/** Replaces the datastore's per-write appendFile by writes to a file kept open; `close` when the store disconnects. */
export function keepDataFileOpen(db: { persistence: Persistence }): Appender {
	const p = db.persistence;
	let handle: Promise<FileHandle> | undefined;
	const close = async () => {
		const h = handle;
		handle = undefined;
		if (h) await (await h.catch(() => undefined))?.close().catch(() => undefined);
	};
	if (p.inMemoryOnly) return { close };
	p.persistNewStateAsync = async (docs: unknown[]) => {
		let text = "";
		for (const doc of docs) text += `${p.afterSerialization(model.serialize(doc))}\n`;
		if (!text) return;
		handle ??= open(p.filename, "a", p.modes.fileMode);
		let h: FileHandle;
		try {
			h = await handle;
		} catch (err) {
			handle = undefined;
			throw err;
		}
		try {
			await h.appendFile(text, "utf8");
		} catch (err) {
			// A handle that failed is not reused: the next write opens the file again.
			await close();
			throw err;
		}
	};
	for (const name of ["persistCachedDatabaseAsync", "loadDatabaseAsync", "dropDatabaseAsync"] as const) {
		const original = p[name].bind(p);
		p[name] = async () => {
			await close();
			return original();
		};
	}
	return { close };
}
