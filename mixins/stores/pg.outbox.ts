/**
 * The transactional outbox on PostgreSQL (DOCUMENT_STORE=postgres): change events are rows of `_outbox` in the same
 * database as the documents, inserted in the writer's unit of work (mixins/stores/unit.ts) and committed with the
 * documents they describe, in one transaction.
 *
 * Commit order without clocks: an append takes a transaction-level advisory lock before it draws its positions from
 * a sequence, and holds it until its transaction ends. So positions are drawn in commit order, and a transaction
 * that could still commit a lower position no longer exists once a higher one is visible: a reader that has seen
 * position N has seen everything below N that will ever exist (aborted appends leave gaps, never late arrivals).
 * The lock covers only the end of a write (insert the events, commit), so writes still run in parallel.
 */
import type { PoolClient } from "pg";
import { openRelational, releaseRelational, SCHEMA_LIMIT_MS, type Relational } from "../../lib/relational";
import { DDL_LOCK, PgDatabase, type PgConfig } from "./pg.store";
import { commitUnit, takeHeld } from "./unit";

const TABLE = `"_outbox"`;
const SEQUENCE = `"_outbox_seq"`;
/**
 * One statement, one round trip: the lock is an InitPlan of a one-time filter, so it is taken before the first
 * position is drawn; the n-th smallest position goes to the n-th record. With `held` (a document write the unit of
 * work held back, mixins/stores/unit.ts), that write is the statement's first part, `d`, and the lock waits for it
 * (it counts d's rows): the documents are written, and a duplicate key fails the statement, before any lock is taken
 * or position drawn, as when they were a statement of their own. Its parameters come first.
 */
function appendSql(held?: string, heldParams = 0): string {
	const $n = (i: number) => `$${heldParams + i}`;
	return (
		`with ${held ? `d as (${held} returning 1), ` : ""}s as materialized (select nextval('${SEQUENCE}') as seq from generate_series(1, ${$n(1)}::int) ` +
		`where (select count(*) from (select pg_advisory_xact_lock(hashtext('platform-outbox-append'))${held ? " from (select count(*) from d) w" : ""}) l) = 1), ` +
		`n as (select seq, row_number() over (order by seq) as i from s) ` +
		`insert into ${TABLE} (seq, rec) select n.seq, u.r from n join unnest(${$n(2)}::jsonb[]) with ordinality u(r, o) on u.o = n.i returning seq`
	);
}
const APPEND = appendSql();

export interface PgOutboxRow<T> {
	seq: number;
	rec: T;
}

export class PgOutbox {
	private db?: PgDatabase;

	constructor(private readonly cfg: PgConfig) {}

	private get d(): PgDatabase {
		if (!this.db) throw new Error("outbox is not connected");
		return this.db;
	}

	get relational(): Relational | undefined {
		return this.db?.rel;
	}

	async connect(): Promise<void> {
		const rel = await openRelational(this.cfg);
		await rel.transaction(async (q) => {
			await q(DDL_LOCK);
			await q(`create sequence if not exists ${SEQUENCE}`);
			await q(`create table if not exists ${TABLE} (seq bigint primary key, at timestamptz not null default now(), rec jsonb not null)`);
			await q(`create index if not exists "_outbox_at" on ${TABLE} (at)`);
		}, SCHEMA_LIMIT_MS);
		this.db = new PgDatabase(rel);
	}

	async disconnect(): Promise<void> {
		if (!this.db) return;
		this.db = undefined;
		await releaseRelational(this.cfg);
	}

	/**
	 * Inserts the records in the current unit of work's transaction (the one holding the documents they describe)
	 * and commits it; with the unit's held-back document write, in one statement with it, its own transaction;
	 * outside a unit, in a statement of their own. Returns their positions, in order.
	 */
	async append<T>(records: T[]): Promise<number[]> {
		const db = this.d;
		const recs = [records.length, records.map((r) => JSON.stringify(r))];
		const held = takeHeld(db.rel);
		// Otherwise in the unit's transaction; outside one, the statement is a transaction of its own (the lock is held until it commits).
		const { rows } = held ? await db.alone(appendSql(held.text, held.values?.length ?? 0), [...(held.values ?? []), ...recs]) : await db.write(APPEND, recs);
		const seqs = rows.map((r) => Number(r.seq)).sort((a, b) => a - b);
		await commitUnit(db.rel);
		return seqs;
	}

	async readFrom<T>(after: number, limit: number): Promise<PgOutboxRow<T>[]> {
		const { rows } = await this.d.read(`select seq, rec from ${TABLE} where seq > $1 order by seq limit $2`, [after, limit]);
		return rows.map((r) => ({ seq: Number(r.seq), rec: r.rec as T }));
	}

	/** Removes what every consumer has passed, and what is older than the retention whoever lags. */
	async prune(passedAll: number, retentionHours: number): Promise<number> {
		const { rowCount } = await this.d.write(`delete from ${TABLE} where seq <= $1 or at < now() - make_interval(hours => $2::int)`, [passedAll, Math.ceil(retentionHours)]);
		return rowCount ?? 0;
	}

	async count(): Promise<number> {
		return Number((await this.d.read(`select count(*)::int as n from ${TABLE}`)).rows[0].n);
	}

	/** The newest position (0 when empty): every record at or below it is committed, every later one will be above. */
	async head(): Promise<number> {
		return Number((await this.d.read(`select coalesce(max(seq), 0) as n from ${TABLE}`)).rows[0].n);
	}

	async ping(): Promise<boolean> {
		return !!this.db && (await this.db.rel.ping());
	}
}

export type { PoolClient };
