/**
 * The embedded document store: moleculer-db's NeDB adapter, one file per collection under DATA_DIR.
 * NeDB quirks handled here: indexes must be created after load, `{field: null}` does not match a missing field
 * (the engine always stores `deleted_at`), and the append-only file is compacted on load and periodically.
 */
import { chmod } from "fs/promises";
import path from "path";
import DbService from "moleculer-db";
import type { DocumentStore, FindOptions, Filter, Keyset, KeysetPage, Page, StoredDoc } from "./types";
import { renameIdKeys, Slices, sortInSlices, TENANT_REF, toStoreQuery as renameIdsInQuery, updateOf, yieldIfDue } from "./types";
import { ensurePrivateDir } from "../../runtime/config";
import { ApiError, badRequest } from "../../lib/errors";
import { keepDataFileOpen, type Appender } from "./nedb.append";

// NeDB's own matcher and comparator, so the fast path below keeps NeDB's query semantics exactly.
// eslint-disable-next-line @typescript-eslint/no-var-requires
const model = require("@seald-io/nedb/lib/model") as {
	match(doc: unknown, query: unknown): boolean;
	compareThings(a: unknown, b: unknown, compareStrings?: unknown): number;
	getDotValue(doc: unknown, key: string): unknown;
	deepCopy<T>(doc: T): T;
};

// eslint-disable-next-line @typescript-eslint/no-var-requires
const Cursor = require("@seald-io/nedb/lib/cursor") as { prototype: { _project(this: { _projection: unknown }, docs: StoredDoc[]): StoredDoc[] } };

const MAX_CACHED = 500;

/** A match of a sorted read and its sort values. */
interface Row {
	d: StoredDoc;
	k: unknown[];
}
/** The sorted matches of one query, read at write generation `gen`, at time `at`. */
interface Sorted {
	gen: number;
	at: number;
	rows: Row[];
}
/** Sorted matches kept: queries, and rows in all (about 100 bytes each). */
const MAX_SORTED = 32;
const MAX_SORTED_ROWS = 400_000;
/** How long a cursor keeps paging through the sorted matches it started from after a write. */
const CURSOR_SORTED_MS = 30_000;

const updatedLines = (doc: unknown) => (doc ? 1 : 0);

const isOperatorObject = (v: unknown): v is Record<string, unknown> =>
	typeof v === "object" && v !== null && !Array.isArray(v) && !(v instanceof RegExp) && Object.keys(v).length > 0 && Object.keys(v).every((k) => k.startsWith("$"));

/**
 * NeDB applies every operator but `$size`/`$elemMatch` to each element of an array field; MongoDB, whose notation
 * queries and grant row filters are written in, applies `$ne`, `$nin` and `$exists` to the field as a whole. So on
 * NeDB `{tags: {$nin: ["secret"]}}` let `["secret", "x"]` through (some element differs) and `{tags: {$exists: true}}`
 * missed `[]` (no element). Each becomes the negation of the opposite test, which NeDB evaluates with MongoDB's
 * meaning on arrays, scalars and missing fields alike.
 */
function mongoNegations(q: Filter): Filter {
	const out: Filter = {};
	const negations: Filter[] = [];
	for (const [k, v] of Object.entries(q)) {
		if ((k === "$and" || k === "$or") && Array.isArray(v)) out[k] = v.map((x) => mongoNegations(x as Filter));
		else if (k === "$not" && v && typeof v === "object" && !Array.isArray(v) && !(v instanceof RegExp)) out[k] = mongoNegations(v as Filter);
		else if (!k.startsWith("$") && isOperatorObject(v) && ("$ne" in v || "$nin" in v || v.$exists === true)) {
			const { $ne, $nin, ...rest } = v;
			if (rest.$exists === true) delete rest.$exists;
			if (Object.keys(rest).length) out[k] = rest;
			if ("$ne" in v) negations.push({ $not: { [k]: $ne } });
			if ("$nin" in v) negations.push({ $not: { [k]: { $in: $nin } } });
			if (v.$exists === true) negations.push({ $not: { [k]: { $exists: false } } });
		} else out[k] = v;
	}
	return negations.length ? { $and: [out, ...negations] } : out;
}

/** The store form of a platform query: `id` renamed to `_id`, negations with MongoDB's meaning. */
function toStoreQuery(q: Filter): Filter {
	return mongoNegations(renameIdsInQuery(q));
}

/**
 * Whether a stored document (`_id`, not `id`) satisfies a platform filter, with the semantics of the store queries
 * (NeDB's matcher after the MongoDB normalisation above). Used on writes, against the grant's row filter.
 */
export function matchesFilter(doc: Record<string, unknown>, filter: Filter): boolean {
	try {
		return model.match(doc, toStoreQuery(filter));
	} catch (err) {
		throw queryError(err);
	}
}

/** A cache key for a validated query: RegExp values keep their source and flags. */
function keyOf(v: unknown): string {
	return JSON.stringify(v, (_k, x) => (x instanceof RegExp ? { $re: x.source, $f: x.flags } : x === undefined ? null : x));
}

type Datastore = {
	ensureIndex(o: { fieldName: string; unique?: boolean; sparse?: boolean }): Promise<void>;
	removeIndex(fieldName: string): Promise<void>;
	find(q: Filter, p?: Record<string, 0 | 1>): { sort(s: object): any; skip(n: number): any; limit(n: number): any; exec(cb: (e: Error | null, d: StoredDoc[]) => void): void };
	findOne(q: Filter): Promise<StoredDoc | null>;
	count(q: Filter): Promise<number>;
	insertAsync<T>(d: T): Promise<T>;
	update(q: Filter, u: object, o: object): Promise<[number, StoredDoc | StoredDoc[]]>;
	remove(q: Filter, o: object): Promise<number>;
};

const INDEXES = [
	// `ref` is unique per tenant: the unique index is on the derived `tenant_ref` (see TENANT_REF).
	{ fieldName: "ref", sparse: true },
	{ fieldName: TENANT_REF, unique: true, sparse: true },
	{ fieldName: "owner" },
	{ fieldName: "clients" },
	{ fieldName: "deleted_at" },
	// The share and group zones: array fields, indexed per element.
	{ fieldName: "shares" },
	{ fieldName: "groups" },
];

/**
 * A validated query can still use a form NeDB does not evaluate (e.g. `$not` under a field, which only MongoDB
 * has): that is the caller's query, so a 400, never a 500.
 */
function queryError(err: unknown): Error {
	// Already a client answer (a $regex over its work budget, lib/safe-regex.ts).
	if (err instanceof ApiError) return err;
	const msg = (err as Error)?.message ?? "";
	return /comparison function|logical operator|Unknown|\$/.test(msg) ? badRequest(`query is not supported by the document store: ${msg}`) : (err as Error);
}

/** The append-only files are rewritten this often (and on load). */
const COMPACT_EVERY_MS = 10 * 60 * 1000;
/**
 * And as soon as the lines appended since the last rewrite exceed this many times the live documents (at least
 * COMPACT_MIN_LINES): every update appends a whole document, so a few documents updated in a loop (stat buckets)
 * would otherwise grow the file without bound between two timed rewrites. The file stays within about
 * (1 + COMPACT_FACTOR) × the live data; each rewrite costs the live data once, i.e. 1/COMPACT_FACTOR per line appended.
 */
export const COMPACT_FACTOR = 4;
export const COMPACT_MIN_LINES = 100;

export class NedbStore implements DocumentStore {
	readonly kind = "nedb" as const;
	private compactor?: NodeJS.Timeout;
	private appender?: Appender;
	private cache = new Map<string, unknown>();
	/** Sorted matches by query and sort; `gen` counts writes (a read that yielded across one is not kept as current). */
	private sorted = new Map<string, Sorted>();
	private sortedRows = 0;
	private gen = 0;
	/** Lines appended to the file since it was last rewritten, and the documents it held then (plus inserts since). */
	private appended = 0;
	private live = 0;
	private compacting?: Promise<void>;
	private adapter: { connect(): Promise<void>; disconnect(): Promise<void>; db: Datastore; init(b: unknown, s: unknown): void };

	/** `file` undefined keeps the store in memory (tests). */
	constructor(private readonly file: string | undefined, private readonly extraIndexes: string[] = []) {
		if (file) ensurePrivateDir(path.dirname(file), true); // may be DATA_DIR itself: keep its search bit
		// Owner-only files (0600): NeDB creates the data file, its compaction copies and appends with these modes.
		this.adapter = new (DbService as any).MemoryAdapter(file ? { filename: file, modes: { fileMode: 0o600, dirMode: 0o700 } } : {});
	}

	private get db(): Datastore {
		return this.adapter.db;
	}

	async connect(): Promise<void> {
		this.adapter.init(null, null);
		await this.adapter.connect();
		this.appender = keepDataFileOpen(this.db as never);
		// Data files written before `ref` became unique per tenant persist a unique `ref` index: replace it.
		if ((this.db as any).indexes?.ref?.unique) await this.db.removeIndex("ref");
		// The platform's own stores (`_outbox`, `_audit_spool`, positions...) are read by `_id` or their own field and
		// hold none of the collection fields: in a collection index every one of their records would sit under the
		// one `undefined` key, whose removal filters all the others (NeDB), so pruning thousands was quadratic.
		const internal = !!this.file && path.basename(this.file).startsWith("_");
		if (internal) for (const idx of INDEXES) if ((this.db as any).indexes?.[idx.fieldName]) await this.db.removeIndex(idx.fieldName);
		for (const idx of [...(internal ? [] : INDEXES), ...this.extraIndexes.map((fieldName) => ({ fieldName }))]) await this.db.ensureIndex(idx);
		if (this.file) {
			// A file an earlier version left 0644 (loading compacts it into a new 0600 file; this covers the rest).
			await chmod(this.file, 0o600).catch(() => undefined);
			// Our own timer rather than NeDB's autocompaction, whose failures (a DATA_DIR removed under a store that was
			// never disconnected) are unhandled rejections that end the process; unref'd, so it keeps nothing alive.
			this.compactor = setInterval(() => void this.compact().catch(() => undefined), COMPACT_EVERY_MS);
			this.compactor.unref();
			this.live = this.liveDocuments();
		}
	}

	async disconnect(): Promise<void> {
		if (this.compactor) clearInterval(this.compactor);
		this.compactor = undefined;
		await this.appender?.close();
		await this.adapter.disconnect();
	}

	/**
	 * Reads match NeDB's index-selected candidates themselves (NeDB's cursor deep-copies every match and sorts them in
	 * one go) in time slices (Slices: never more than SLICE_MS at a time, whatever the number of documents), and copy
	 * only the page. A sorted read keeps its sorted matches (`Sorted`) until the next write to this store (only this
	 * process writes an embedded store): the next page, the total, the same list again cost a binary search and the page.
	 */
	async find(o: FindOptions): Promise<StoredDoc[]> {
		return (await this.window(o, false)).docs;
	}

	/** The page and the total of one sorted pass. */
	async findPage(o: FindOptions): Promise<Page> {
		const w = await this.window(o, true);
		return { docs: w.docs, total: w.total! };
	}

	/**
	 * The page after a keyset (the cursor's next page): a binary search in the query's sorted matches. A cursor keeps
	 * reading the sorted matches it started from for up to CURSOR_SORTED_MS even after writes (else a collection
	 * written to all the time would sort its matches again for every page); each document of the page is then read
	 * again by `_id` and matched again, so a removed or changed document is never sent as it was.
	 */
	async findAfter(o: FindOptions & { after?: Keyset }): Promise<KeysetPage> {
		const w = await this.window(o, false, { after: o.after });
		return { docs: w.docs, next: w.next };
	}

	/** `cursor`: a cursor's read, from `skip` or after a keyset; always sorted (by `_id` when no sort is given). */
	private async window(o: FindOptions, withTotal: boolean, cursor?: { after?: Keyset }): Promise<{ docs: StoredDoc[]; total?: number; next?: Keyset }> {
		const q = toStoreQuery(o.query);
		const after = cursor?.after;
		// Pages served from memory resolve without I/O: a caller reading page after page (the cursor) would never let
		// the event loop turn.
		await yieldIfDue();
		try {
			// One `_id`: NeDB's `_id` index gives at most one candidate, cheaper to match than a cache key is to build.
			if (typeof q._id === "string" && !cursor) {
				const all = this.byId(q);
				return { docs: this.project(this.slice(all, o).map((d) => model.deepCopy(d)), o.projection), total: all.length };
			}
			if (!o.sort && !cursor) {
				// No order asked: the first matches in candidate order are the page (no total: stop there).
				const stop = withTotal || !o.limit ? undefined : (o.skip ?? 0) + o.limit;
				const all = await this.matching(q, stop);
				return { docs: this.project(this.slice(all, o).map((d) => model.deepCopy(d)), o.projection), total: all.length };
			}
			const sort = renameIdKeys<Record<string, 1 | -1>>(o.sort ?? { _id: 1 })!;
			const sorted = await this.sortedMatches(q, sort, after !== undefined);
			const rows = sorted.rows;
			let from = after ? this.rowAfter(rows, after, sort) : (o.skip ?? 0);
			const fresh = sorted.gen === this.gen;
			const page: Row[] = [];
			while (from < rows.length && (!o.limit || page.length < o.limit)) {
				const row = rows[from++];
				if (fresh) page.push(row);
				else {
					// A cursor page from sorted matches older than the last write: each document as it is now.
					const now = this.byId({ _id: row.d._id })[0];
					if (now && (now === row.d || model.match(now, q))) page.push({ d: now, k: row.k });
				}
			}
			const last = page[page.length - 1];
			return {
				docs: this.project(page.map((r) => model.deepCopy(r.d)), o.projection),
				total: rows.length,
				next: last && { values: last.k.map((v) => (v === undefined ? [] : [v])) as Keyset["values"], id: last.d._id },
			};
		} catch (err) {
			throw queryError(err);
		}
	}

	private slice(docs: StoredDoc[], o: FindOptions): StoredDoc[] {
		const start = o.skip ?? 0;
		return docs.slice(start, o.limit ? start + o.limit : undefined);
	}

	/** The candidates of an `_id` equality (at most one), matched. */
	private byId(q: Filter): StoredDoc[] {
		return ((this.db as any)._getRawCandidates(q) as StoredDoc[]).filter((d) => model.match(d, q));
	}

	/** Every match of `q` (or the first `stop`), in candidate order, matched in time slices. */
	private async matching(q: Filter, stop?: number): Promise<StoredDoc[]> {
		// Copies: an index's own arrays change under inserts made while this read yields.
		const lists = this.candidates(q).map((l) => l.slice());
		const seen = lists.length > 1 ? new Set<string>() : undefined;
		const out: StoredDoc[] = [];
		const slices = new Slices();
		let i = 0;
		for (const list of lists)
			for (const d of list) {
				if ((++i & 31) === 0 && slices.due) await slices.next();
				if (seen) {
					if (seen.has(d._id)) continue;
					seen.add(d._id);
				}
				if (model.match(d, q) && out.push(d) === stop) return out;
			}
		return out;
	}

	/** Row order: the sort's fields (NeDB's comparator), then `_id` in the direction of the first field. */
	private order(sort: Record<string, 1 | -1>): (a: Row, b: Row) => number {
		const dirs = Object.values(sort);
		const tie = "_id" in sort ? 0 : (dirs[0] ?? 1);
		const cs = (this.db as any).compareStrings;
		return (a, b) => {
			for (let i = 0; i < dirs.length; i++) {
				const c = dirs[i] * model.compareThings(a.k[i], b.k[i], cs);
				if (c !== 0) return c;
			}
			return tie * model.compareThings(a.d._id, b.d._id, cs);
		};
	}

	/** Index of the first row strictly after the keyset. */
	private rowAfter(rows: Row[], after: Keyset, sort: Record<string, 1 | -1>): number {
		const cmp = this.order(sort);
		const at: Row = { d: { _id: after.id }, k: after.values.map((v) => (v.length ? v[0] : undefined)) };
		let lo = 0;
		let hi = rows.length;
		while (lo < hi) {
			const mid = (lo + hi) >>> 1;
			if (cmp(rows[mid], at) <= 0) lo = mid + 1;
			else hi = mid;
		}
		return lo;
	}

	/**
	 * The sorted matches of a query as of the last write (`stale`: a cursor's, up to CURSOR_SORTED_MS older), made in
	 * time slices and kept for the next reads (the total of the same query too).
	 */
	private async sortedMatches(q: Filter, sort: Record<string, 1 | -1>, stale: boolean): Promise<Sorted> {
		const key = keyOf([q, sort]);
		const had = this.sorted.get(key);
		if (had && (had.gen === this.gen || (stale && Date.now() - had.at < CURSOR_SORTED_MS))) {
			// Most recently used last: evicted last.
			this.sorted.delete(key);
			this.sorted.set(key, had);
			return had;
		}
		const gen = this.gen;
		const slices = new Slices();
		const fields = Object.keys(sort);
		const matches = await this.matching(q);
		const rows: Row[] = new Array(matches.length);
		for (let i = 0; i < matches.length; i++) {
			rows[i] = { d: matches[i], k: fields.map((f) => model.getDotValue(matches[i], f)) };
			if ((i & 255) === 255 && slices.due) await slices.next();
		}
		const made: Sorted = { gen, at: Date.now(), rows: await sortInSlices(rows, this.order(sort), slices) };
		// A write while this read yielded: what it read may be older than the write, so it is not kept as current.
		if (gen === this.gen) this.remember(`c${keyOf(q)}`, rows.length);
		const before = this.sorted.get(key);
		if (before) this.sortedRows -= before.rows.length;
		this.sorted.delete(key);
		this.sorted.set(key, made);
		this.sortedRows += rows.length;
		// Least recently used first; past its cursor time, sorted matches older than the last write serve nobody.
		for (const [k, v] of this.sorted) {
			if (v === made) break;
			const expired = v.gen !== this.gen && Date.now() - v.at >= CURSOR_SORTED_MS;
			if (!expired && this.sorted.size <= MAX_SORTED && this.sortedRows <= MAX_SORTED_ROWS) continue;
			this.sorted.delete(k);
			this.sortedRows -= v.rows.length;
		}
		return made;
	}

	private project(docs: StoredDoc[], projection: FindOptions["projection"]): StoredDoc[] {
		if (!projection) return docs;
		try {
			return Cursor.prototype._project.call({ _projection: renameIdKeys(projection) }, docs);
		} catch (err) {
			throw badRequest(`projection is not supported by the document store: ${(err as Error).message}`);
		}
	}

	/**
	 * An in-order walk of the field's index (NeDB keeps an AVL tree per index) that skips the subtrees at or below
	 * `after` and stops after `limit` documents: O(log n + limit). A `find` of `{ field: { $gt: after } }` sorted and
	 * limited takes every later document as a candidate and sorts them all: the change stream's consumer groups read
	 * their batches so when they trail the outbox's memory tail (events/outbox-tail.ts), and a backlog of tens of
	 * thousands of events made each batch cost the whole backlog.
	 */
	firstAfter(field: string, after: number, limit: number): StoredDoc[] | undefined {
		type Node = { key?: number; data: StoredDoc[]; left?: Node | null; right?: Node | null };
		const root = ((this.db as any).indexes?.[field]?.tree?.tree ?? undefined) as Node | undefined;
		if (!root) return undefined;
		const out: StoredDoc[] = [];
		// True once `limit` documents are taken.
		const walk = (node: Node | null | undefined): boolean => {
			if (!node || !Object.prototype.hasOwnProperty.call(node, "key")) return false;
			const later = typeof node.key === "number" && node.key > after;
			if (later && walk(node.left)) return true;
			if (later)
				for (const d of node.data) {
					out.push(d);
					if (out.length >= limit) return true;
				}
			return walk(node.right);
		};
		if (limit > 0) walk(root);
		return out.map((d) => model.deepCopy(d));
	}

	/**
	 * A small query planner over NeDB's indexes. NeDB takes the last top-level equality key that has an index, even
	 * when it matches nearly everything (`deleted_at: null`), and never serves `$or` from indexes, so the default
	 * zone (`$or: [{owner}, {shares}]`) scanned the collection. Here every option is sized and the smallest wins:
	 * each indexed top-level equality, and each `$or` (top level or inside `$and`) whose branches all have one.
	 * The full query is still matched on the candidates, so the choice changes speed, never results. An `$or`'s
	 * candidates are its branches' lists as they are (the same document may be in several): `matching` skips repeats
	 * while it yields, where a union made here took 40-90 ms at once for a user's 60 000 notes.
	 */
	private candidates(q: Filter): StoredDoc[][] {
		const indexes = (this.db as any).indexes as Record<string, { getMatching(v: unknown): StoredDoc[] }>;
		const eq = (o: Filter): Array<[string, unknown]> =>
			Object.entries(o).filter(([k, v]) => k !== "_id" && indexes[k] && (v === null || ["string", "number", "boolean"].includes(typeof v)));
		let best: StoredDoc[][] | undefined;
		let size = 0;
		const offer = (lists: StoredDoc[][]) => {
			const n = lists.reduce((sum, l) => sum + l.length, 0);
			if (!best || n < size) [best, size] = [lists, n];
		};
		// An `_id` equality is as selective as it gets: NeDB's own path.
		if (typeof q._id === "string") return [(this.db as any)._getRawCandidates(q)];
		for (const [k, v] of eq(q)) offer([indexes[k].getMatching(v)]);
		for (const [k, v] of Object.entries(q))
			if (indexes[k] && v && typeof v === "object" && Array.isArray((v as { $in?: unknown }).$in)) offer([indexes[k].getMatching((v as { $in: unknown[] }).$in)]);
		const ors = [q.$or, ...(Array.isArray(q.$and) ? (q.$and as Filter[]).map((a) => a?.$or) : [])].filter(Array.isArray) as Filter[][];
		// A branch is served by its first indexed equality, else its first indexed `$in` (the group zone:
		// `{groups: {$in}, "clients.0": cid}`).
		const pick = (b: Filter): [string, unknown] | undefined => {
			const e = eq(b)[0];
			if (e) return e;
			const inKey = Object.entries(b).find(([k, v]) => k !== "_id" && indexes[k] && v && typeof v === "object" && Array.isArray((v as { $in?: unknown }).$in));
			return inKey ? [inKey[0], (inKey[1] as { $in: unknown[] }).$in] : undefined;
		};
		for (const branches of ors) {
			const picks = branches.map((b) => (b && typeof b === "object" ? pick(b) : undefined));
			if (!picks.length || picks.some((p) => !p)) continue;
			offer((picks as Array<[string, unknown]>).map(([k, v]) => indexes[k].getMatching(v)).filter((l) => l.length > 0));
		}
		return best ?? [(this.db as any)._getRawCandidates(q)];
	}

	private remember(key: string, value: unknown): void {
		if (this.cache.size >= MAX_CACHED) this.cache.clear();
		this.cache.set(key, value);
	}

	findOne(q: Filter): Promise<StoredDoc | null> {
		return this.find({ query: q, limit: 1 }).then((d) => d[0] ?? null);
	}

	async count(query: Filter): Promise<number> {
		const q = toStoreQuery(query);
		const key = `c${keyOf(q)}`;
		const hit = this.cache.get(key) as number | undefined;
		if (hit !== undefined) return hit;
		await yieldIfDue();
		const gen = this.gen;
		try {
			const n = (await this.matching(q)).length;
			if (gen === this.gen) this.remember(key, n);
			return n;
		} catch (err) {
			throw queryError(err);
		}
	}

	/**
	 * Every write drops the read cache before (reads racing the write) and after it, and counts the lines it appended
	 * (`lines` of its result: documents inserted, updated or removed; `added`: the change in live documents).
	 */
	private async write<T>(fn: () => Promise<T>, lines: (r: T) => number, added: (r: T) => number = () => 0): Promise<T> {
		this.cache.clear();
		this.gen++;
		try {
			const r = await fn();
			this.appended += lines(r);
			this.live += added(r);
			if (this.file && !this.compacting && this.appended > COMPACT_FACTOR * Math.max(this.live, COMPACT_MIN_LINES)) void this.compact().catch(() => undefined);
			return r;
		} finally {
			this.cache.clear();
			this.gen++;
		}
	}

	// NeDB's promise API: the adapter's `insert` is its callback API promisified, two wrappers and a callbackify per
	// call around the same `insertAsync` (2 to 3 % of a create's CPU).
	insert(doc: StoredDoc): Promise<StoredDoc> {
		return this.write(() => this.db.insertAsync(doc), () => 1, () => 1);
	}

	insertMany(docs: StoredDoc[]): Promise<StoredDoc[]> {
		return this.write(() => this.db.insertAsync(docs), () => docs.length, () => docs.length);
	}

	setMany(ids: string[], set: Record<string, unknown>): Promise<number> {
		return this.write(async () => (await this.db.update({ _id: { $in: ids } }, updateOf(set), { multi: true }))[0], (n) => n);
	}

	setOne(id: string, set: Record<string, unknown>): Promise<StoredDoc | null> {
		return this.write(async () => {
			const [n, doc] = await this.db.update({ _id: id }, updateOf(set), { returnUpdatedDocs: true });
			return n ? (doc as StoredDoc) : null;
		}, updatedLines);
	}

	removeMany(q: Filter): Promise<number> {
		return this.write(() => this.db.remove(toStoreQuery(q), { multi: true }), (n) => n, (n) => -n);
	}

	/** Rewrites the file with the live documents only; one rewrite at a time (a request meanwhile joins it). */
	compact(): Promise<void> {
		if (!this.file) return Promise.resolve();
		this.compacting ??= (async () => {
			try {
				const appendedBefore = this.appended;
				await (this.db as unknown as { compactDatafileAsync(): Promise<void> }).compactDatafileAsync();
				// Writes queued behind the rewrite in NeDB's executor appended after it.
				this.appended = Math.max(0, this.appended - appendedBefore);
				this.live = this.liveDocuments();
			} finally {
				this.compacting = undefined;
			}
		})();
		return this.compacting;
	}

	private liveDocuments(): number {
		return (this.db as unknown as { getAllData(): unknown[] }).getAllData().length;
	}

	updateIf(query: Filter, update: Record<string, unknown>): Promise<StoredDoc | null> {
		return this.write(async () => {
			const [n, doc] = await this.db.update(toStoreQuery(query), update, { returnUpdatedDocs: true, multi: false });
			return n ? (doc as StoredDoc) : null;
		}, updatedLines);
	}

	replaceIf(query: Filter, doc: StoredDoc): Promise<boolean> {
		return this.write(async () => {
			const { _id, ...rest } = doc;
			const [n] = await this.db.update({ ...toStoreQuery(query), _id }, rest, { multi: false });
			return n > 0;
		}, updatedLines);
	}

	async ping(): Promise<boolean> {
		return !!this.adapter.db;
	}
}
