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
