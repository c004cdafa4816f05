/** One document-store interface; NeDB (embedded) and MongoDB adapters both pass test/integration/store-conformance. */

export type Filter = Record<string, unknown>;
export type StoredDoc = Record<string, unknown> & { _id: string };

export interface FindOptions {
	query: Filter;
	sort?: Record<string, 1 | -1>;
	skip?: number;
	limit?: number;
	projection?: Record<string, 0 | 1>;
}

/**
 * A position in a sorted read: the sort values of the last document read, each `[value]` or `[]` (missing), and its
 * `_id` (the tie-break). Made and read by the store that produced it (opaque to the engine, JSON-safe).
 */
export interface Keyset {
	values: Array<[unknown] | []>;
	id: string;
}

/** A page read after a keyset, and the keyset of its last document (none when the page is empty). */
export interface KeysetPage {
	docs: StoredDoc[];
	next?: Keyset;
}

/** A page of a query and the exact number of its matches (a list's `items` and `total`). */
export interface Page {
	docs: StoredDoc[];
	total: number;
}

export interface DocumentStore {
	readonly kind: "nedb" | "mongo" | "postgres";
	connect(): Promise<void>;
	disconnect(): Promise<void>;
	find(opts: FindOptions): Promise<StoredDoc[]>;
	findOne(query: Filter): Promise<StoredDoc | null>;
	count(query: Filter): Promise<number>;
	/**
	 * `find` and `count` of the same query in one pass, for a store where evaluating the filter twice costs twice
	 * (PostgreSQL: one statement). Optional: `pageOf` falls back to find + count.
	 */
	findPage?(opts: FindOptions): Promise<Page>;
	/**
	 * A page of the sorted matches strictly after `after` (else from `skip`), and the keyset of its last document, for
	 * the cursor's next page: each page costs about its own size, never the documents before it. Optional: the cursor
	 * falls back to `skip`.
	 */
	findAfter?(opts: FindOptions & { after?: Keyset }): Promise<KeysetPage>;
	/**
	 * The first `limit` documents whose indexed numeric `field` is greater than `after`, in the field's order, read from
	 * the index without visiting the others (embedded store only; undefined when the field has no index). Copies.
	 */
	firstAfter?(field: string, after: number, limit: number): StoredDoc[] | undefined;
	insert(doc: StoredDoc, opts?: WriteOptions): Promise<StoredDoc>;
	insertMany(docs: StoredDoc[], opts?: WriteOptions): Promise<StoredDoc[]>;
	/** `$set` on the documents with these ids; returns how many changed. */
	setMany(ids: string[], set: Record<string, unknown>): Promise<number>;
	/** `$set` on one document; returns it as stored afterwards, or null. */
	setOne(id: string, set: Record<string, unknown>): Promise<StoredDoc | null>;
	removeMany(query: Filter): Promise<number>;
	/** Gives the space of removed documents back (NeDB: rewrites its append-only file). Optional: MongoDB reuses it. */
	compact?(): Promise<void>;
	/**
	 * Compare-and-set: applies a store update (`$set`, `$unset`, `$inc`, `$push`, `$pull`) to the first document
	 * matching `query`, atomically with the match; returns it as stored afterwards, or null when none matched
	 * (`{ _id, balance: { $gte: 5 } }` with `{ $inc: { balance: -5 } }` never overdraws).
	 */
	updateIf(query: Filter, update: Record<string, unknown>): Promise<StoredDoc | null>;
	/** Replaces the first document matching `query` by `doc` (same `_id`), atomically with the match; false when none matched. */
	replaceIf(query: Filter, doc: StoredDoc): Promise<boolean>;
	ping(): Promise<boolean>;
}

export interface WriteOptions {
	/**
	 * The write may be held back until the unit of work's next statement on the same database (PostgreSQL: the outbox
	 * append, which then inserts the documents and their events in one statement, its own transaction), or until the
	 * unit commits. Its errors (a duplicate key: 409) then surface there, not here: only for a caller that handles them
	 * around both. Stores without transactions, and writes outside a unit, write at once as usual.
	 */
	hold?: boolean;
}

/** A page and its total through the store's one-pass `findPage` when it has one. */
export async function pageOf(store: DocumentStore, o: FindOptions): Promise<Page> {
	if (store.findPage) return store.findPage(o);
	const [docs, total] = await Promise.all([store.find(o), store.count(o.query)]);
	return { docs, total };
}

/**
 * Longest stretch of synchronous work (ms) a store's read does before it lets the event loop run: one request over
 * any number of documents must not delay `/status` (or anyone's login) by more than 100 ms.
 */
export const SLICE_MS = 10;

/**
 * When the event loop last turned, about: an immediate set on first use resets it, so a chain of promise callbacks
 * that never lets the loop turn (a cursor whose pages come from memory, page after page) is measured as one stretch.
 */
let turnStart = performance.now();
let watching = false;
function sinceTurn(): number {
	if (!watching) {
		watching = true;
		setImmediate(() => {
			watching = false;
			turnStart = performance.now();
		});
	}
	return performance.now() - turnStart;
}

/**
 * Time slices of long work: check `due` every few dozen iterations of a loop (and once per read), then `await next()`,
 * which lets the event loop turn (I/O: /status, other requests) before going on.
 */
export class Slices {
	get due(): boolean {
		return sinceTurn() >= SLICE_MS;
	}
	async next(): Promise<void> {
		await new Promise<void>((r) => setImmediate(r));
		turnStart = performance.now();
	}
}

/** Lets the event loop turn when the current stretch of synchronous work has used its slice (see Slices). */
export async function yieldIfDue(): Promise<void> {
	const slices = new Slices();
	if (slices.due) await slices.next();
}

/**
 * A stable merge sort that yields between slices (`Array.prototype.sort` of 100 000 documents by a JavaScript
 * comparator holds the process for hundreds of milliseconds): runs of RUN sorted natively, then merged bottom-up.
 */
export async function sortInSlices<T>(items: T[], cmp: (a: T, b: T) => number, slices = new Slices()): Promise<T[]> {
	const RUN = 256;
	let src = items;
	for (let i = 0; i < src.length; i += RUN) {
		const run = src.slice(i, i + RUN).sort(cmp);
		for (let j = 0; j < run.length; j++) src[i + j] = run[j];
		if (slices.due) await slices.next();
	}
	let dst = new Array<T>(src.length);
	for (let width = RUN; width < src.length; width *= 2) {
		for (let lo = 0; lo < src.length; lo += 2 * width) {
			const mid = Math.min(lo + width, src.length);
			const hi = Math.min(lo + 2 * width, src.length);
			let i = lo;
			let j = mid;
			let k = lo;
			while (i < mid && j < hi) {
				// The left element first on ties: stable.
				dst[k++] = cmp(src[j], src[i]) < 0 ? src[j++] : src[i++];
				if ((k & 1023) === 0 && slices.due) await slices.next();
			}
			while (i < mid) dst[k++] = src[i++];
			while (j < hi) dst[k++] = src[j++];
		}
		[src, dst] = [dst, src];
	}
	return src;
}

/** A store query names `id`; both stores key documents by `_id`. Renames it at any depth of $and/$or/$not. */
export function toStoreQuery(q: Filter): Filter {
	const out: Filter = {};
	for (const [k, v] of Object.entries(q)) {
		if ((k === "$and" || k === "$or") && Array.isArray(v)) out[k] = v.map((x) => toStoreQuery(x as Filter));
		// Query-level `$not` holds a sub-query (NeDB's form), whose `id` must be renamed too.
		else if (k === "$not" && v && typeof v === "object" && !Array.isArray(v) && !(v instanceof RegExp)) out[k] = toStoreQuery(v as Filter);
		else out[k === "id" ? "_id" : k] = v;
	}
	return out;
}

export function renameIdKeys<T extends Record<string, unknown>>(o: T | undefined): T | undefined {
	if (!o) return o;
	const out: Record<string, unknown> = {};
	for (const [k, v] of Object.entries(o)) out[k === "id" ? "_id" : k] = v;
	return out as T;
}

/**
 * The store update for a `$set`. A `ref` (or its derived `tenant_ref`, see TENANT_REF) set to null is removed instead:
 * a sparse index indexes null like any other value (NeDB and MongoDB alike), so a stored null would let only one
 * document clear its reference.
 */
export function updateOf(set: Record<string, unknown>): Record<string, unknown> {
	const cleared = UNSET_WHEN_NULL.filter((k) => k in set && set[k] === null);
	if (!cleared.length) return { $set: set };
	const rest: Record<string, unknown> = { ...set };
	for (const k of cleared) delete rest[k];
	return { ...(Object.keys(rest).length ? { $set: rest } : {}), $unset: Object.fromEntries(cleared.map((k) => [k, true])) };
}

/**
 * `ref` is unique per tenant (CONTRACTS.md "Tenants"): the engine keeps `tenant_ref` = `<first client>:<ref>` beside
 * every `ref`, and both stores hold a unique sparse index on it (concurrent creates cannot race). Internal: never
 * returned, never settable.
 */
export const TENANT_REF = "tenant_ref";
const UNSET_WHEN_NULL = ["ref", TENANT_REF];

/** Unique-index violations surface from both stores under different names; the engine maps them to 409. */
export function isDuplicateKeyError(err: unknown): boolean {
	const e = err as { errorType?: string; code?: number | string };
	// PostgreSQL: unique_violation.
	return e?.errorType === "uniqueViolated" || e?.code === 11000 || e?.code === "23505";
}
