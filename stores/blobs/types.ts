/**
 * Where file content lives (docs/files.md): one small interface, two stores (local files under DATA_DIR/files, and
 * S3-compatible object storage), one conformance suite (test/integration/blob-conformance.test.ts). Content is
 * always a stream: nothing here holds a whole file in memory.
 */
import type { Readable } from "stream";

export interface BlobInfo {
	key: string;
	size: number;
	/** Last write (ms since epoch): the orphan collector's age. */
	modified: number;
}

export interface BlobStore {
	readonly kind: "local" | "s3";
	/** Writes `size` bytes of `body` under `key` (replacing any). Visible under `key` only once complete. */
	put(key: string, body: Readable, size: number): Promise<void>;
	/** The content, or bytes `start..end` inclusive of it; null when there is no such blob. */
	get(key: string, range?: { start: number; end: number }): Promise<Readable | null>;
	stat(key: string): Promise<BlobInfo | null>;
	/** Idempotent: removing a missing blob is not an error. */
	remove(key: string): Promise<void>;
	/** Every blob, in pages (the orphan collector walks them all). */
	list(): AsyncIterable<BlobInfo>;
	ping(): Promise<boolean>;
	close(): Promise<void>;
}

/** Keys are file record ids (24 hex) or test names: nothing that can climb out of a directory or name a prefix. */
export const BLOB_KEY = /^[A-Za-z0-9_-]{1,200}$/;

export function checkKey(key: string): string {
	if (!BLOB_KEY.test(key)) throw new Error(`invalid blob key ${JSON.stringify(key).slice(0, 60)}`);
	return key;
}
