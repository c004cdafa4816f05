/**
 * The transactional outbox on PostgreSQL (DOCUMENT_STORE=postgres): change events are rows of `_outbox` in the same
 * database as the documents, inserted in the writer's unit of work (stores/unit.ts) and committed with the
 * documents they describe, in one transaction.
 *
 * Commit order without clocks: an append takes a transaction-level advisory lock before it draws its positions from
 * a sequence, and holds it until its transaction ends. So positions are drawn in commit order, and a transaction
 * that could still commit a lower position no longer exists once a higher one is visible: a reader that has seen
 * position N has seen everything below N that will ever exist (aborted appends leave gaps, never late arrivals).
 * The lock covers only the end of a write (insert the events, commit), so writes still run in parallel. Appends that
 * need no transaction of their own (a create, events alone) commit in groups: one statement, one lock, one WAL flush
 * for all the appends that arrived while the previous group ran (`enqueue`).
 */
import { openRelational, releaseRelational, SCHEMA_LIMIT_MS, type Relational } from "../runtime/relational";
import { ApiError } from "../lib/errors";
import { DDL_LOCK, PgDatabase, type PgConfig } from "./pg.store";
import { listenOn, type Listening } from "./pg-listen";
import { commitUnit, openTransaction, takeHeld, unitDeadline, type Held } from "./unit";

/** The outbox's table and the sequence its positions are drawn from (a backup restores both: data-backup.ts). */
export const OUTBOX_TABLE = "_outbox";
export const OUTBOX_SEQUENCE = "_outbox_seq";
/** The channel every append notifies at its commit (events/feed.ts listens on it). */
export const OUTBOX_CHANNEL = "platform_outbox";
const TABLE = `"${OUTBOX_TABLE}"`;
const SEQUENCE = `"${OUTBOX_SEQUENCE}"`;
const LOCK = "pg_advisory_xact_lock(hashtext('platform-outbox-append'))";
/** Delivered to the listeners when the append's transaction commits, once per transaction (PostgreSQL folds repeats). */
const NOTIFY = `pg_notify('${OUTBOX_CHANNEL}', '')`;
/**
 * One statement, one round trip: the lock is an InitPlan of a one-time filter, so it is taken before the first
 * position is drawn; the n-th smallest position goes to the n-th record. With `held` (a document write the unit of
 * work held back, stores/unit.ts), that write is the statement's first part, `d`, and the lock waits for it
 * (it counts d's rows): the documents are written, and a duplicate key fails the statement, before any lock is taken
 * or position drawn, as when they were a statement of their own. Its parameters come first.
 */
function appendSql(held?: string, heldParams = 0): string {
	const $n = (i: number) => `$${heldParams + i}`;
	return (
		`with ${held ? `d as (${held} returning 1), ` : ""}s as materialized (select nextval('${SEQUENCE}') as seq from generate_series(1, ${$n(1)}::int) ` +
		`where (select count(*) from (select ${LOCK}, ${NOTIFY}${held ? " from (select count(*) from d) w" : ""}) l) = 1), ` +
		`n as (select seq, row_number() over (order by seq) as i from s) ` +
		`insert into ${TABLE} (seq, rec) select n.seq, u.r from n join unnest(${$n(2)}::jsonb[]) with ordinality u(r, o) on u.o = n.i returning seq`
	);
}
const APPEND = appendSql();

/**
 * Group commit: the appends of several units that need no transaction of their own (a held create, or events alone)
 * in one statement, one transaction, one WAL flush. Per table, the held inserts' documents go in as one insert from a
 * JSON array (`$1`, `$2`, ... in table order: each element a document); then the lock (waiting for
 * every insert, as appendSql's), the positions and the records of all members in order (the last two parameters).
 * The text depends only on the tables, not on how many members: PostgreSQL parses and plans it once per connection.
 */
function groupSql(tables: string[]): string {
	const inserts = tables.map((t, i) => `d${i} as (insert into ${t} (id, doc) select x->>'id', x from jsonb_array_elements($${i + 1}::jsonb) x returning 1), `).join("");
	// Every insert counted (as in appendSql; a sum of scalar subqueries instead let PostgreSQL draw positions first).
	const counted = tables.length ? ` from ${tables.map((_t, i) => `(select count(*) from d${i}) w${i}`).join(", ")}` : "";
	const n = tables.length;
	return (
		`with ${inserts}s as materialized (select nextval('${SEQUENCE}') as seq from generate_series(1, $${n + 1}::int) ` +
		`where (select count(*) from (select ${LOCK}, ${NOTIFY}${counted}) l) = 1), ` +
		`n as (select seq, row_number() over (order by seq) as i from s) ` +
		`insert into ${TABLE} (seq, rec) select n.seq, u.r from n join unnest($${n + 2}::jsonb[]) with ordinality u(r, o) on u.o = n.i returning seq`
	);
}

/**
 * An append waiting for the next group statement: its held insert (if any), its records, and its answer. `until`: the
 * end of its request's deadline (its unit's, from when it came), which its wait and its statement both fall under.
 */
interface Member {
	held?: Held;
	recs: string[];
	until?: number;
	resolve(seqs: number[]): void;
	reject(err: unknown): void;
}

/** The deadline left to the members of a statement: the shortest (none when no member has one). */
function deadlineOf(members: Member[]): number | undefined {
	const ends = members.flatMap((m) => (m.until === undefined ? [] : [m.until]));
	return ends.length ? Math.max(1, Math.min(...ends) - Date.now()) : undefined;
}

/** Members of one group statement at most (their records are one array parameter). */
const MAX_GROUP = 256;

/** A failed group statement's error that one member's data can cause (a duplicate key, a value PostgreSQL refuses). */
const byMember = (err: unknown) => err instanceof ApiError || /^2[23]/.test(String((err as { code?: unknown })?.code ?? ""));

export type { Listening } from "./pg-listen";

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
		const recs = records.map((r) => JSON.stringify(r));
		const held = takeHeld(db.rel);
		// No transaction of the unit's to join: the append (with the held insert) is a statement of its own, which can
		// share one with the appends of other units.
		if (held || !openTransaction(db.rel)) {
			const deadlineMs = unitDeadline();
			return new Promise((resolve, reject) => this.enqueue({ held, recs, until: deadlineMs === undefined ? undefined : Date.now() + deadlineMs, resolve, reject }, deadlineMs));
		}
		const { rows } = await db.write(APPEND, [recs.length, recs]);
		const seqs = rows.map((r) => Number(r.seq)).sort((a, b) => a - b);
		await commitUnit(db.rel);
		return seqs;
	}

	private queue: Member[] = [];
	private inFlight = false;

	/**
	 * Group commit. One group statement at a time per outbox: appends that arrive while one runs wait and go together
	 * in the next (the outbox lock serialises the commits of appends anyway, one WAL flush each; grouped, one flush
	 * serves them all). Each member is answered when the statement holding its rows has committed. When a group
	 * fails for a reason one member's data can cause (a duplicate key), nothing of it was written: each member runs
	 * again alone, so the failure is only its own.
	 */
	private enqueue(m: Member, deadlineMs: number | undefined): void {
		this.queue.push(m);
		// A member still waiting when its deadline passes leaves the queue (nothing of it was written) and fails as an
		// outage; one in a statement by then fails with that statement, whose deadline is at most its own.
		if (deadlineMs !== undefined) {
			const timer = setTimeout(() => {
				const i = this.queue.indexOf(m);
				if (i < 0) return;
				this.queue.splice(i, 1);
				m.reject(Object.assign(new Error(`no turn to append within ${deadlineMs} ms (a request's deadline)`), { code: "ETIMEDOUT" }));
			}, deadlineMs);
			const { resolve, reject } = m;
			m.resolve = (seqs) => (clearTimeout(timer), resolve(seqs));
			m.reject = (err) => (clearTimeout(timer), reject(err));
		}
		if (!this.inFlight) void this.flush();
	}

	private async flush(): Promise<void> {
		this.inFlight = true;
		while (this.queue.length) {
			const group = this.queue.splice(0, MAX_GROUP);
			if (group.length === 1 || group.some((m) => m.held && !m.held.rows)) {
				await Promise.all(group.map((m) => this.alone(m)));
				continue;
			}
			try {
				const seqs = await this.grouped(group);
				let at = 0;
				for (const m of group) m.resolve(seqs.slice(at, (at += m.recs.length)));
			} catch (err) {
				if (byMember(err)) await Promise.all(group.map((m) => this.alone(m)));
				else for (const m of group) m.reject(err);
			}
		}
		this.inFlight = false;
	}

	/** One member in a statement of its own (appendSql, with its held write). */
	private async alone(m: Member): Promise<void> {
		try {
			const recs = [m.recs.length, m.recs];
			const deadline = deadlineOf([m]);
			const { rows } = m.held
				? await this.d.aloneWithin(deadline, appendSql(m.held.text, m.held.values?.length ?? 0), [...(m.held.values ?? []), ...recs])
				: await this.d.aloneWithin(deadline, APPEND, recs);
			m.resolve(rows.map((r) => Number(r.seq)).sort((a, b) => a - b));
		} catch (err) {
			m.reject(err);
		}
	}

	/** The group's positions, its members' records in order. */
	private async grouped(group: Member[]): Promise<number[]> {
		const tables = new Map<string, string[]>();
		for (const m of group) {
			if (!m.held?.rows) continue;
			const { table, docs } = m.held.rows;
			const t = tables.get(table);
			if (t) t.push(...docs);
			else tables.set(table, [...docs]);
		}
		const recs = group.flatMap((m) => m.recs);
		const params = [...[...tables.values()].map((docs) => `[${docs.join(",")}]`), recs.length, recs];
		const { rows } = await this.d.aloneWithin(deadlineOf(group), groupSql([...tables.keys()]), params);
		return rows.map((r) => Number(r.seq)).sort((a, b) => a - b);
	}

	/** With `deadlineMs`, a read without an answer by then fails and its connection is given up (a silent server). */
	async readFrom<T>(after: number, limit: number, deadlineMs?: number): Promise<PgOutboxRow<T>[]> {
		const text = `select seq, rec from ${TABLE} where seq > $1 order by seq limit $2`;
		const { rows } = deadlineMs === undefined ? await this.d.read(text, [after, limit]) : await this.d.aloneWithin(deadlineMs, text, [after, limit]);
		return rows.map((r) => ({ seq: Number(r.seq), rec: r.rec as T }));
	}

	/** LISTEN on OUTBOX_CHANNEL (stores/pg-listen.ts): `onNotify` at every committed append of any process. */
	listen(onNotify: () => void, onLost: () => void): Promise<Listening> {
		return listenOn(this.d.rel, OUTBOX_CHANNEL, () => onNotify(), onLost);
	}

	/** Removes what every consumer has passed, and what is older than the retention whoever lags. */
	/** Positions here are a sequence's, not times: the grace (readers tailing the outbox) is counted on `at`. */
	async prune(passedAll: number, retentionHours: number, graceMs: number): Promise<number> {
		const { rowCount } = await this.d.write(
			`delete from ${TABLE} where (seq <= $1 and at < now() - make_interval(secs => $3::float8)) or at < now() - make_interval(hours => $2::int)`,
			[passedAll, Math.ceil(retentionHours), graceMs / 1000],
		);
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
