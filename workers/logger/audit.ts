/**
 * Audit entries in the relational store: one row per gateway request (`kind = 'request'`, from the audit entries the
 * gateways ship through the event stream, events/audit-shipper.ts) and one per document change (`kind = 'change'`, from the change stream: the document ids of every write,
 * bulk ones included). Rows are written in batches; `request_id`, and a change's stream position with its
 * document, are unique, so an event or a change record delivered twice is stored once.
 */
import type { AuditRequest } from "../../lib/audit";
import type { AuditFilter, AuditView, Page } from "../../lib/contracts";
import { storableText, type Migration, type Relational } from "../../runtime/relational";

export const AUDIT_TABLE = "audit_entries";
export interface AuditRow extends Partial<AuditRequest> {
	kind: "request" | "change";
	at: number;
	seq?: number;
	op?: string;
}

export const MIGRATIONS: Migration[] = [
	{
		version: 1,
		up: `
			create table ${AUDIT_TABLE} (
				id bigserial primary key,
				at timestamptz not null,
				kind text not null check (kind in ('request', 'change')),
				request_id text,
				seq bigint,
				uid text,
				aid text,
				cid text,
				session text,
				ip text,
				method text,
				path text,
				action text,
				service text,
				collection text,
				document_id text,
				op text,
				status integer,
				duration_ms double precision
			);
			create unique index ${AUDIT_TABLE}_request_id on ${AUDIT_TABLE} (request_id) where request_id is not null;
			create unique index ${AUDIT_TABLE}_change on ${AUDIT_TABLE} (seq, service, collection, document_id) where seq is not null;
			create index ${AUDIT_TABLE}_at on ${AUDIT_TABLE} (at);
			create index ${AUDIT_TABLE}_cid_at on ${AUDIT_TABLE} (cid, at);
			create index ${AUDIT_TABLE}_uid_at on ${AUDIT_TABLE} (uid, at);
			create index ${AUDIT_TABLE}_document on ${AUDIT_TABLE} (document_id) where document_id is not null;
		`,
	},
	// A request answered with a kept answer under its Idempotency-Key: true (null for every other row).
	{ version: 2, up: `alter table ${AUDIT_TABLE} add column replayed boolean` },
	// The database's clock when the row was stored, beside `at` (the gateway's clock when the request ended): one clock
	// for every gateway, so a gateway whose clock is off shows as `recorded_at - at` beyond the batching delay. Rows stored
	// before this column keep it null.
	{ version: 3, up: `alter table ${AUDIT_TABLE} add column recorded_at timestamptz; alter table ${AUDIT_TABLE} alter column recorded_at set default now()` },
];

/** Every table MIGRATIONS creates: a backup holds these (data-backup.ts). */
export const TABLES = [AUDIT_TABLE];

const COLUMNS = [
	"at",
	"kind",
	"request_id",
	"seq",
	"uid",
	"aid",
	"cid",
	"session",
	"ip",
	"method",
	"path",
	"action",
	"service",
	"collection",
	"document_id",
	"op",
	"status",
	"duration_ms",
	"replayed",
] as const;
/** Rows per INSERT statement (parameters stay far below PostgreSQL's 65 535). */
export const ROWS_PER_INSERT = 500;

/** A text column: what PostgreSQL can store (no NUL, no lone surrogate: a cut pair is one too), bounded. */
const str = (v: unknown, max = 2000): string | null => {
	if (typeof v !== "string" || v === "") return null;
	const s = storableText(v.slice(0, max));
	return s === "" ? null : s;
};
const num = (v: unknown): number | null => (typeof v === "number" && Number.isFinite(v) ? v : null);
/** An integer column (PostgreSQL `integer`): a value outside its range is not stored. */
const int = (v: unknown): number | null => {
	const n = num(v);
	return n === null || Math.abs(n) > 2147483647 ? null : Math.trunc(n);
};

function valuesOf(r: AuditRow): unknown[] {
	return [
		new Date(num(r.at) !== null && Math.abs(r.at) <= 8.64e15 ? r.at : Date.now()),
		r.kind === "change" ? "change" : "request",
		str(r.request_id, 200),
		num(r.seq),
		str(r.uid, 200),
		str(r.aid, 200),
		str(r.cid, 200),
		str(r.session, 200),
		str(r.ip, 100),
		str(r.method, 16),
		str(r.path),
		str(r.action, 200),
		str(r.service, 100),
		str(r.collection, 100),
		str(r.document_id, 200),
		str(r.op, 4),
		int(r.status),
		num(r.duration_ms),
		r.replayed === true ? true : null,
	];
}

export async function insertRows(db: Relational, rows: AuditRow[]): Promise<number> {
	let stored = 0;
	for (let i = 0; i < rows.length; i += ROWS_PER_INSERT) {
		const chunk = rows.slice(i, i + ROWS_PER_INSERT);
		const params: unknown[] = [];
		const tuples = chunk.map((r) => {
			const vals = valuesOf(r);
			const start = params.length;
			params.push(...vals);
			return `(${vals.map((_, j) => `$${start + j + 1}`).join(", ")})`;
		});
		const res = await db.query(`insert into ${AUDIT_TABLE} (${COLUMNS.join(", ")}) values ${tuples.join(", ")} on conflict do nothing`, params);
		stored += res.rowCount ?? 0;
	}
	return stored;
}

/**
 * Writes rows in batches: whatever was added while the previous insert ran goes in the next one (one insert at a
 * time, in order). `add`/`addMany` resolve once their rows are stored (or refused for good, see `isolate`) and
 * reject when the store is unreachable: the stream that handed them over then delivers them again, so the
 * acknowledgement of an event never precedes its row.
 */
export class AuditWriter {
	private rows: AuditRow[] = [];
	private waiters: Array<{ resolve: () => void; reject: (e: unknown) => void }> = [];
	private flushing: Promise<void> = Promise.resolve();
	private closed = false;

	constructor(
		private readonly db: () => Promise<Relational>,
		private readonly opts: { onError(err: unknown): void },
	) {}

	add(row: AuditRow): Promise<void> {
		return this.addMany([row]);
	}

	addMany(rows: AuditRow[]): Promise<void> {
		if (this.closed) return Promise.reject(new Error("audit writer is closed"));
		if (!rows.length) return Promise.resolve();
		this.rows.push(...rows);
		const done = new Promise<void>((resolve, reject) => this.waiters.push({ resolve, reject }));
		void this.flush().catch(() => undefined);
		return done;
	}

	/** Writes everything added so far (one flush at a time, in order). */
	flush(): Promise<void> {
		const run = this.flushing.then(async () => {
			if (!this.rows.length) return;
			const rows = this.rows;
			const waiters = this.waiters;
			this.rows = [];
			this.waiters = [];
			let db: Relational | undefined;
			try {
				db = await this.db();
				await insertRows(db, rows);
				for (const w of waiters) w.resolve();
			} catch (err) {
				// One bad row must not block the stream: with the store reachable, the rows go one by one and a row that
				// fails alone is dropped (logged without its content). Only an unreachable store fails the batch.
				const rest = db && (await db.ping()) ? await this.isolate(db, rows) : rows;
				if (!rest.length) {
					for (const w of waiters) w.resolve();
					return;
				}
				for (const w of waiters) w.reject(err);
				this.opts.onError(err);
			}
		});
		this.flushing = run.catch(() => undefined);
		return run;
	}

	/**
	 * Inserts rows one at a time after a batch failed. A row that fails alone while the store still answers is
	 * dropped and reported (its kind and PostgreSQL's error code, never its values). Returns the rows not
	 * attempted because the store stopped answering (they are retried as a whole later).
	 */
	private async isolate(db: Relational, rows: AuditRow[]): Promise<AuditRow[]> {
		for (let i = 0; i < rows.length; i++) {
			try {
				await insertRows(db, [rows[i]]);
			} catch (err) {
				if (!(await db.ping())) return rows.slice(i);
				const code = (err as { code?: unknown })?.code;
				this.opts.onError(new Error(`audit ${rows[i].kind} row dropped: the store refuses it (${typeof code === "string" ? `SQLSTATE ${code}` : "error"})`));
			}
		}
		return [];
	}

	async close(): Promise<void> {
		await this.flush().catch(() => undefined);
		this.closed = true;
	}

	get pending(): number {
		return this.rows.length;
	}
}

/** What the public route shows of an entry (lib/contracts.ts AuditView): every column but the session id. */
const VIEW_COLUMNS = "id, at, kind, method, path, action, service, collection, document_id, op, status, duration_ms, uid, aid, cid, ip, replayed";

/** `%`, `_` and `\` of a LIKE pattern taken as themselves. */
const likeLiteral = (s: string) => s.replace(/[\\%_]/g, (c) => `\\${c}`);

/**
 * A page of the audit trail, newest first (by `at`, then `id`): the entries matching every filter given, older than
 * the entry `before` when given. `(at, id)` walks the indexes on `at` and `(cid, at)` backwards: one page costs its
 * rows, not the trail's length.
 */
export async function auditPage(db: Relational, f: AuditFilter): Promise<Page<AuditView>> {
	const params: unknown[] = [];
	const where: string[] = [];
	const eq = (col: string, v: unknown) => v !== undefined && where.push(`${col} = $${params.push(v)}`);
	eq("cid", f.cid);
	eq("kind", f.kind);
	eq("action", f.action);
	eq("uid", f.uid);
	eq("status", f.status);
	if (f.from !== undefined) where.push(`at >= $${params.push(f.from)}`);
	if (f.to !== undefined) where.push(`at <= $${params.push(f.to)}`);
	if (f.path !== undefined) where.push(`path like $${params.push(`${likeLiteral(f.path)}%`)}`);
	if (f.before !== undefined) where.push(`(at, id) < (select at, id from ${AUDIT_TABLE} where id = $${params.push(f.before)})`);
	const { rows } = await db.query<Record<string, unknown>>(
		`select ${VIEW_COLUMNS} from ${AUDIT_TABLE} ${where.length ? `where ${where.join(" and ")}` : ""} order by at desc, id desc limit $${params.push(f.limit + 1)}`,
		params,
	);
	const more = rows.length > f.limit;
	const items = rows.slice(0, f.limit).map((r) => ({ ...r, id: String(r.id), at: new Date(r.at as Date).toISOString() }) as unknown as AuditView);
	return { items, next: more ? items[items.length - 1].id : null };
}
