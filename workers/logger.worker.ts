/**
 * logger (4060): the audit log. Stores one entry per gateway request (the `audit.request` event the gateway emits,
 * balanced to this group) and one per document change (the change stream, consumer group `logger`: who changed
 * which document), in the relational store (PostgreSQL at DATABASE_URL, embedded PostgreSQL by default), table
 * `audit_entries` (workers/logger/audit.ts, migrations versioned under component `logger`). Writes are batched:
 * request entries every 200 ms or 100 rows; a change entry is written before the stream moves past it.
 */
import type { Context } from "moleculer";
import { AUDIT_REQUEST_EVENT, type AuditRequest } from "../lib/audit";
import { configOf } from "../lib/config";
import { migrate, openRelational, releaseRelational, type Relational } from "../lib/relational";
import type { OutboxRecord } from "../events/outbox";
import { WORKER_PORTS } from "./index";
import { workerService } from "./worker";
import { AuditWriter, MIGRATIONS, type AuditRow } from "./logger/audit";
import { errorText } from "../lib/pg-process";

export const FLUSH_MS = 200;
export const FLUSH_ROWS = 100;
/** Request entries kept in memory while the store is unreachable; beyond, the oldest are dropped (and logged). */
const MAX_BUFFERED = 50_000;

const VERBS: Record<string, string> = { c: "create", u: "update", d: "delete", r: "restore" };

export function changeRow(rec: OutboxRecord): AuditRow {
	const ev = rec.event;
	const a = rec.actor ?? {};
	return {
		kind: "change",
		seq: rec.seq,
		at: ev.ts_ms,
		op: ev.op,
		action: VERBS[ev.op] ?? ev.op,
		service: ev.source?.db,
		collection: ev.source?.collection,
		document_id: ev.id,
		uid: a.uid,
		aid: a.aid,
		cid: a.cid,
		session: a.session,
		ip: a.ip,
	};
}

export function requestRow(e: AuditRequest): AuditRow {
	return { ...e, kind: "request", at: typeof e.at === "number" ? e.at : Date.now() };
}

export default workerService(
	{
		name: "logger",
		port: WORKER_PORTS.logger,
		async onChange(this: any, rec: OutboxRecord) {
			if (!rec?.event) return;
			await this.writer.add(changeRow(rec), true);
		},
		async checks(this: any) {
			const db: Relational | undefined = this.relational;
			return { "relational store": db ? await db.ping() : false };
		},
	},
	{
		events: {
			[AUDIT_REQUEST_EVENT]: {
				group: "logger",
				handler(this: any, ctx: Context<AuditRequest>) {
					if (ctx.params && typeof ctx.params === "object") void this.writer.add(requestRow(ctx.params)).catch(() => undefined);
				},
			},
		},
		created(this: any) {
			this.writer = new AuditWriter(() => this.openStore(), {
				flushMs: FLUSH_MS,
				maxRows: FLUSH_ROWS,
				maxBuffered: MAX_BUFFERED,
				onError: (err: unknown) => this.logger.warn("audit write failed:", (err as Error)?.message ?? err),
			});
		},
		methods: {
			/** The relational store, opened and migrated once; a failure is retried on the next use. */
			openStore(this: any): Promise<Relational> {
				this.opening ??= (async () => {
					const cfg = configOf(this.broker);
					const db = await openRelational(cfg);
					try {
						await migrate(db, "logger", MIGRATIONS);
					} catch (err) {
						await releaseRelational(cfg);
						throw err;
					}
					this.relational = db;
					return db;
				})().catch((err: unknown) => {
					this.opening = undefined;
					throw err;
				});
				return this.opening;
			},
			/** Writes what is buffered now (tests, shutdown). */
			flushAudit(this: any): Promise<void> {
				return this.writer.flush();
			},
		},
		async started(this: any) {
			// Ready before the node reports up; an unreachable store is not fatal: /status says so, writes retry.
			await this.openStore().catch((err: unknown) => this.logger.error(`relational store unavailable: ${errorText(err)}`));
		},
		async stopped(this: any) {
			// The stream first (its handler writes through the writer), then the last batch, then the store.
			await this.consumer?.stop();
			await this.writer.close();
			const opening = this.opening;
			this.opening = undefined;
			if (opening && (await opening.then(() => true, () => false))) await releaseRelational(configOf(this.broker));
			this.relational = undefined;
		},
	},
);
