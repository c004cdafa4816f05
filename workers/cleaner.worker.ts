/**
 * cleaner (4070): purges what has expired, on a schedule (node-cron, CLEANER_CRON, every 10 minutes by default),
 * one instance at a time (a lease on the platform cache, so several cleaner nodes never work together):
 * - soft-deleted documents whose retention passed (RETENTION_DAYS, per collection
 *   RETENTION_<SERVICE>_<COLLECTION>_DAYS; identity/sessions 0 = closed sessions go at the next pass), through each
 *   collection's internal `purge` action (each removal is a `d` change event, see `purge` in engine/collection-actions.ts);
 * - finished webhook delivery records older than DELIVERY_RETENTION_DAYS (delivered, failed or disabled; never
 *   pending ones) when the dispatcher's `deliveries` table exists (their attempts go with them);
 * - audit entries older than AUDIT_RETENTION_DAYS;
 * - file content no special/files record holds, older than FILE_ORPHAN_GRACE_MINUTES (`special.files.orphans`:
 *   uploads cut short by a crash); content of purged records goes with them (the files hooks);
 * - Idempotency-Key records (and their kept answers) older than 24 hours (engine/idempotency-record.ts).
 * `cleaner.run` (internal) runs one pass now and answers what it removed, or `{ ran: false }` when another pass holds
 * the lease.
 */
import cron, { type ScheduledTask } from "node-cron";
import type { Service } from "moleculer";
import { DOMAINS } from "../catalog";
import { configOf, type PlatformConfig } from "../runtime/config";
import { sharedKeyValue } from "../runtime/kv";
import { tryLease } from "../runtime/lock";
import { openRelational, releaseRelational, type Relational } from "../runtime/relational";
import { PURGE_ACTION, type PurgeParams } from "../engine/collection.mixin";
import { IdempotencyStoreRef, purgeIdempotency } from "../engine/idempotency-record";
import { WORKER_PORTS } from "./index";
import { workerService } from "./worker";
import { cutoff, retentionDays } from "./cleaner/retention";

export const LOCK_KEY = "cleaner:lock";
export const ORPHANS_ACTION = "special.files.orphans";
/** The lease outlives a stalled holder by at most this long; a working pass renews it every third of it. */
const LOCK_TTL_MS = 5 * 60 * 1000;
/** Documents per purge call, rows per DELETE: bounded calls and short row locks. */
const PURGE_LIMIT = 1000;
const ROWS_LIMIT = 5000;

export interface CleanerPass {
	ran: boolean;
	/** Why it did not run (`locked`: another pass holds the lease). */
	reason?: string;
	/** Hard-deleted documents per `service/collection` (only those with some). */
	documents?: Record<string, number>;
	deliveries?: number;
	audit?: number;
	/** Orphaned file blobs (and partial writes) removed. */
	blobs?: number;
	/** Idempotency-Key records past their 24 hours. */
	idempotency?: number;
	/** What could not be cleaned this time (the next pass retries). */
	errors?: string[];
	ms?: number;
}

async function tableColumns(db: Relational, table: string): Promise<Set<string>> {
	const { rows } = await db.query<{ column_name: string }>(
		"select column_name from information_schema.columns where table_name = $1 and table_schema = (select n.nspname from pg_class c join pg_namespace n on n.oid = c.relnamespace where c.oid = to_regclass($1))",
		[table],
	);
	return new Set(rows.map((r) => r.column_name));
}

/** Deletes `where` rows of `table` in chunks; the number deleted. */
async function deleteChunked(db: Relational, table: string, where: string, params: unknown[]): Promise<number> {
	let total = 0;
	for (;;) {
		const r = await db.query(`delete from ${table} where id in (select id from ${table} where ${where} limit ${ROWS_LIMIT})`, params);
		total += r.rowCount ?? 0;
		if ((r.rowCount ?? 0) < ROWS_LIMIT) return total;
	}
}

/** The cleaner's `this` (lib/service.ts). */
type Cleaner = Service & {
	task?: ScheduledTask;
	/** Passes under way (stopping waits for them). */
	passes?: Set<Promise<CleanerPass | undefined>>;
	/** This node's scheduled pass, while it runs. */
	scheduled?: Promise<void>;
	keyRecords?: IdempotencyStoreRef;
	opening?: Promise<Relational>;
	runPass(): Promise<CleanerPass>;
	pass_(): Promise<CleanerPass>;
	purgeDocuments(cfg: PlatformConfig, errors: string[]): Promise<Record<string, number>>;
	collectOrphans(errors: string[]): Promise<number>;
	purgeRelational(cfg: PlatformConfig, errors: string[]): Promise<{ deliveries: number; audit: number }>;
	purgeKeys(errors: string[]): Promise<number>;
	openStore(): Promise<Relational>;
};

export default workerService<Cleaner>(
	{
		name: "cleaner",
		port: WORKER_PORTS.cleaner,
		checks(this: Cleaner) {
			const cfg = configOf(this.broker);
			return { cache: () => sharedKeyValue(cfg.redisUrl, cfg.redisPrefix).ping() };
		},
	},
	{
		actions: {
			run: {
				visibility: "public",
				async handler(this: Cleaner): Promise<CleanerPass> {
					const pass: CleanerPass = await this.runPass();
					// Locked by this node's scheduled pass (a run at a 10-minute mark answered `locked` to its caller):
					// it runs once that pass is done. Locked by another run, or by another node's pass: answered as is.
					if (pass.ran || !this.scheduled) return pass;
					await this.scheduled;
					return this.runPass();
				},
			},
		},
		methods: {
			/** One pass (tracked, so stopping waits for it before closing the store). */
			runPass(this: Cleaner): Promise<CleanerPass> {
				const pass = this.pass_();
				const tracked = pass.catch(() => undefined);
				this.passes = new Set([...(this.passes ?? []), tracked]);
				void tracked.then(() => this.passes!.delete(tracked));
				return pass;
			},

			async pass_(this: Cleaner): Promise<CleanerPass> {
				const cfg: PlatformConfig = configOf(this.broker);
				const kv = sharedKeyValue(cfg.redisUrl, cfg.redisPrefix);
				const lease = await tryLease(kv, LOCK_KEY, LOCK_TTL_MS);
				if (!lease) return { ran: false, reason: "locked" };
				const started = Date.now();
				const renew = setInterval(() => void lease.renew().catch(() => undefined), LOCK_TTL_MS / 3);
				renew.unref();
				const errors: string[] = [];
				try {
					const documents = await this.purgeDocuments(cfg, errors);
					const { deliveries, audit } = await this.purgeRelational(cfg, errors);
					const blobs = await this.collectOrphans(errors);
					const idempotency = await this.purgeKeys(errors);
					const pass: CleanerPass = { ran: true, documents, deliveries, audit, blobs, idempotency, errors, ms: Date.now() - started };
					const total = Object.values(documents).reduce((a: number, b) => a + (b as number), 0) + deliveries + audit + blobs + idempotency;
					if (total || errors.length) this.logger.info(`cleaner: ${total} removed in ${pass.ms} ms${errors.length ? `; ${errors.length} errors` : ""}`);
					return pass;
				} finally {
					clearInterval(renew);
					await lease.release().catch(() => undefined);
				}
			},

			async purgeDocuments(this: Cleaner, cfg: PlatformConfig, errors: string[]): Promise<Record<string, number>> {
				const out: Record<string, number> = {};
				const now = Date.now();
				for (const d of DOMAINS) {
					for (const c of d.collections) {
						const action = `${d.name}.${c.name}.${PURGE_ACTION}`;
						// A domain no node of this deployment runs (yet) has nothing to purge here.
						if (!this.broker.registry.actions.isAvailable(action)) continue;
						const params: PurgeParams = { before: cutoff(retentionDays(cfg, d.name, c.name), now), limit: PURGE_LIMIT };
						let n = 0;
						try {
							for (;;) {
								const r = (await this.broker.call(action, params)) as { purged: number };
								n += r.purged;
								if (r.purged < PURGE_LIMIT) break;
							}
						} catch (err) {
							errors.push(`${d.name}/${c.name}: ${(err as Error)?.message ?? err}`);
						}
						if (n) out[`${d.name}/${c.name}`] = n;
					}
				}
				return out;
			},

			/** File content without a record (after the purge, so purged records' content is already gone). */
			async collectOrphans(this: Cleaner, errors: string[]): Promise<number> {
				if (!this.broker.registry.actions.isAvailable(ORPHANS_ACTION)) return 0;
				try {
					const r = (await this.broker.call(ORPHANS_ACTION, {}, { timeout: 0 })) as { removed: number; partial: number };
					return r.removed + r.partial;
				} catch (err) {
					errors.push(`file content: ${(err as Error)?.message ?? err}`);
					return 0;
				}
			},

			async purgeRelational(this: Cleaner, cfg: PlatformConfig, errors: string[]): Promise<{ deliveries: number; audit: number }> {
				let db: Relational;
				try {
					db = await this.openStore();
				} catch (err) {
					errors.push(`relational store: ${(err as Error)?.message ?? err}`);
					return { deliveries: 0, audit: 0 };
				}
				let deliveries = 0;
				let audit = 0;
				try {
					const cols = await tableColumns(db, "deliveries");
					if (["id", "status", "delivered_at", "updated_at"].every((c) => cols.has(c)))
						deliveries = await deleteChunked(db, "deliveries", "(status = 'delivered' and delivered_at < $1) or (status in ('failed', 'disabled') and updated_at < $1)", [
							cutoff(cfg.deliveryRetentionDays),
						]);
				} catch (err) {
					errors.push(`deliveries: ${(err as Error)?.message ?? err}`);
				}
				try {
					const cols = await tableColumns(db, "audit_entries");
					if (cols.has("id") && cols.has("at")) audit = await deleteChunked(db, "audit_entries", "at < $1", [cutoff(cfg.auditRetentionDays)]);
				} catch (err) {
					errors.push(`audit entries: ${(err as Error)?.message ?? err}`);
				}
				return { deliveries, audit };
			},

			/** Idempotency-Key records older than 24 hours, from the document store the gateways keep them in. */
			async purgeKeys(this: Cleaner, errors: string[]): Promise<number> {
				this.keyRecords ??= new IdempotencyStoreRef(configOf(this.broker));
				try {
					return await purgeIdempotency(this.keyRecords);
				} catch (err) {
					errors.push(`idempotency keys: ${(err as Error)?.message ?? err}`);
					return 0;
				}
			},

			/** The relational store, opened on the first pass that needs it (shared with the node's other workers). */
			openStore(this: Cleaner): Promise<Relational> {
				this.opening ??= openRelational(configOf(this.broker)).catch((err: unknown) => {
					this.opening = undefined;
					throw err;
				});
				return this.opening;
			},
		},
		async started(this: Cleaner) {
			const cfg: PlatformConfig = configOf(this.broker);
			if (!cron.validate(cfg.cleanerCron)) throw new Error(`CLEANER_CRON is not a valid cron expression: ${cfg.cleanerCron}`);
			this.task = cron.schedule(
				cfg.cleanerCron,
				async () => {
					const pass = this.runPass();
					const scheduled: Promise<void> = (this.scheduled = pass.then(
						() => undefined,
						() => undefined,
					));
					void scheduled.then(() => {
						if (this.scheduled === scheduled) this.scheduled = undefined;
					});
					try {
						await pass;
					} catch (err) {
						this.logger.warn(`cleaner pass failed: ${(err as Error)?.message ?? err}`);
					}
				},
				{
					name: `cleaner-${this.broker.nodeID}`,
					// A pass still running when the next is due: that one is skipped (the lease also covers other nodes).
					noOverlap: true,
					logger: {
						info: (m: string) => this.logger.debug(m),
						warn: (m: string) => this.logger.debug(m),
						error: (m: string | Error, err?: Error) => this.logger.warn(m, err ?? ""),
						debug: () => undefined,
					},
				},
			) as ScheduledTask;
		},
		async stopped(this: Cleaner) {
			await this.task?.destroy();
			this.task = undefined;
			await Promise.all([...(this.passes ?? [])]);
			await this.keyRecords?.release();
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
		},
	},
);
