/**
 * The document store's contract: what a document, a filter and a store are, the tenant-ref key and the duplicate-key
 * test. Below the rules (lib/) and the stores (stores/) alike, so both use it without importing each other:
 * the PostgreSQL store implements `DocumentStore` (test/integration/store-conformance).
 */

export type Filter = Record<string, unknown>;
export type StoredDoc = Record<string, unknown> & { id: string };

export interface FindOptions {
	query: Filter;
	sort?: Record<string, 1 | -1>;
	skip?: number;
	limit?: number;
	projection?: Record<string, 0 | 1>;
	/**
	 * At most this many documents read to be matched one by one in the gateway's process (PostgreSQL: the rows its SQL
	 * selects as a superset of a filter it cannot evaluate exactly); a read that needs more answers 400. Unset: no bound
	 * (the platform's own reads).
	 */
	examine?: number;
}

/**
 * A position in a sorted read: the sort values of the last document read, each `[value]` or `[]` (missing), and its
 * `id` (the tie-break). Made and read by the store that produced it (opaque to the engine, JSON-safe).
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
	readonly kind: "postgres";
	connect(): Promise<void>;
	disconnect(): Promise<void>;
	find(opts: FindOptions): Promise<StoredDoc[]>;
	findOne(query: Filter): Promise<StoredDoc | null>;
	/**
	 * findOne for a read that only answers: the same document, possibly from a cache that is exact (never older than
	 * a write committed before the call), frozen. A store without one answers findOne's.
	 */
	findOneCached?(query: Filter): Promise<StoredDoc | null>;
	count(query: Filter, opts?: Pick<FindOptions, "examine">): Promise<number>;
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
	insert(doc: StoredDoc, opts?: WriteOptions): Promise<StoredDoc>;
	insertMany(docs: StoredDoc[], opts?: WriteOptions): Promise<StoredDoc[]>;
	/** `$set` on the documents with these ids; returns how many changed. */
	setMany(ids: string[], set: Record<string, unknown>): Promise<number>;
	/** `$set` on one document; returns it as stored afterwards, or null. */
	setOne(id: string, set: Record<string, unknown>): Promise<StoredDoc | null>;
	removeMany(query: Filter): Promise<number>;
	/**
	 * Compare-and-set: applies a store update (`$set`, `$unset`, `$inc`, `$push`, `$pull`) to the first document
	 * matching `query`, atomically with the match; returns it as stored afterwards, or null when none matched
	 * (`{ id, balance: { $gte: 5 } }` with `{ $inc: { balance: -5 } }` never overdraws).
	 */
	updateIf(query: Filter, update: Record<string, unknown>): Promise<StoredDoc | null>;
	/** Replaces the first document matching `query` by `doc` (same `id`), atomically with the match; false when none matched. */
	replaceIf(query: Filter, doc: StoredDoc): Promise<boolean>;
	ping(): Promise<boolean>;
	/**
	 * The same store with every statement under a request's deadline (REQUEST_DB_DEADLINE_MS: each statement fails as
	 * an outage once it has waited that long).
	 */
	within?(deadlineMs: number): DocumentStore;
}

export interface WriteOptions {
	/**
	 * The write may be held back until the unit of work's next statement on the same database (PostgreSQL: the outbox
	 * append, which then inserts the documents and their events in one statement, its own transaction), or until the
	 * unit commits. Its errors (a duplicate key: 409) then surface there, not here: only for a caller that handles them
	 * around both. Writes outside a unit write at once.
	 */
	hold?: boolean;
}

/** The internal field holding a document's revision (absent on documents no write has touched since they were made; stores/revision.ts). */
export const REV = "_rev";

/**
 * `ref` is unique per tenant (docs/contracts.md "Tenants"): the engine keeps `tenant_ref` = `<first client>:<ref>` beside
 * every `ref`, and both stores hold a unique sparse index on it (concurrent creates cannot race). Internal: never
 * returned, never settable.
 */
export const TENANT_REF = "tenant_ref";

/** The derived per-tenant key of a `ref` (see TENANT_REF): the tenant is the document's first client. */
export function tenantRef(clients: unknown, ref: unknown): string | null {
	if (ref === undefined || ref === null) return null;
	return `${Array.isArray(clients) ? clients[0] : ""}:${String(ref)}`;
}

/** A unique-index violation (PostgreSQL's unique_violation); the engine maps it to 409. */
export function isDuplicateKeyError(err: unknown): boolean {
	return (err as { code?: unknown })?.code === "23505";
}
