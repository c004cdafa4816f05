/**
 * logger (4060): the audit log. Stores one entry per gateway request and one per document change (the change stream,
 * consumer group `logger`, in batches of up to LOGGER_BATCH records, one insert each: who changed which document), in the relational store (PostgreSQL at DATABASE_URL, embedded
 * PostgreSQL by default), table `audit_entries` (workers/logger/audit.ts, migrations versioned under component
 * `logger`). Request entries come in batches from the gateways through the durable event stream
 * (events/audit-shipper.ts): the `platform.audit` channel (EVENT_STREAM=nats|redis, consumer group `logger`) or the
 * embedded spool beside the outbox (workers/logger/spool-reader.ts). A batch is acknowledged (or removed from the
 * spool) only once its rows are stored; a redelivered one is stored once (unique request id).
 */
import { AUDIT_GROUP, type AuditRequest } from "../lib/audit";
import type { AuditFilter } from "../lib/contracts";
import { configOf } from "../runtime/config";
import { migrate, openRelational, releaseRelational, type Relational } from "../runtime/relational";
import type { Service } from "moleculer";
import type { OutboxRecord } from "../events/outbox";
import type { Consumer } from "../events/stream";
import type { AuditBatch } from "../events/audit-spool";
import { AUDIT_CHANNEL, channelsStreamFor } from "../events/channels.stream";
import { WORKER_PORTS } from "./index";
import { workerService } from "./worker";
import { auditPage, AuditWriter, MIGRATIONS, ROWS_PER_INSERT, type AuditRow } from "./logger/audit";
import { SpoolReader } from "./logger/spool-reader";
import { errorText } from "../runtime/pg-process";

/** Audit batches of the stream handled at once: their rows share inserts (order does not matter here). */
export const AUDIT_IN_FLIGHT = 8;
/**
 * Change records stored per insert: one batch of the change stream is one statement (the writer's chunk), acknowledged
 * once it is stored. A redelivered batch adds nothing: a change row is unique by position and document.
 */
export const LOGGER_BATCH = ROWS_PER_INSERT;

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

/** The rows of a batch as shipped by a gateway (anything else in it is ignored). */
export function batchRows(batch: AuditBatch | undefined): AuditRow[] {
	const entries = Array.isArray(batch?.entries) ? batch.entries : [];
	return entries.filter((e) => e && typeof e === "object").map(requestRow);
}

/** The logger's `this` (lib/service.ts). */
type AuditLog = Service & {
	writer: AuditWriter;
	opening?: Promise<Relational>;
	relational?: Relational;
	/** The change stream's consumer (workers/worker.ts). */
	consumer?: Consumer;
	/** The audit entries' consumer: the channel's group, or the embedded spool's reader. */
	requests?: { stop(): Promise<void> };
	openStore(): Promise<Relational>;
	storeChanges(recs: OutboxRecord[]): Promise<void>;
	flushAudit(): Promise<void>;
};

export default workerService<AuditLog>(
	{
		name: "logger",
		port: WORKER_PORTS.logger,
		maxBatch: LOGGER_BATCH,
		// Rows are keyed, not ordered: on NATS/Redis the group may hold a batch's worth in flight, which is what batches it.
		maxInFlight: LOGGER_BATCH,
		async onChanges(this: AuditLog, recs: OutboxRecord[]) {
			await this.storeChanges(recs);
		},
		checks(this: AuditLog) {
			return {
				"relational store": async () => {
					const db = this.relational;
					return !!db && (await db.ping());
				},
			};
		},
	},
	{
		created(this: AuditLog) {
			this.writer = new AuditWriter(() => this.openStore(), {
				onError: (err: unknown) => this.logger.warn("audit write failed:", (err as Error)?.message ?? err),
			});
		},
		actions: {
			/**
			 * A page of the audit trail, newest first (AUDIT_ENTRIES_ACTION: the gateway's GET /general/activities/audit,
			 * which decides who may read what and checks the filters). Internal.
			 */
			entries: {
				visibility: "public",
				params: {
					cid: { type: "string", optional: true },
					from: { type: "string", optional: true },
					to: { type: "string", optional: true },
					kind: { type: "enum", values: ["request", "change"], optional: true },
					path: { type: "string", max: 2000, optional: true },
					action: { type: "string", max: 200, optional: true },
					uid: { type: "string", max: 200, optional: true },
					status: { type: "number", integer: true, optional: true },
					before: { type: "string", pattern: /^\d{1,18}$/, optional: true },
					limit: { type: "number", integer: true, min: 1, max: 100 },
				},
				async handler(this: AuditLog, ctx: { params: AuditFilter }) {
					return auditPage(await this.openStore(), ctx.params);
				},
			},
		},
		methods: {
			/** The relational store, opened and migrated once; a failure is retried on the next use. */
			openStore(this: AuditLog): Promise<Relational> {
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
			/** Stores a batch of change records (the stream's handler; tests and replays): resolves once its rows are. */
			storeChanges(this: AuditLog, recs: OutboxRecord[]): Promise<void> {
				return this.writer.addMany(recs.filter((rec) => rec?.event).map(changeRow));
			},
			/** Writes what is buffered now (tests, shutdown). */
			flushAudit(this: AuditLog): Promise<void> {
				return this.writer.flush();
			},
		},
		async started(this: AuditLog) {
			// Ready before the node reports up; an unreachable store is not fatal: /status says so, writes retry.
			await this.openStore().catch((err: unknown) => this.logger.error(`relational store unavailable: ${errorText(err)}`));
			const cfg = configOf(this.broker);
			const store = (batch: AuditBatch) => this.writer.addMany(batchRows(batch));
			if (cfg.eventStream === "nats" || cfg.eventStream === "redis")
				this.requests = await channelsStreamFor(cfg).consumeChannel(AUDIT_CHANNEL, AUDIT_GROUP, store, { maxInFlight: AUDIT_IN_FLIGHT });
			else this.requests = new SpoolReader(cfg, store, (msg) => this.logger.warn(msg)).start();
		},
		async stopped(this: AuditLog) {
			// The streams first (their handlers write through the writer), then the last batch, then the store.
			await Promise.all([this.consumer?.stop(), this.requests?.stop()]);
			await this.writer.close();
			const opening = this.opening;
			this.opening = undefined;
			if (
				opening &&
				(await opening.then(
					() => true,
					() => false,
				))
			)
				await releaseRelational(configOf(this.broker));
			this.relational = undefined;
		},
	},
);
