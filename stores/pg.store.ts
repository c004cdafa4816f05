/**
 * The document store: one table per collection, `(id text, doc jsonb)`, in the
 * database at DATABASE_URL (the embedded PostgreSQL under DATA_DIR when unset, runtime/relational.ts), shared by every
 * node. Queries are translated to parameterised SQL (stores/pg.query.ts); writes join the caller's unit of
 * work (stores/unit.ts), so a document and its change events commit together.
 *
 * Each document is stored once, as jsonb (`doc`): what queries and indexes read is what a read returns, and
 * PostgreSQL parses a written document once. A document read back has jsonb's key order (shorter keys first, then
 * by bytes), not the order it was written in; equal as a document, not as text (docs/decisions.md, "Documents stored
 * once as jsonb"). Tables of the earlier form (the JSON text `body` beside a `doc` generated from it) are made this
 * form at connect (`storeOnce`), every document kept.
 *
 * Indexes: GIN `jsonb_path_ops` on the document (every top-level equality: the zones' owner, shares, groups,
 * clients, and `ref`), `created_at` (the common sort), the soft-deleted rows (partial), unique `tenant_ref`
 * (sparse), and the engine's extra sort fields; `id` is the primary key. The owner zone has its own: a stored
 * generated column `owner` (the document's owner when a string) and b-trees on (`owner`, `created_at`, `id`) and
 * (`owner`, `id`) of the live rows, so that the caller's page walks 20 index entries and its exact total counts index
 * entries, whatever the size of the collection (pg.query.ts ownerSplit).
 */
import { createHash } from "crypto";
import type { PoolClient } from "pg";
import { openRelational, releaseRelational, SCHEMA_LIMIT_MS, type NamedStatement, type Relational } from "../runtime/relational";
import type { PlatformConfig } from "../runtime/config";
import { ApiError, badRequest } from "../lib/errors";
import type { DocumentStore, FindOptions, Filter, Keyset, KeysetPage, Page, StoredDoc, WriteOptions } from "./types";
import { Slices, TENANT_REF, updateOf } from "./types";
import { afterOf, bind, keyColumns, lit, orderOf, orderOfKeys, OWNER_COLUMN, ownerColumn, ownerSplit, Params, sortKeys, valueAt, whereOf, type SortKey } from "./pg.query";
import { holdWrite, inUnit, openTransaction, unitDeadline, unitTransaction, type Held } from "./unit";
import { applyUpdate, checkKeys, matches, project } from "../lib/query";
import { acquireDocCache, docsTriggerCheck, docsTriggerDdl, docsTriggerDrop, releaseDocCache, type DocCache } from "./doc-cache";

export type PgConfig = Pick<PlatformConfig, "dataDir"> & Partial<Pick<PlatformConfig, "databaseUrl" | "docCacheSize">>;
type Query = <R = Record<string, unknown>>(text: string, params?: unknown[]) => Promise<{ rows: R[]; rowCount: number | null }>;

/** Errors of the caller's data or query: 400, never 500. */
export function pgError(err: unknown): Error {
	if (err instanceof ApiError) return err;
	const e = err as { code?: string; message?: string };
	if (e?.code === "22P05" || e?.code === "22021" || (e?.code === "22P02" && /json|unicode/i.test(e.message ?? "")))
		return badRequest("text containing NUL characters or unpaired surrogates cannot be stored");
	// SQL/JSON errors (2203x) and an invalid or too complex regular expression (2201B).
	if (typeof e?.code === "string" && (e.code.startsWith("2203") || e.code === "2201B")) return badRequest(`query is not supported by the document store: ${e.message}`);
	return err as Error;
}

/**
 * Statement names by text, so that PostgreSQL parses and plans a statement seen before once per connection (for a
 * read by id that was most of its server time). Bounded: statement texts follow the shapes of filters, which callers
 * choose, and each name costs memory on every pooled connection; later texts run unnamed.
 */
const NAMES = new Map<string, string>();
export const MAX_NAMED_STATEMENTS = 200;

function statement(text: string, values?: unknown[]): NamedStatement | string {
	let name = NAMES.get(text);
	if (name === undefined && NAMES.size < MAX_NAMED_STATEMENTS) NAMES.set(text, (name = `docs_${NAMES.size}`));
	return name === undefined ? text : { name, text, values };
}

/**
 * The database of one configuration: statements run in the caller's unit of work when it has one (writes begin it),
 * else on the pool; `tx` runs several statements in one transaction (the unit's, or one of its own). A statement made
 * for a client's request has that request's deadline (runtime/relational.ts): this view's (`within`), else its unit's.
 */
export class PgDatabase {
	private views?: Map<number, PgDatabase>;

	constructor(
		readonly rel: Relational,
		private readonly deadlineMs?: number,
	) {}

	/** This database with every statement under `deadlineMs` (a setting: one view per value, kept). */
	within(deadlineMs: number): PgDatabase {
		let v = this.views?.get(deadlineMs);
		if (!v) (this.views ??= new Map()).set(deadlineMs, (v = new PgDatabase(this.rel, deadlineMs)));
		return v;
	}

	/** The deadline of a statement made now. */
	get deadline(): number | undefined {
		return this.deadlineMs ?? unitDeadline();
	}

	private async on<R>(client: Promise<PoolClient> | PoolClient, text: string, params?: unknown[]) {
		const s = statement(text, params);
		const c = await client;
		const r = typeof s === "string" ? await c.query(s, params as unknown[]) : await c.query(s);
		return { rows: r.rows as R[], rowCount: r.rowCount };
	}

	read: Query = async (text, params) => {
		const c = openTransaction(this.rel);
		try {
			return c ? await this.on(c, text, params) : await this.rel.query(statement(text, params), params, this.deadline);
		} catch (err) {
			throw pgError(err);
		}
	};

	write: Query = async (text, params) => {
		const c = unitTransaction(this.rel);
		try {
			return c ? await this.on(c, text, params) : await this.rel.query(statement(text, params), params, this.deadline);
		} catch (err) {
			throw pgError(err);
		}
	};

	/**
	 * A write the caller's unit of work may hold back (stores/unit.ts: the outbox's append then runs it in its
	 * own statement); run at once when the unit cannot hold it, or outside a unit.
	 */
	async writeHeld(text: string, params: unknown[], rows?: Held["rows"]): Promise<void> {
		const s = statement(text, params);
		if (!holdWrite(this.rel, { ...(typeof s === "string" ? { text, values: params } : s), rows })) await this.write(text, params);
	}

	/** One statement on the pool, its own transaction, whatever unit of work the caller runs in. */
	alone: Query = (text, params) => this.aloneWithin(this.deadline, text, params);

	/** `alone` with the deadline given (none: the server's limits), whatever the caller's. */
	async aloneWithin<R = Record<string, unknown>>(deadlineMs: number | undefined, text: string, params?: unknown[]) {
		try {
			return await this.rel.query<R>(statement(text, params), params, deadlineMs);
		} catch (err) {
			throw pgError(err);
		}
	}

	/** A read with sorting discouraged (`enable_sort` off, no parallel workers: for this statement's transaction only). */
	readOrdered: Query = async (text, params) => {
		if (openTransaction(this.rel)) return this.read(text, params);
		try {
			return await this.rel.transaction(
				async (q) => {
					// A page of 20 along an index: starting a parallel worker costs more than the whole walk. One round trip.
					await q("set local enable_sort = off; set local max_parallel_workers_per_gather = 0");
					return q(text, params);
				},
				undefined,
				this.deadline,
			);
		} catch (err) {
			throw pgError(err);
		}
	};

	async tx<T>(fn: (q: Query) => Promise<T>): Promise<T> {
		const unit = unitTransaction(this.rel);
		if (unit) return fn(<R>(text: string, params?: unknown[]) => this.on<R>(unit, text, params).catch((err) => Promise.reject(pgError(err))));
		const client = await this.rel.client(this.deadline);
		const q: Query = async (text, params) => {
			try {
				return await this.on(client, text, params);
			} catch (err) {
				throw pgError(err);
			}
		};
		try {
			await client.query("begin");
			const out = await fn(q);
			await client.query("commit");
			client.release();
			return out;
		} catch (err) {
			await client.query("rollback").catch(() => undefined);
			client.release();
			throw err;
		}
	}
}

/** A quoted table (or index) identifier: short names as they are, long ones shortened with a hash (63 bytes). */
export function ident(name: string): string {
	return `"${tableName(name).replace(/"/g, '""')}"`;
}

/** The table's name as PostgreSQL reports it (TG_TABLE_NAME): unquoted, long names shortened as `ident` does. */
export function tableName(name: string): string {
	return Buffer.byteLength(name) <= 60 ? name : `${name.slice(0, 36)}#${createHash("sha256").update(name).digest("hex").slice(0, 16)}`;
}

/**
 * Compare-and-set attempts before updateIf takes row locks instead. One: a row that many writers race for (40
 * concurrent increments of one document lost 173 races at five attempts each) is better served by the lock queue.
 */
const CAS_TRIES = 1;
const LOST = Symbol("lost race");

/** A `$set` PostgreSQL can apply to the stored JSON with applyUpdate's result: plain top-level keys, defined values, never `id`. */
function inPlace(update: Record<string, unknown>): update is { $set: Record<string, unknown> } {
	const keys = Object.keys(update);
	if (keys.length !== 1 || keys[0] !== "$set") return false;
	const set = update.$set as Record<string, unknown>;
	return Object.entries(set).every(([k, v]) => k !== "id" && !k.includes(".") && !k.startsWith("$") && v !== undefined);
}

/** Rows of a filter SQL cannot select exactly, read per statement: at first, and at most (it doubles). */
const FIRST_BATCH = 100;
const MAX_BATCH = 1000;

type KeyedRow = { doc: StoredDoc } & Record<`k${number}`, [unknown] | []>;

/** The keyset of a row read with keyColumns. */
const keysetOf = (row: KeyedRow, keys: SortKey[]): Keyset => ({ values: keys.map((_k, i) => row[`k${i}`]), id: row.doc.id });

/** A page's sort key columns (`s0`, `s1`... for the keys of sortKeys; `id` is read as itself). */
const pageColumns = (keys: SortKey[]) => keys.map((k, i) => (k.expr === "id" ? "" : `, ${k.expr} as s${i}`)).join("");

/** ORDER BY of a page's columns (pageColumns), of `alias`. */
const pageOrder = (keys: SortKey[], alias: string) => keys.map((k, i) => `${alias}${k.expr === "id" ? "id" : `s${i}`} ${k.dir}`).join(", ");

/** 400 for a read that would match more than `n` rows one by one (FindOptions.examine). */
const tooManyExamined = (n: number) => badRequest(`query is too expensive: it would examine more than ${n} documents one by one; narrow the query`);

const LIVE = () => whereOf({ deleted_at: null }, new Params()).sql;

/** Keys whose equality selects few rows through an index: a page filtered by one is better sorted than walked. */
const SELECTIVE = ["owner", "shares", "groups", "clients", "clients.0", "ref", TENANT_REF, "id"];

/**
 * Rows stay uncompressed in the table up to 8 KB (PostgreSQL compresses rows above about 2 KB by default): a filter
 * reads several fields of `doc` per row and a compressed `doc` is decompressed again for each of them (a list of 20
 * of a user's 100 notes of 1 KB spent about a third of its execution there). Larger rows are compressed as before.
 */
const INLINE = "toast_tuple_target = 8160";

/**
 * The one id a filter in store form pins: `id` equal to a string at its top, or in an element of a top-level `$and`
 * (recursively); undefined when it pins none (a document must have that id to match, whatever else the filter says).
 */
export function pinnedId(q: Filter): string | undefined {
	const v = q.id;
	if (typeof v === "string") return v;
	if (v && typeof v === "object" && !Array.isArray(v) && Object.keys(v).length === 1 && typeof (v as { $eq?: unknown }).$eq === "string") return (v as { $eq: string }).$eq;
	if (Array.isArray(q.$and))
		for (const x of q.$and) {
			const id = x && typeof x === "object" ? pinnedId(x as Filter) : undefined;
			if (id !== undefined) return id;
		}
	return undefined;
}

/** Serialises schema changes of every node and store (concurrent `create table if not exists` can collide). */
export const DDL_LOCK = "select pg_advisory_xact_lock(hashtext('platform-documents-ddl'))";

/**
 * The comment a document table carries once its documents are of the current form: each holds its id as `id`, equal
 * to the row's `id` column, and none holds `_id` (the key of the earlier form). Set in the transaction that makes the
 * table or rewrites its documents (connect), so a table either carries it and holds no `_id`, or holds documents
 * still to rewrite; connect reads it from the catalog (pg_description), never from the table's rows. Followed by
 * ` schema:<hash>` once connect has also made the table's indexes and triggers as these sources want them.
 */
export const DOCS_FORM = "platform-docs:v3";

/**
 * A document (the SQL jsonb `doc`) in the current form: one of the earlier form, holding `_id`, gets it as `id` (the
 * id its row is keyed by), without `_id`; one of the current form is left as it is.
 */
export const idKeyed = (doc: string) => `(case when ${doc} ? '_id' then jsonb_set(${doc} - '_id', '{id}', ${doc}->'_id') else ${doc} end)`;

export class PgStore implements DocumentStore {
	readonly kind = "postgres" as const;
	private db?: PgDatabase;
	private readonly table: string;
	/** The table's name in the documents' notifications (stores/doc-cache.ts). */
	private readonly notified: string;
	private readonly short: string;
	/** The database's document cache (stores/doc-cache.ts), while connected. */
	private cache?: DocCache;

	constructor(
		private readonly cfg: PgConfig,
		readonly name: string,
		private readonly extraIndexes: string[] = [],
	) {
		this.table = ident(`docs/${name}`);
		this.notified = tableName(`docs/${name}`);
		this.short = createHash("sha256").update(name).digest("hex").slice(0, 12);
	}

	/** Set on a view of the store (`within`): the deadline of its statements. */
	private readonly deadlineMs?: number;
	private views?: Map<number, PgStore>;

	private get d(): PgDatabase {
		if (!this.db) throw new Error(`document store ${this.name} is not connected`);
		return this.deadlineMs === undefined ? this.db : this.db.within(this.deadlineMs);
	}

	/**
	 * A view of this store whose statements have `deadlineMs` (a request's): it reads the store's connection as it is
	 * now (connected, or not any more), and connects and disconnects the store itself. One per value, kept.
	 */
	within(deadlineMs: number): PgStore {
		let v = this.views?.get(deadlineMs);
		if (!v) {
			v = Object.create(this, {
				deadlineMs: { value: deadlineMs },
				connect: { value: () => this.connect() },
				disconnect: { value: () => this.disconnect() },
			}) as PgStore;
			(this.views ??= new Map()).set(deadlineMs, v);
		}
		return v;
	}

	async connect(): Promise<void> {
		const rel = await openRelational(this.cfg);
		this.db = new PgDatabase(rel);
		const t = this.table;
		const schema = this.schema();
		// A table whose comment names this schema was made (or brought to it) by a connect of these sources: nothing
		// to check, one catalog read instead of a transaction of 16 statements under the DDL lock (a platform's start
		// connects some sixty stores). Any other comment, or none, takes the whole path below, which ends by writing it.
		const marked = await rel.query<{ c: string | null }>(`select obj_description(to_regclass($1), 'pg_class') as c`, [t]);
		if (marked.rows[0]?.c !== schema.mark)
			await rel.transaction(async (q) => {
				await q(DDL_LOCK);
				await q(schema.table);
				// Tables of the earlier forms (`body` beside a generated `doc`, with or without `owner`): made this form, once.
				await this.storeOnce(q);
				await this.idOnce(q);
				// Tables made before: only when not set yet (the lock it takes waits for a running vacuum of the table).
				const inline = await q(`select 1 from pg_class where oid = to_regclass($1) and coalesce(reloptions, '{}') @> array[$2]`, [t, INLINE.replace(/ /g, "")]);
				if (!inline.rows.length) await q(`alter table ${t} set (${INLINE})`);
				for (const ddl of schema.indexes) await q(ddl);
				// Triggers are changed only when they are not as wanted (DROP TRIGGER locks the table, as CREATE does).
				const check = docsTriggerCheck(t);
				const triggers = (await q(check.text, check.values)).rows[0].n;
				if (this.cached && triggers !== 4) for (const ddl of docsTriggerDdl(t)) await q(ddl);
				if (!this.cached && triggers) for (const ddl of docsTriggerDrop(t)) await q(ddl);
				await q(`comment on table ${t} is ${lit(schema.mark)}`);
			}, SCHEMA_LIMIT_MS);
		if (!this.cached) return;
		this.cache = acquireDocCache(rel, this.cfg.docCacheSize);
		void this.cache.start();
	}

	/**
	 * The table's schema as these sources make it: its CREATE TABLE, its indexes, and the comment that marks a table
	 * holding both (DOCS_FORM, and a hash of every statement here and of the triggers wanted), so that a change of any
	 * of them in a later version takes the whole path of connect once.
	 */
	private schema(): { table: string; indexes: string[]; mark: string } {
		const t = this.table;
		const i = (s: string) => ident(`docs_${this.short}_${s}`);
		const table = `create table if not exists ${t} (id text collate "C" primary key, doc jsonb not null, owner text generated always as (${OWNER_COLUMN}) stored) with (${INLINE})`;
		const indexes = [
			// No pending list: rows inserted since the last vacuum would make the index look costly and zone reads scan.
			`create index if not exists ${i("doc")} on ${t} using gin (doc jsonb_path_ops) with (fastupdate = off)`,
			`create unique index if not exists ${i("tref")} on ${t} ((doc->${lit(TENANT_REF)})) where doc ? ${lit(TENANT_REF)}`,
			// The common sort (and, walked backwards, root's newest-first pages). Not partial on the live rows: PostgreSQL
			// cannot estimate the soft-delete condition and would take such an index for selective, walking every live
			// row where the GIN index finds a zone's few directly.
			`create index if not exists ${i("created_at")} on ${t} (${valueAt("created_at")} nulls first, id)`,
			// The soft-deleted rows (restore, the cleaner's purge): few, and a predicate live queries never imply. Named
			// after the form of the condition (`deleted` had an earlier one, which no query matches any more).
			`drop index if exists ${i("deleted")}`,
			`create index if not exists ${i("deleted_v2")} on ${t} (id) where not ${LIVE()}`,
			// The owner zone's live rows in the two common orders: a page walks 20 entries, the total counts index entries
			// (index-only); the rows whose `owner` is an array (none, as the platform writes documents) for the rest.
			`create index if not exists ${i("owner_created")} on ${t} (owner, ${valueAt("created_at")} nulls first, id) where owner is not null and ${LIVE()}`,
			`create index if not exists ${i("owner_id")} on ${t} (owner, id) where owner is not null and ${LIVE()}`,
			`create index if not exists ${i("owner_array")} on ${t} (id) where jsonb_typeof(doc->'owner') = 'array'`,
			...this.extraIndexes.map((f) => `create index if not exists ${i(`x_${f}`)} on ${t} (${valueAt(f)} nulls first, id)`),
		];
		// Every write of a collection's table, whoever makes it, notifies the document caches of every node at its
		// commit. The platform's own stores (`_`-named: positions, the audit spool, idempotency records...) are never
		// read through the cache, so their writes (several per request) notify nobody.
		const triggers = this.cached ? docsTriggerDdl(t) : docsTriggerDrop(t);
		const hash = createHash("sha256")
			.update([table, INLINE, ...indexes, ...triggers].join("\0"))
			.digest("hex")
			.slice(0, 16);
		return { table, indexes, mark: `${DOCS_FORM} schema:${hash}` };
	}

	/** Whether gets of this store are answered through the document cache: the catalog's collections, not the platform's own stores. */
	private get cached(): boolean {
		return !this.name.startsWith("_");
	}

	/**
	 * A table of the earlier form, `(id, body json, doc jsonb generated from body, owner generated from body)` (every
	 * document stored twice: the JSON text as written, and its jsonb), or of the one before it (no `owner` yet),
	 * becomes `(id, doc jsonb, owner)`, every document kept: the generated columns go (and the indexes on them, which
	 * connect's `create index if not exists` make again), `body` becomes jsonb, the `owner` column is made again from
	 * it, and `body` is renamed `doc`. One ALTER TABLE, so PostgreSQL rewrites the table (and builds its indexes again)
	 * once, holding it locked meanwhile (docs/decisions.md, "Documents stored once as jsonb"). In connect's
	 * transaction: a failure leaves the table as it was. Nothing to do for a table of the current form.
	 */
	private async storeOnce(q: Query): Promise<void> {
		const t = this.table;
		const body = await q(`select 1 from pg_attribute where attrelid = to_regclass($1) and attname = 'body' and not attisdropped`, [t]);
		if (!body.rows.length) return;
		await q(
			`alter table ${t} drop column if exists owner, drop column if exists doc, alter column body type jsonb using body::jsonb, ` +
				`add column owner text generated always as (${ownerColumn("body")}) stored`,
		);
		await q(`alter table ${t} rename column body to doc`);
	}

	/**
	 * The documents of a table not marked DOCS_FORM (made by an earlier version, or just now) rewritten to the current
	 * form (idKeyed: `_id` becomes `id`), then the table marked. In connect's transaction, under the DDL lock: every
	 * node waits for the one that rewrites, and a failure leaves the table and its mark as they were. A marked table
	 * costs one catalog read per connect; an unmarked one of n rows, one update reading every row once (a rewrite of
	 * the rows that hold `_id`).
	 */
	private async idOnce(q: Query): Promise<void> {
		const t = this.table;
		const mark = (await q(`select obj_description(to_regclass($1), 'pg_class') as c`, [t])).rows[0]?.c as string | null | undefined;
		if (mark === DOCS_FORM || mark?.startsWith(`${DOCS_FORM} `)) return;
		await q(`update ${t} set doc = ${idKeyed("doc")} where doc ? '_id'`);
		await q(`comment on table ${t} is ${lit(DOCS_FORM)}`);
	}

	async disconnect(): Promise<void> {
		if (!this.db) return;
		const rel = this.db.rel;
		this.db = undefined;
		if (this.cache) releaseDocCache(rel);
		this.cache = undefined;
		await releaseRelational(this.cfg);
	}

	/** SQL for a platform filter, and whether it is exact (else the rows are matched in JavaScript too). */
	private where(query: Filter, p: Params) {
		return whereOf(query, p);
	}

	/**
	 * A page in index order: PostgreSQL cannot estimate how many rows a JSON path or a containment keeps (it assumes
	 * very few), so for a page of a broad filter (root's list: every live row, a different query each time) it reads
	 * all matches and sorts them, where walking the sort's index stops after the page. Pages sorted by `id` or
	 * `created_at` whose filter names no selective key (a zone's owner, shares, groups, clients, a ref or an id) are
	 * read with sorting discouraged, so the index order wins.
	 */
	private ordered(o: FindOptions): boolean {
		const first = Object.keys(o.sort ?? { id: 1 })[0];
		if (!o.limit || (first !== "id" && first !== "created_at")) return false;
		const text = JSON.stringify(o.query);
		return !SELECTIVE.some((k) => text.includes(`"${k}"`));
	}

	private match(docs: StoredDoc[], query: Filter): StoredDoc[] {
		return docs.filter((d) => matches(d, query));
	}

	/**
	 * The rows of a filter SQL cannot select exactly (what it selects is a superset), in sort order from a keyset, a
	 * batch at a time (FIRST_BATCH rows, doubling up to MAX_BATCH), each batch after the last row of the one before (a
	 * keyset, never an offset), each row matched in JavaScript in time slices. Memory: one batch, whatever the rows.
	 */
	private async *batches(
		query: Filter,
		sort: Record<string, 1 | -1>,
		after: Keyset | undefined,
		examine?: number,
	): AsyncGenerator<Array<{ doc: StoredDoc; matched: boolean; at: () => Keyset }>> {
		const keys = sortKeys(sort);
		const slices = new Slices();
		let from = after?.values;
		for (let batch = FIRST_BATCH, read = 0; ; batch = Math.min(2 * batch, MAX_BATCH)) {
			// One row past the bound is enough to know it is passed (the reader then stops: tooManyExamined).
			if (examine !== undefined) batch = Math.min(batch, examine + 1 - read);
			if (batch <= 0) return;
			const p = new Params();
			const w = this.where(query, p);
			const sql = `select doc${keyColumns(keys)} from ${this.table} where ${w.sql}${from ? ` and ${afterOf(keys, from, p)}` : ""} order by ${orderOf(sort)} limit ${p.add(batch)}`;
			const rows = (await this.d.read(...bind(sql, p))).rows as KeyedRow[];
			const out = [];
			for (let i = 0; i < rows.length; i++) {
				const row = rows[i];
				out.push({ doc: row.doc, matched: matches(row.doc, query), at: () => keysetOf(row, keys) });
				if ((i & 15) === 15 && slices.due) await slices.next();
			}
			read += rows.length;
			yield out;
			if (rows.length < batch) return;
			from = keysetOf(rows[rows.length - 1], keys).values;
		}
	}

	/**
	 * The `skip`/`limit` window of an inexact filter's matches, from a keyset or the start, with their total when asked
	 * (every row is then read). Without a total, reading stops with the page: `next` then also passes the rows of the
	 * last batch that follow the page and do not match (the next page does not read them again).
	 */
	private async inexactWindow(o: FindOptions & { after?: Keyset }, withTotal: boolean): Promise<{ docs: StoredDoc[]; total: number; next?: Keyset }> {
		const docs: StoredDoc[] = [];
		let skip = o.after ? 0 : (o.skip ?? 0);
		let total = 0;
		let examined = 0;
		let next: Keyset | undefined;
		const full = () => !!o.limit && docs.length >= o.limit;
		read: for await (const batch of this.batches(o.query, this.sortOf(o), o.after, o.examine)) {
			for (const row of batch) {
				if (o.examine !== undefined && ++examined > o.examine) throw tooManyExamined(o.examine);
				if (full() && !withTotal) {
					if (row.matched) break read;
					next = row.at();
					continue;
				}
				if (!row.matched) continue;
				total++;
				if (skip > 0) skip--;
				else if (!full()) {
					docs.push(row.doc);
					next = row.at();
				}
			}
			if (full() && !withTotal) break;
		}
		return { docs: this.project(docs, o.projection), total, next: docs.length ? next : undefined };
	}

	private sortOf(o: FindOptions): Record<string, 1 | -1> {
		return o.sort ?? { id: 1 };
	}

	private project(docs: StoredDoc[], projection: FindOptions["projection"]): StoredDoc[] {
		if (!projection) return docs;
		return docs.map((d) => project(d, projection));
	}

	async find(o: FindOptions): Promise<StoredDoc[]> {
		return (await this.window(o, false)).docs;
	}

	/**
	 * The cursor's page: the rows after the keyset of the page before (an index range from there for the usual sorts),
	 * never an offset over the pages before; an inexact filter reads from the keyset on too.
	 */
	findAfter(o: FindOptions & { after?: Keyset }): Promise<KeysetPage> {
		return this.window(o, true);
	}

	/** A page of the sorted matches, from `skip` or after a keyset, and (`keyed`) the keyset of its last row. */
	private async window(o: FindOptions & { after?: Keyset }, keyed: boolean): Promise<KeysetPage> {
		const p = new Params();
		const w = this.where(o.query, p);
		if (!w.exact) return this.inexactWindow(o, false);
		const sort = o.sort;
		const keys = sortKeys(sort);
		const split = ownerSplit(o.query, p);
		let sql: string;
		if (split) {
			const { cte, page } = this.splitPage(split, keys, o, p);
			sql = `with ${cte} select t.doc${keyed ? keyColumns(keys) : ""} from (${page}) p join ${this.table} t using (id) order by ${pageOrder(keys, "p.")}`;
		} else {
			sql = `select doc${keyed ? keyColumns(keys) : ""} from ${this.table} where ${w.sql}${o.after ? ` and ${afterOf(keys, o.after.values, p)}` : ""} order by ${orderOf(sort)}`;
			if (o.limit) sql += ` limit ${p.add(o.limit)}`;
			if (o.skip && !o.after) sql += ` offset ${p.add(o.skip)}`;
		}
		const [text, values] = bind(sql, p);
		const rows = (!split && this.ordered(o) ? await this.d.readOrdered(text, values) : await this.d.read(text, values)).rows as KeyedRow[];
		const last = rows[rows.length - 1];
		return {
			docs: this.project(
				rows.map((r) => r.doc),
				o.projection,
			),
			next: keyed && last ? keysetOf(last, keys) : undefined,
		};
	}

	/**
	 * The ids and sort keys (`s0`, `s1`...) of a page of an owner zone (ownerSplit), as the CTE `o` (the other half's
	 * rows, read whole: few, the rows shared with the caller or in its groups; in a CTE so that PostgreSQL, which cannot
	 * estimate how few the containments select, does not walk the sort's index through the whole table for them) and the
	 * page: the owned half in sort order up to the page's end (a walk of its index), merged with `o`'s, cut to the page.
	 */
	private splitPage(split: { owned: string; others: string }, keys: SortKey[], o: FindOptions & { after?: Keyset }, p: Params): { cte: string; page: string } {
		const cols = pageColumns(keys);
		const after = o.after ? ` and ${afterOf(keys, o.after.values, p)}` : "";
		const skip = o.after ? 0 : (o.skip ?? 0);
		const end = o.limit ? p.add(o.limit + skip) : "all";
		const owned = `(select id${cols} from ${this.table} where ${split.owned}${after} order by ${orderOfKeys(keys)} limit ${end})`;
		return {
			cte: `o as materialized (select id${cols} from ${this.table} where ${split.others}${after})`,
			page: `select * from (${owned} union all (select * from o order by ${pageOrder(keys, "")} limit ${end})) u order by ${pageOrder(keys, "")} limit ${o.limit ? p.add(o.limit) : "all"} offset ${p.add(skip)}`,
		};
	}

	/** The count of an owner zone's owned half (from its index alone). */
	private ownedCount(split: { owned: string }): string {
		return `(select count(*) from ${this.table} where ${split.owned})`;
	}

	/**
	 * Page and total in one statement. An owner zone (ownerSplit): the page merged from its two halves, the total
	 * counted from the owner index. Otherwise the matches' ids and sort keys are collected once (the exact total has to
	 * evaluate the filter on every match anyway), counted, and the page is cut from them by a top-N sort. Either way the
	 * page's bodies are read by primary key and come back as rows, not aggregated into one JSON value: sending a user's
	 * page of 20 notes of 1 KB as one `json_agg` value cost the server about twice the CPU of the whole statement
	 * returning rows.
	 */
	async findPage(o: FindOptions): Promise<Page> {
		const p = new Params();
		const w = this.where(o.query, p);
		if (!w.exact) return this.inexactWindow(o, true);
		const keys = sortKeys(o.sort);
		const split = ownerSplit(o.query, p);
		let ctes: string;
		let total: string;
		if (split) {
			const { cte, page } = this.splitPage(split, keys, o, p);
			ctes = `${cte}, p as (${page})`;
			total = `${this.ownedCount(split)} + (select count(*) from o)`;
		} else {
			ctes =
				`m as materialized (select id${pageColumns(keys)} from ${this.table} where ${w.sql}), ` +
				`p as (select * from m order by ${pageOrder(keys, "")} limit ${o.limit ? p.add(o.limit) : "all"} offset ${p.add(o.skip ?? 0)})`;
			total = "select count(*) from m";
		}
		// One row per document of the page, the total on each; one row with a null document for an empty page.
		const sql = `with ${ctes} select (${total})::int as total, t.doc from (select) one left join (p join ${this.table} t on t.id = p.id) on true order by ${pageOrder(keys, "p.")}`;
		const rows = (await this.d.read(...bind(sql, p))).rows as { total: number; doc: StoredDoc | null }[];
		const docs = rows.flatMap((r) => (r.doc === null ? [] : [r.doc]));
		return { docs: this.project(docs, o.projection), total: rows[0].total };
	}

	/**
	 * A filter that pins one id (a get, a patch's target) is a primary-key read and the rest of the filter (zones, row
	 * filter, soft delete) matched in memory: lib/query.ts means what the SQL translation means (a property test,
	 * test/integration/query-sql.property.test.ts), and a plan per zone shape is no cheaper than the key's one row.
	 */
	async findOne(query: Filter): Promise<StoredDoc | null> {
		const id = pinnedId(query);
		if (id === undefined) return (await this.find({ query, limit: 1 }))[0] ?? null;
		const doc = (await this.d.read(`select doc from ${this.table} where id = $1`, [id])).rows[0]?.doc as StoredDoc | undefined;
		return doc && matches(doc, query) ? doc : null;
	}

	/**
	 * findOne for a read that only answers (the engine's `get`): a by-id query is served from the database's document
	 * cache (stores/doc-cache.ts, exact across nodes), matched in memory as findOne matches it. The document is frozen.
	 */
	async findOneCached(query: Filter): Promise<StoredDoc | null> {
		const id = pinnedId(query);
		const cache = this.cache;
		if (id === undefined || !cache) return this.findOne(query);
		const doc = await cache.read(
			this.notified,
			id,
			async () => ((await this.d.read(`select doc from ${this.table} where id = $1`, [id])).rows[0]?.doc as StoredDoc | undefined) ?? null,
		);
		return doc && matches(doc, query) ? doc : null;
	}

	async count(query: Filter, opts: Pick<FindOptions, "examine"> = {}): Promise<number> {
		const p = new Params();
		const w = this.where(query, p);
		if (w.exact) {
			const split = ownerSplit(query, p);
			// An owner zone: its two disjoint halves, the owned one counted from its index alone.
			const sql = split
				? `select (${this.ownedCount(split)} + (select count(*) from ${this.table} where ${split.others}))::int as n`
				: `select count(*)::int as n from ${this.table} where ${w.sql}`;
			return Number((await this.d.read(...bind(sql, p))).rows[0].n);
		}
		return (await this.inexactWindow({ query, examine: opts.examine }, true)).total;
	}

	async insert(doc: StoredDoc, opts?: WriteOptions): Promise<StoredDoc> {
		const sql = `insert into ${this.table} (id, doc) values ($1, $2::jsonb)`;
		const values = [doc.id, JSON.stringify(doc)];
		await (opts?.hold ? this.d.writeHeld(sql, values, { table: this.table, docs: [values[1]] }) : this.d.write(sql, values));
		return doc;
	}

	async insertMany(docs: StoredDoc[], opts?: WriteOptions): Promise<StoredDoc[]> {
		if (!docs.length) return docs;
		// One statement: all or nothing.
		const sql = `insert into ${this.table} (id, doc) select x->>'id', x from jsonb_array_elements($1::jsonb) x`;
		const texts = docs.map((d) => JSON.stringify(d));
		const values = [`[${texts.join(",")}]`];
		await (opts?.hold ? this.d.writeHeld(sql, values, { table: this.table, docs: texts }) : this.d.write(sql, values));
		return docs;
	}

	/** Writes documents back after a change made in JavaScript (applyUpdate). */
	private async rewrite(q: Query, docs: StoredDoc[]): Promise<void> {
		if (!docs.length) return;
		await q(`update ${this.table} t set doc = v.b from unnest($1::text[], $2::jsonb[]) as v(i, b) where t.id = v.i`, [docs.map((d) => d.id), docs.map((d) => JSON.stringify(d))]);
	}

	async setMany(ids: string[], set: Record<string, unknown>): Promise<number> {
		if (!ids.length) return 0;
		const update = updateOf(set);
		return this.d.tx(async (q) => {
			const { rows } = await q<{ doc: StoredDoc }>(`select doc from ${this.table} where id = any($1::text[]) order by id for update`, [ids]);
			await this.rewrite(
				q,
				rows.map((r) => applyUpdate(r.doc, update)),
			);
			return rows.length;
		});
	}

	/**
	 * A `$set` of top-level fields (a patch, a remove's stamps, a stream position) is one statement: PostgreSQL
	 * merges the fields into the stored document (`||`: each key given replaces the stored one or is added). Anything
	 * else (dotted paths, `$unset` of a cleared ref) reads and writes back.
	 */
	async setOne(id: string, set: Record<string, unknown>): Promise<StoredDoc | null> {
		const update = updateOf(set);
		if (!inPlace(update)) return this.updateIf({ id }, update);
		checkKeys(set);
		const { rows } = await this.d.write(`update ${this.table} set doc = doc || $2::jsonb where id = $1 returning doc`, [id, JSON.stringify(set)]);
		return (rows[0]?.doc as StoredDoc | undefined) ?? null;
	}

	async removeMany(query: Filter): Promise<number> {
		const p = new Params();
		const w = this.where(query, p);
		if (w.exact) return (await this.d.write(...bind(`delete from ${this.table} where ${w.sql}`, p))).rowCount ?? 0;
		const rows = (await this.d.read(...bind(`select doc from ${this.table} where ${w.sql}`, p))).rows.map((r) => r.doc as StoredDoc);
		const ids = this.match(rows, query).map((d) => d.id);
		if (!ids.length) return 0;
		return (await this.d.write(`delete from ${this.table} where id = any($1::text[])`, [ids])).rowCount ?? 0;
	}

	/**
	 * Outside a unit of work (workers' offsets and counters), a compare-and-set in two round trips instead of a
	 * locking transaction's four (begin, select for update, update, commit): the first matching document is read with
	 * its row version (`xmin`, which every update of the row changes) and written back only if the row is still that
	 * version. A writer that came in between makes the write change nothing; after CAS_TRIES lost races, the
	 * locking transaction, which queues writers instead. Inside a unit, the locking
	 * transaction: its statements run in the unit's transaction anyway.
	 */
	async updateIf(query: Filter, update: Record<string, unknown>): Promise<StoredDoc | null> {
		if (!inUnit())
			for (let i = 0; i < CAS_TRIES; i++) {
				const out = await this.casUpdate(query, update);
				if (out !== LOST) return out;
			}
		return this.lockedUpdate(query, update);
	}

	private async casUpdate(query: Filter, update: Record<string, unknown>): Promise<StoredDoc | null | typeof LOST> {
		const p = new Params();
		const w = this.where(query, p);
		const { rows } = await this.d.read<{ v: string; doc: StoredDoc }>(
			...bind(`select xmin::text as v, doc from ${this.table} where ${w.sql} order by id${w.exact ? " limit 1" : ""}`, p),
		);
		const row = (w.exact ? rows : rows.filter((r) => this.match([r.doc], query).length))[0] as { v: string; doc: StoredDoc } | undefined;
		if (!row) return null;
		const after = applyUpdate(row.doc, update);
		const { rowCount } = await this.d.write(`update ${this.table} set doc = $2::jsonb where id = $1 and xmin = $3::xid`, [after.id, JSON.stringify(after), row.v]);
		return rowCount ? after : LOST;
	}

	/**
	 * Locks the matching rows (`for update`: a concurrent writer waits, and PostgreSQL re-checks the condition on the
	 * row version it then sees), applies the update to the first one that still matches, writes it back.
	 */
	private lockedUpdate(query: Filter, update: Record<string, unknown>): Promise<StoredDoc | null> {
		const p = new Params();
		const w = this.where(query, p);
		return this.d.tx(async (q) => {
			const { rows } = await q<{ doc: StoredDoc }>(...bind(`select doc from ${this.table} where ${w.sql} order by id ${w.exact ? "limit 1 " : ""}for update`, p));
			const doc = (
				w.exact
					? rows
					: this.match(
							rows.map((r) => r.doc),
							query,
						).map((doc) => ({ doc }))
			)[0]?.doc as StoredDoc | undefined;
			if (!doc) return null;
			const after = applyUpdate(doc, update);
			await this.rewrite(q, [after]);
			return after;
		});
	}

	replaceIf(query: Filter, doc: StoredDoc): Promise<boolean> {
		const p = new Params();
		const w = this.where({ $and: [query, { id: doc.id }] }, p);
		return this.d.tx(async (q) => {
			const { rows } = await q<{ doc: StoredDoc }>(...bind(`select doc from ${this.table} where ${w.sql} for update`, p));
			const found = w.exact
				? rows.length > 0
				: this.match(
						rows.map((r) => r.doc),
						query,
					).length > 0;
			if (!found) return false;
			await this.rewrite(q, [doc]);
			return true;
		});
	}

	async ping(): Promise<boolean> {
		return !!this.db && (await this.db.rel.ping());
	}
}
