/**
 * `npm run migrate-store` (migrate-store.ts): the NeDB documents of a DATA_DIR copied into the PostgreSQL document
 * store (DATABASE_URL, else the embedded PostgreSQL of the same DATA_DIR), then the NeDB files moved aside so that
 * the directory starts on PostgreSQL (docs/production.md, "From NeDB to PostgreSQL").
 *
 *  - DATA_DIR is held for the whole copy (runtime/datadir-lock.ts): refused while a platform runs on it, and a platform
 *    started meanwhile is refused.
 *  - Documents are copied as stored: ids, tenants, owners, timestamps, soft deletions, hashed secrets (the store's
 *    JSON, never a secret in the output). A document whose id is already in PostgreSQL is left as it is there, so a run
 *    that stopped half-way runs again to completion, and a second run copies nothing.
 *  - Change events no consumer group had handled yet are appended to PostgreSQL's outbox (once: a marker document
 *    records it), so webhooks, MQTT and the workers still get them; consumer positions start afresh there, and a group
 *    may see such an event twice (handlers are idempotent, docs/decisions.md "Change events").
 *  - Last, the NeDB files move to `DATA_DIR/nedb-migrated/` (kept as the backup; a later move gets its own dated name).
 */
import { existsSync, mkdirSync, renameSync } from "fs";
import path from "path";
import type { PlatformConfig } from "./runtime/config";
import { lockDataDir } from "./runtime/datadir-lock";
import { nedbDocumentStores, nedbFileOf, storeNames } from "./runtime/nedb-data";
import { storableJson } from "./runtime/relational";
import { createStore, NedbStore, type DocumentStore, type StoredDoc } from "./mixins/stores";
import { Outbox, type OutboxRecord } from "./events/outbox";

export type MigrationConfig = Pick<PlatformConfig, "dataDir"> & Partial<Pick<PlatformConfig, "databaseUrl" | "namespace">>;

export interface MigrationReport {
	/** Per store (`identity/users`...): documents copied, and those already in PostgreSQL (kept as they are there). */
	stores: Record<string, { copied: number; present: number }>;
	/** Change events carried over to PostgreSQL's outbox. */
	events: number;
	/** Where the NeDB files went; undefined when there was nothing to migrate. */
	movedTo?: string;
}

/** Written once the pending events are in PostgreSQL's outbox (a second run after a crash appends none again). */
const MARKER_STORE = "_nedb_migration";
const BATCH = 500;
/** The directory the NeDB files move to. */
export const MIGRATED_DIR = "nedb-migrated";

/** Copies the NeDB documents of `cfg.dataDir` into PostgreSQL; `log` gets one line per step (counts, never contents). */
export async function migrateNedbToPostgres(cfg: MigrationConfig, log: (line: string) => void = () => undefined): Promise<MigrationReport> {
	const report: MigrationReport = { stores: {}, events: 0 };
	// Taken as a NeDB node would (the directory keeps a store): DataDirInUse when a platform holds it.
	const lock = await lockDataDir({ dataDir: cfg.dataDir, databaseUrl: cfg.databaseUrl, documentStore: "nedb" });
	try {
		const names = nedbDocumentStores(cfg.dataDir);
		if (!names.length) {
			log(`DATA_DIR ${cfg.dataDir} holds no NeDB documents: nothing to migrate (it starts on PostgreSQL).`);
			return report;
		}
		const pg = { dataDir: cfg.dataDir, databaseUrl: cfg.databaseUrl, mongoUri: undefined, documentStore: "postgres" as const };
		const target = `PostgreSQL (${cfg.databaseUrl ? "DATABASE_URL" : `embedded, ${path.join(cfg.dataDir, "postgres")}`})`;
		log(`Copying the NeDB documents of ${cfg.dataDir} into ${target}: ${names.length} stores`);
		for (const name of names.filter((n) => n !== "_outbox")) {
			report.stores[name] = await copyStore(cfg.dataDir, name, createStore(pg, name));
			log(`  ${name}: ${report.stores[name].copied} copied, ${report.stores[name].present} already there`);
		}
		report.events = await carryEvents(cfg, pg);
		log(`  change events not yet handled by every consumer group: ${report.events} in PostgreSQL's outbox`);
		report.movedTo = moveAside(cfg.dataDir);
		log(`Done. The NeDB files are kept in ${report.movedTo}; DATA_DIR ${cfg.dataDir} now starts on PostgreSQL.`);
		return report;
	} finally {
		await lock?.release();
	}
}

/** Every document of one NeDB store into `target`, those whose id is not there yet, in batches. */
async function copyStore(dataDir: string, name: string, target: DocumentStore): Promise<{ copied: number; present: number }> {
	const docs = await readNedb(dataDir, name);
	await target.connect();
	try {
		let copied = 0;
		for (let i = 0; i < docs.length; i += BATCH) {
			const batch = docs.slice(i, i + BATCH);
			const there = new Set((await target.find({ query: { _id: { $in: batch.map((d) => d._id) } }, projection: { _id: 1 } })).map((d) => d._id));
			const missing = batch.filter((d) => !there.has(d._id));
			// As the platform writes on PostgreSQL: text without NUL or lone surrogates (NeDB took them).
			if (missing.length) await target.insertMany(missing.map((d) => storableJson(d)));
			copied += missing.length;
		}
		return { copied, present: docs.length - copied };
	} finally {
		await target.disconnect();
	}
}

async function readNedb(dataDir: string, name: string, extraIndexes: string[] = []): Promise<StoredDoc[]> {
	const store = new NedbStore(nedbFileOf(dataDir, name), extraIndexes);
	await store.connect();
	try {
		return await store.find({ query: {}, sort: { _id: 1 } });
	} finally {
		await store.disconnect();
	}
}

/**
 * The NeDB outbox's records after the lowest consumer position (all of them when no group stored one), appended in
 * order to PostgreSQL's outbox, once per database and DATA_DIR.
 */
async function carryEvents(cfg: MigrationConfig, pg: MigrationConfig & { documentStore: "postgres"; mongoUri: undefined }): Promise<number> {
	if (!existsSync(nedbFileOf(cfg.dataDir, "_outbox"))) return 0;
	const marker = createStore(pg, MARKER_STORE);
	await marker.connect();
	try {
		const id = `events:${path.resolve(cfg.dataDir)}`;
		const done = await marker.findOne({ _id: id });
		if (done) return Number(done.events ?? 0);
		const positions = existsSync(nedbFileOf(cfg.dataDir, "_stream_offsets")) ? await readNedb(cfg.dataDir, "_stream_offsets") : [];
		const from = positions.length ? Math.min(...positions.map((p) => Number(p.seq ?? 0))) : 0;
		const records = (await readNedb(cfg.dataDir, "_outbox", ["seq"])).filter((r) => Number(r.seq) > from).sort((a, b) => Number(a.seq) - Number(b.seq));
		const outbox = new Outbox({ ...pg, namespace: cfg.namespace });
		await outbox.connect();
		try {
			for (let i = 0; i < records.length; i += BATCH)
				await outbox.append(records.slice(i, i + BATCH).map(({ _id, seq, ...r }) => storableJson(r) as unknown as Omit<OutboxRecord, "seq">));
		} finally {
			await outbox.disconnect();
		}
		await marker.insert({ _id: id, events: records.length, at: new Date().toISOString() });
		return records.length;
	} finally {
		await marker.disconnect();
	}
}

/** Every NeDB file of the platform (and its compaction leftovers) into DATA_DIR/nedb-migrated[-<time>]/. */
function moveAside(dataDir: string): string {
	let dest = path.join(dataDir, MIGRATED_DIR);
	if (existsSync(dest)) dest = `${dest}-${new Date().toISOString().replace(/[:.]/g, "-")}`;
	for (const name of storeNames()) {
		for (const file of [nedbFileOf(dataDir, name), `${nedbFileOf(dataDir, name)}~`]) {
			if (!existsSync(file)) continue;
			const to = path.join(dest, path.relative(dataDir, file));
			mkdirSync(path.dirname(to), { recursive: true, mode: 0o700 });
			renameSync(file, to);
		}
	}
	return dest;
}
