/**
 * `npm run migrate-store` (migrate-store.ts): the NeDB documents of a DATA_DIR (an earlier version's store) copied
 * into the PostgreSQL document store (DATABASE_URL, else the embedded PostgreSQL of the same DATA_DIR), then the NeDB
 * files moved aside so that the directory starts (docs/production.md, "From NeDB to PostgreSQL"). The one place that
 * reads NeDB's files: with its own reader (readNedbFile), no NeDB package.
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
import { createReadStream, existsSync, mkdirSync, renameSync, statSync } from "fs";
import path from "path";
import type { PlatformConfig } from "./runtime/config";
import { lockDataDir } from "./runtime/datadir-lock";
import { textLines } from "./runtime/lines";
import { DOCUMENT_INTERNALS, storeNames } from "./runtime/store-names";
import { storableJson } from "./runtime/relational";
import { createStore, TENANT_REF, tenantRef, type DocumentStore, type StoredDoc } from "./stores";
import { Outbox, type OutboxRecord } from "./events/outbox";

/** `DATA_DIR/<name>.db`: where NeDB kept a store. */
export const nedbFileOf = (dataDir: string, name: string): string => path.join(dataDir, `${name}.db`);

/** The document stores of `dataDir` that have a non-empty NeDB file (`identity/users`, `_seed`...). */
export function nedbDocumentStores(dataDir: string): string[] {
	return storeNames().filter((n) => (n.includes("/") || DOCUMENT_INTERNALS.has(n)) && nonEmptyFile(nedbFileOf(dataDir, n)));
}

function nonEmptyFile(file: string): boolean {
	try {
		return existsSync(file) && statSync(file).isFile() && statSync(file).size > 0;
	} catch {
		return false;
	}
}

/**
 * Why a platform (or a backup, a restore) refuses `dataDir`: it holds the NeDB documents of an earlier version, which
 * this version does not read. Undefined when it holds none (`npm run migrate-store` moves them aside once copied).
 */
export function unmigratedDataDir(dataDir: string): string | undefined {
	if (!nedbDocumentStores(dataDir).length) return undefined;
	return (
		`DATA_DIR ${dataDir} holds the NeDB documents of an earlier version, which this version does not read (documents live in PostgreSQL): ` +
		`stop, run \`npm run migrate-store\` with the same DATA_DIR (and DATABASE_URL, if the documents go to a server), then start again ` +
		`(docs/production.md, "From NeDB to PostgreSQL")`
	);
}

/** Corrupt lines NeDB itself tolerated in a data file: above this share it refused to load it. */
const CORRUPT_ALERT = 0.1;

/** A date as NeDB wrote it (`{"$$date": <ms>}`), as the platform stores dates: ISO text. */
function nedbValue(_key: string, v: unknown): unknown {
	if (v && typeof v === "object" && !Array.isArray(v)) {
		const keys = Object.keys(v);
		const ms = (v as { $$date?: unknown }).$$date;
		if (keys.length === 1 && typeof ms === "number") return new Date(ms).toISOString();
	}
	return v;
}

/**
 * The documents of one NeDB data file, read as NeDB loaded it: one JSON document per line, a later line replacing an
 * earlier one of the same `_id`, `{"$$deleted": true, "_id": …}` removing it, index lines (`$$indexCreated`,
 * `$$indexRemoved`) skipped, dates (`{"$$date": ms}`) as ISO text. Each comes out as the platform stores documents:
 * NeDB's key `_id` becomes the document's `id` (which no NeDB document of the platform held besides). A file NeDB was rewriting when it stopped survives
 * as `<file>~`, read when the file itself is missing. Corrupt lines are skipped, up to NeDB's own 10 %; beyond, the
 * file is refused (nothing is copied from it).
 */
export async function readNedbFile(file: string): Promise<StoredDoc[]> {
	const from = existsSync(file) ? file : existsSync(`${file}~`) ? `${file}~` : undefined;
	if (!from) return [];
	const byId = new Map<string, StoredDoc>();
	let lines = 0;
	let corrupt = 0;
	for await (const line of textLines(createReadStream(from, { encoding: "utf8" }))) {
		if (line === "") continue;
		lines++;
		let doc: Record<string, unknown>;
		try {
			doc = JSON.parse(line, nedbValue);
		} catch {
			corrupt++;
			continue;
		}
		if (!doc || typeof doc !== "object" || Array.isArray(doc)) corrupt++;
		else if (typeof doc._id === "string" && doc._id) {
			const { _id: id, ...fields } = doc;
			if (doc.$$deleted === true) byId.delete(id);
			// Delete and set: a replaced document takes its place in the order of the file's last writes.
			else {
				byId.delete(id);
				byId.set(id, { ...fields, id });
			}
		} else if (!("$$indexCreated" in doc) && !("$$indexRemoved" in doc)) corrupt++;
	}
	if (lines && corrupt / lines > CORRUPT_ALERT) throw new Error(`${from}: ${corrupt} of ${lines} lines are not NeDB documents (more than NeDB's own 10 %); nothing copied from it`);
	return [...byId.values()];
}

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
	// Held whatever DATABASE_URL says (the NeDB files are in the directory): DataDirInUse when a platform holds it.
	const lock = await lockDataDir({ dataDir: cfg.dataDir, databaseUrl: undefined });
	try {
		const names = nedbDocumentStores(cfg.dataDir);
		if (!names.length) {
			log(`DATA_DIR ${cfg.dataDir} holds no NeDB documents: nothing to migrate (it starts on PostgreSQL).`);
			return report;
		}
		const pg = { dataDir: cfg.dataDir, databaseUrl: cfg.databaseUrl };
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
	const docs = (await readNedb(dataDir, name)).map(keyedRef);
	await target.connect();
	try {
		let copied = 0;
		for (let i = 0; i < docs.length; i += BATCH) {
			const batch = docs.slice(i, i + BATCH);
			const there = new Set((await target.find({ query: { id: { $in: batch.map((d) => d.id) } }, projection: { id: 1 } })).map((d) => d.id));
			const missing = batch.filter((d) => !there.has(d.id));
			// As the platform writes on PostgreSQL: text without NUL or lone surrogates (NeDB took them).
			if (missing.length) await target.insertMany(missing.map((d) => storableJson(d)));
			copied += missing.length;
		}
		return { copied, present: docs.length - copied };
	} finally {
		await target.disconnect();
	}
}

const readNedb = (dataDir: string, name: string): Promise<StoredDoc[]> => readNedbFile(nedbFileOf(dataDir, name));

/**
 * A document stored before `ref` became unique per tenant carries a `ref` without its `tenant_ref` (TENANT_REF): it
 * gets its key here (such refs were unique platform-wide, so no two of them collide).
 */
function keyedRef(d: StoredDoc): StoredDoc {
	if (typeof d.ref !== "string" || TENANT_REF in d) return d;
	return { ...d, [TENANT_REF]: tenantRef(d.clients, d.ref) };
}

/**
 * The NeDB outbox's records after the lowest consumer position (all of them when no group stored one), appended in
 * order to PostgreSQL's outbox, once per database and DATA_DIR.
 */
async function carryEvents(cfg: MigrationConfig, pg: MigrationConfig): Promise<number> {
	if (!existsSync(nedbFileOf(cfg.dataDir, "_outbox"))) return 0;
	const marker = createStore(pg, MARKER_STORE);
	await marker.connect();
	try {
		const id = `events:${path.resolve(cfg.dataDir)}`;
		const done = await marker.findOne({ id });
		if (done) return Number(done.events ?? 0);
		const positions = existsSync(nedbFileOf(cfg.dataDir, "_stream_offsets")) ? await readNedb(cfg.dataDir, "_stream_offsets") : [];
		const from = positions.length ? Math.min(...positions.map((p) => Number(p.seq ?? 0))) : 0;
		const records = (await readNedb(cfg.dataDir, "_outbox")).filter((r) => Number(r.seq) > from).sort((a, b) => Number(a.seq) - Number(b.seq));
		const outbox = new Outbox({ ...pg, namespace: cfg.namespace });
		await outbox.connect();
		try {
			for (let i = 0; i < records.length; i += BATCH)
				await outbox.append(records.slice(i, i + BATCH).map(({ id: _key, seq, ...r }) => storableJson(r) as unknown as Omit<OutboxRecord, "seq">));
		} finally {
			await outbox.disconnect();
		}
		await marker.insert({ id, events: records.length, at: new Date().toISOString() });
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
