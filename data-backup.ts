/**
 * `npm run backup` and `npm run restore` (backup.ts, restore.ts; docs/production.md, "Backup and restore"): a logical
 * backup of the PostgreSQL store, taken online, in the platform's own code (no pg_dump: the embedded server is of
 * another major version than a distribution's client, and its port and password are in DATA_DIR's files).
 *
 * What a backup holds, read in one REPEATABLE READ READ ONLY transaction (one snapshot: every document with the change
 * events it committed with, every consumer position, delivery and audit entry as of one instant):
 *  - every table of the platform: each collection's documents (`docs/<service>/<collection>`, the internal stores
 *    among them: consumer positions, the seed's claim, the audit spool), the outbox, and the tables of the relational
 *    components (COMPONENTS: deliveries, attempts, config births, audit entries), with their schema versions;
 *  - the sequences of those tables (the outbox's positions), read after the rows: every position a restored platform
 *    draws is above every one the backup holds;
 *  - the content of every file (the blob store: DATA_DIR/files or S3), copied right after the snapshot is taken;
 *  - DATA_DIR's keys (KEY_FILES: JWT and AES secrets, VAPID keys, the root's bootstrap credentials) when they are
 *    there: without the AES secret the sealed values of the documents cannot be read. Keys given by the environment
 *    are not in it (the backup says so).
 *
 * The file: gzip of JSON lines, in this order: the header (format, platform version, schema versions, every table with
 * its columns), the key files, each file's content (`blob`, `bytes`..., `blob-end` with its size and SHA-256), each
 * table (`table`, its rows, `end` with their count), the sequences, `complete`. Framing lines are objects whose first
 * key is `@`; a row is the row as PostgreSQL's `to_json` writes it (a document: `{"id": ..., "doc": {...}}`). A file
 * without its `complete` line is cut short and restores nothing. Backups of collections' tables of the earlier form
 * (`body`, the document's JSON text, beside a generated `doc`: their rows are `{"id": ..., "body": {...}}`) restore
 * into today's form, `body` into `doc` (LEGACY_BODY).
 *
 * A restore goes into an empty target (a DATA_DIR or database holding no row), creates the schema the way the
 * platform does (each collection's store, the outbox, the components' migrations up to the versions of the backup:
 * the platform's next start applies the later ones to the restored rows), loads every row in one transaction, sets the
 * sequences, then writes the key files: a restore that fails leaves the database without a row (file content it
 * wrote is collected as orphans by the cleaner).
 */
import { createHash } from "crypto";
import { chmodSync, createReadStream, createWriteStream, existsSync, readFileSync, renameSync, rmSync } from "fs";
import path from "path";
import readline from "readline";
import { PassThrough, type Readable, type Writable } from "stream";
import { once } from "events";
import { pipeline } from "stream/promises";
import { createGunzip, createGzip } from "zlib";
import { Client, type ClientConfig } from "pg";
import { readConfig, StartupError, writePrivateJson, type PlatformConfig } from "./runtime/config";
import { DataDirInUse, lockDataDir, type DataDirLock } from "./runtime/datadir-lock";
import { migrate, openRelational, releaseRelational, runningEmbedded, SCHEMA_LIMIT_MS, type Migration, type TextQuery } from "./runtime/relational";
import { storeNames } from "./runtime/store-names";
import { unmigratedDataDir } from "./store-migration";
import { ident, PgStore } from "./stores/pg.store";
import { OUTBOX_SEQUENCE, OUTBOX_TABLE, PgOutbox } from "./stores/pg.outbox";
import { createBlobStore, type BlobStore } from "./stores/blobs";
import { MIGRATIONS as DISPATCHER_MIGRATIONS, TABLES as DISPATCHER_TABLES } from "./workers/dispatcher/store";
import { MIGRATIONS as LOGGER_MIGRATIONS, TABLES as LOGGER_TABLES } from "./workers/logger/audit";

export const BACKUP_FORMAT = "platform-backup";
export const BACKUP_VERSION = 1;

/** The relational components (runtime/relational.ts `migrate`): their migrations and every table those create. */
export const COMPONENTS: Array<{ name: string; migrations: Migration[]; tables: string[] }> = [
	{ name: "dispatcher", migrations: DISPATCHER_MIGRATIONS, tables: DISPATCHER_TABLES },
	{ name: "logger", migrations: LOGGER_MIGRATIONS, tables: LOGGER_TABLES },
];

/** DATA_DIR files a backup carries when they are there. Not postgres.json (each cluster has its own password), nor cache.json (login failure counters). */
export const KEY_FILES = ["keys.json", "vapid.json", "bootstrap.json"];

/** Settings that, when given by the environment, replace a key file's content: a backup does not hold them. */
const KEY_SETTINGS = ["JWT_SECRET", "AES_SECRET", "VAPID_PRIVATE_KEY"];

const DOCS_PREFIX = "docs/";
const SCHEMA_TABLE = "schema_migrations";
/** Rows per fetch of the backup's cursor, and the most rows (and bytes of them) per insert of a restore. */
const FETCH_ROWS = 1000;
const INSERT_ROWS = 1000;
const INSERT_BYTES = 4 * 1024 * 1024;
/** Bytes of file content per `bytes` line (base64: 64 KiB of text). */
const BLOB_CHUNK = 48 * 1024;
/** How long a backup waits for the embedded server of a platform that is starting. */
const SERVER_WAIT_MS = 30_000;

/** A refusal or a failure with a message for the operator (the commands print it alone and exit 1). */
export class BackupError extends Error {}

export interface BackupTable {
	name: string;
	/** Its non-generated columns, in order. */
	columns: string[];
	/** For a collection's table: the store's name (`identity/users`, `_stream_offsets`). */
	store?: string;
}

export interface BackupHeader {
	"@": typeof BACKUP_FORMAT;
	version: number;
	platform: string;
	created_at: string;
	source: "postgres" | "embedded-postgres";
	server: string;
	/** Schema version of each relational component. */
	schema: Record<string, number>;
	tables: BackupTable[];
}

export interface BackupSummary {
	tables: Record<string, number>;
	rows: number;
	sequences: number;
	blobs: number;
	blobBytes: number;
	/** Blobs listed but gone before they were read (files destroyed meanwhile). */
	blobsGone: number;
	files: string[];
	warnings: string[];
}

export type RestoreSummary = Omit<BackupSummary, "blobsGone"> & { header: BackupHeader; blobsPresent: number };

type Log = (line: string) => void;

// Read at run time: the version of the package actually deployed (as lib/openapi.ts does).
const PLATFORM_VERSION = (require("./package.json") as { version: string }).version;

/**
 * The column of a collection's table of the earlier form that held the document (JSON text, beside a `doc` generated
 * from it; stores/pg.store.ts `storeOnce`): a backup of such a table restores it into `doc`.
 */
const LEGACY_BODY = "body";

/** The column of today's table a backup's column of table `t` restores into. */
const targetColumn = (t: BackupTable, column: string) => (t.store !== undefined && column === LEGACY_BODY ? "doc" : column);

/** A table or sequence name as an SQL identifier (names read from the catalog: at most 63 bytes, never shortened). */
const quoted = (name: string) => `"${name.replace(/"/g, '""')}"`;

/**
 * The store whose table is `relname`: PgStore names it `docs/<store>`, or, for a long name, its first characters and
 * `#<16 hex>` of a hash, which only the platform's list of stores can tell back (and the store's name also names its
 * indexes: a store made again under another name would get indexes of its own besides the platform's).
 */
function storeOfTable(relname: string): string | undefined {
	const known = storeNames().find((n) => ident(`${DOCS_PREFIX}${n}`) === quoted(relname));
	if (known) return known;
	return /#[0-9a-f]{16}$/.test(relname) ? undefined : relname.slice(DOCS_PREFIX.length);
}

// ---------------------------------------------------------------------------------------------------------- backup

interface Source {
	client: Client;
	kind: BackupHeader["source"];
	close(): Promise<void>;
}

async function connect(config: ClientConfig): Promise<Client> {
	const client = new Client({ ...config, application_name: "platform-backup", connectionTimeoutMillis: 5000, keepAlive: true });
	client.on("error", () => undefined);
	await client.connect();
	return client;
}

/**
 * The database to read: DATABASE_URL; else the embedded server of DATA_DIR, through the port and password a running
 * platform's server left there (without taking DATA_DIR: the platform goes on), or, when no platform holds DATA_DIR,
 * a server started here while DATA_DIR is held (a platform started meanwhile is refused until the backup ends).
 */
async function openSource(cfg: PlatformConfig, log: Log): Promise<Source> {
	if (cfg.databaseUrl) {
		const client = await connect({ connectionString: cfg.databaseUrl });
		return { client, kind: "postgres", close: () => client.end() };
	}
	if (!existsSync(path.join(cfg.dataDir, "postgres", "PG_VERSION")))
		throw new BackupError(`DATA_DIR ${cfg.dataDir} holds no embedded PostgreSQL: nothing to back up (set DATA_DIR to the platform's, or DATABASE_URL)`);
	let lock: DataDirLock | undefined;
	try {
		lock = await lockDataDir(cfg);
	} catch (err) {
		if (!(err instanceof DataDirInUse)) throw err;
		log(`DATA_DIR ${cfg.dataDir} is in use by pid ${err.pid ?? "unknown"}: reading through its embedded PostgreSQL`);
		for (const until = Date.now() + SERVER_WAIT_MS; ; await new Promise((r) => setTimeout(r, 250))) {
			const address = runningEmbedded(cfg.dataDir);
			if (address) {
				const client = await connect(address);
				return { client, kind: "embedded-postgres", close: () => client.end() };
			}
			if (Date.now() > until)
				throw new BackupError(`DATA_DIR ${cfg.dataDir} is in use by pid ${err.pid ?? "unknown"}, but its embedded PostgreSQL did not answer within ${SERVER_WAIT_MS / 1000} s`);
		}
	}
	log(`No platform runs on DATA_DIR ${cfg.dataDir}: starting its embedded PostgreSQL for the backup (a platform started meanwhile is refused)`);
	try {
		await openRelational(cfg);
		const address = runningEmbedded(cfg.dataDir);
		if (!address) throw new BackupError(`the embedded PostgreSQL of ${cfg.dataDir} started but left no address`);
		const client = await connect(address);
		return {
			client,
			kind: "embedded-postgres",
			async close() {
				await client.end();
				await releaseRelational(cfg);
				await lock?.release();
			},
		};
	} catch (err) {
		await releaseRelational(cfg).catch(() => undefined);
		await lock?.release();
		throw err;
	}
}

/** Lines to `out` (gzip), waiting when it asks to. */
class LineWriter {
	bytes = 0;
	constructor(private readonly out: Writable) {}
	async line(text: string): Promise<void> {
		this.bytes += text.length + 1;
		if (!this.out.write(`${text}\n`)) await once(this.out, "drain");
	}
	frame(value: Record<string, unknown>): Promise<void> {
		return this.line(JSON.stringify(value));
	}
}

/** The platform's tables of the schema, with their columns and stores; `others`: tables of the schema that are not. */
async function platformTables(q: Client): Promise<{ tables: BackupTable[]; others: string[] }> {
	const { rows } = await q.query<{ name: string; columns: string[] }>(
		`select c.relname as name, array_agg(a.attname::text order by a.attnum) as columns from pg_class c ` +
			`join pg_attribute a on a.attrelid = c.oid and a.attnum > 0 and not a.attisdropped and a.attgenerated = '' ` +
			`where c.relkind in ('r', 'p') and c.relnamespace = to_regnamespace(current_schema()) group by c.relname`,
	);
	const byName = new Map(rows.map((r) => [r.name, r.columns]));
	const tables: BackupTable[] = [];
	for (const name of [...byName.keys()].filter((n) => n.startsWith(DOCS_PREFIX)).sort()) {
		const store = storeOfTable(name);
		if (!store) throw new BackupError(`table ${name} holds documents of a collection this version of the platform cannot name: back up with the version that made it`);
		tables.push({ name, columns: byName.get(name)!, store });
	}
	const ordered = [OUTBOX_TABLE, ...COMPONENTS.flatMap((c) => c.tables)];
	for (const name of ordered) if (byName.has(name)) tables.push({ name, columns: byName.get(name)! });
	const known = new Set([...tables.map((t) => t.name), SCHEMA_TABLE]);
	return { tables, others: [...byName.keys()].filter((n) => !known.has(n)).sort() };
}

/** The sequences owned by `tables` (their serial columns), and the outbox's. */
async function platformSequences(q: Client, tables: BackupTable[]): Promise<string[]> {
	const { rows } = await q.query<{ name: string; owner: string | null }>(
		`select s.relname as name, t.relname as owner from pg_class s ` +
			`left join pg_depend d on d.classid = 'pg_class'::regclass and d.objid = s.oid and d.refclassid = 'pg_class'::regclass and d.deptype in ('a', 'i') ` +
			`left join pg_class t on t.oid = d.refobjid ` +
			`where s.relkind = 'S' and s.relnamespace = to_regnamespace(current_schema()) order by s.relname`,
	);
	const names = new Set(tables.map((t) => t.name));
	return rows.filter((r) => r.name === OUTBOX_SEQUENCE || (r.owner && names.has(r.owner))).map((r) => r.name);
}

/** Every blob of `blobs` as `blob`, `bytes`... lines; returns how many and their bytes, and how many went missing. */
async function copyBlobs(blobs: BlobStore, w: LineWriter, summary: BackupSummary): Promise<void> {
	for await (const info of blobs.list()) {
		const body = await blobs.get(info.key);
		if (!body) {
			summary.blobsGone++;
			continue;
		}
		await w.frame({ "@": "blob", key: info.key, size: info.size });
		const hash = createHash("sha256");
		let size = 0;
		let pending = Buffer.alloc(0);
		const flush = async (all: boolean) => {
			while (pending.length >= BLOB_CHUNK || (all && pending.length)) {
				const part = pending.subarray(0, BLOB_CHUNK);
				pending = pending.subarray(part.length);
				await w.frame({ "@": "bytes", b: part.toString("base64") });
			}
		};
		for await (const chunk of body as AsyncIterable<Buffer>) {
			hash.update(chunk);
			size += chunk.length;
			pending = Buffer.concat([pending, chunk]);
			await flush(false);
		}
		await flush(true);
		// Blobs are written whole under a new key, never changed: a size that differs is a store that misbehaves.
		if (size !== info.size) throw new BackupError(`the content of file ${info.key} changed while it was copied (${info.size} bytes listed, ${size} read)`);
		await w.frame({ "@": "blob-end", key: info.key, size, sha256: hash.digest("hex") });
		summary.blobs++;
		summary.blobBytes += size;
	}
}

/** Where a backup reads file content from: S3 when set, else DATA_DIR/files when there (a node without it keeps none). */
function sourceBlobs(cfg: PlatformConfig): BlobStore | undefined {
	if (!cfg.s3 && !existsSync(path.join(cfg.dataDir, "files"))) return undefined;
	return createBlobStore(cfg);
}

/**
 * Writes a backup of the store `cfg` names (DATABASE_URL, else DATA_DIR's embedded PostgreSQL) to `out`, gzip'd, and
 * ends `out`. `log` gets the steps and counts (never contents).
 */
export async function writeBackup(cfg: PlatformConfig, out: Writable, log: Log = () => undefined): Promise<BackupSummary> {
	const refused = unmigratedDataDir(cfg.dataDir);
	if (refused) throw new BackupError(refused);
	const summary: BackupSummary = { tables: {}, rows: 0, sequences: 0, blobs: 0, blobBytes: 0, blobsGone: 0, files: [], warnings: [] };
	const warn = (w: string) => {
		summary.warnings.push(w);
		log(`warning: ${w}`);
	};
	const source = await openSource(cfg, log);
	const gzip = createGzip({ level: 3 });
	// Ends `out` once everything is written (standard output too); an error of either fails the other.
	const finished = pipeline(gzip, out);
	finished.catch(() => undefined);
	const w = new LineWriter(gzip);
	const q = source.client;
	try {
		// One snapshot for everything: taken by the first statement after BEGIN. The session may stay in it while file
		// content is copied and a slow output drains.
		await q.query("begin isolation level repeatable read read only");
		await q.query("set local statement_timeout = 0; set local idle_in_transaction_session_timeout = 0; set local lock_timeout = '60s'");
		const server = (await q.query<{ v: string }>("select current_setting('server_version') as v")).rows[0].v;
		const { tables, others } = await platformTables(q);
		for (const t of others) warn(`table ${t} is not the platform's: not in the backup`);
		const schema: Record<string, number> = {};
		if (await q.query(`select to_regclass('${SCHEMA_TABLE}') is not null as e`).then((r) => r.rows[0].e)) {
			for (const r of (await q.query<{ component: string; v: number }>(`select component, max(version)::int as v from ${SCHEMA_TABLE} group by component`)).rows)
				schema[r.component] = r.v;
		}
		const files = KEY_FILES.filter((f) => existsSync(path.join(cfg.dataDir, f)));
		const header: BackupHeader = {
			"@": BACKUP_FORMAT,
			version: BACKUP_VERSION,
			platform: PLATFORM_VERSION,
			created_at: new Date().toISOString(),
			source: source.kind,
			server,
			schema,
			tables,
		};
		await w.frame(header as unknown as Record<string, unknown>);
		log(`Backing up ${tables.length} tables (${source.kind === "postgres" ? "DATABASE_URL" : `embedded PostgreSQL of ${cfg.dataDir}`}, PostgreSQL ${server})`);
		// The keys first: a restore checks them against its DATA_DIR before it writes anything.
		for (const f of files) {
			await w.frame({ "@": "file", name: f, content: readFileSync(path.join(cfg.dataDir, f), "utf8") });
			summary.files.push(f);
		}

		// File content right after the snapshot: a file record of the snapshot had its content stored before it.
		const blobs = sourceBlobs(cfg);
		if (blobs) {
			try {
				await copyBlobs(blobs, w, summary);
			} finally {
				await blobs.close();
			}
			log(`  file content: ${summary.blobs} files, ${summary.blobBytes} bytes${summary.blobsGone ? ` (${summary.blobsGone} removed meanwhile)` : ""}`);
		}

		for (const t of tables) {
			await w.frame({ "@": "table", name: t.name });
			const cols = t.columns.map(quoted).join(", ");
			await q.query(`declare backup_rows no scroll cursor for select to_json(r)::text as j from (select ${cols} from ${quoted(t.name)}) r`);
			let n = 0;
			for (;;) {
				const { rows } = await q.query<{ j: string }>(`fetch ${FETCH_ROWS} from backup_rows`);
				for (const r of rows) await w.line(r.j);
				n += rows.length;
				if (rows.length < FETCH_ROWS) break;
			}
			await q.query("close backup_rows");
			await w.frame({ "@": "end", name: t.name, rows: n });
			summary.tables[t.name] = n;
			summary.rows += n;
			if (n) log(`  ${t.name}: ${n} rows`);
		}

		// After the rows: a sequence is not part of the snapshot, so what it says now is at or above every row read.
		for (const s of await platformSequences(q, tables)) {
			const { rows } = await q.query<{ last_value: string; is_called: boolean }>(`select last_value::text, is_called from ${quoted(s)}`);
			await w.frame({ "@": "sequence", name: s, last_value: rows[0].last_value, is_called: rows[0].is_called });
			summary.sequences++;
		}
		await q.query("commit");
		const fromEnv = KEY_SETTINGS.filter((k) => process.env[k] || process.env[`${k}_FILE`]);
		if (fromEnv.length)
			warn(
				`${fromEnv.join(", ")} ${fromEnv.length > 1 ? "are" : "is"} given by the environment: not in the backup; keep ${fromEnv.length > 1 ? "them" : "it"} with the backup (documents sealed with AES_SECRET cannot be read without it)`,
			);
		else if (!summary.files.includes("keys.json")) warn(`DATA_DIR ${cfg.dataDir} holds no keys.json: the backup holds no JWT or AES secret; keep the deployment's with it`);
		await w.frame({ "@": "complete", tables: tables.length, rows: summary.rows, sequences: summary.sequences, blobs: summary.blobs, files: summary.files.length });
		gzip.end();
		await finished;
		return summary;
	} catch (err) {
		await q.query("rollback").catch(() => undefined);
		gzip.destroy(err as Error);
		throw err;
	} finally {
		await source.close();
	}
}

// --------------------------------------------------------------------------------------------------------- restore

/** The lines of a gzip'd backup, one at a time. */
class LineReader {
	private it: AsyncIterator<string>;
	private failed?: Error;
	lineNo = 0;
	constructor(input: Readable) {
		const gunzip = createGunzip();
		const fail = (err: Error) => {
			this.failed = err;
			gunzip.destroy();
		};
		input.once("error", fail);
		gunzip.once("error", (err) => (this.failed = err));
		this.it = readline.createInterface({ input: input.pipe(gunzip), crlfDelay: Infinity })[Symbol.asyncIterator]();
	}
	async next(): Promise<string | undefined> {
		const r = await this.it.next().catch((err: Error) => Promise.reject(this.failed ?? err));
		if (this.failed)
			throw new BackupError(
				/header check|invalid|unexpected end/i.test(this.failed.message) ? `not a platform backup, or cut short (${this.failed.message})` : this.failed.message,
			);
		if (r.done) return undefined;
		this.lineNo++;
		return r.value;
	}
	/** The next line as a framing record (an object whose first key is `@`). */
	async frame(): Promise<Record<string, unknown>> {
		const line = await this.next();
		if (line === undefined) throw new BackupError("the backup is cut short (no `complete` record): nothing restored");
		if (!line.startsWith('{"@":')) throw new BackupError(`the backup is damaged at line ${this.lineNo}: a record was expected`);
		return JSON.parse(line);
	}
}

async function readHeader(r: LineReader): Promise<BackupHeader> {
	let line: string | undefined;
	try {
		line = await r.next();
	} catch (err) {
		throw new BackupError(`not a platform backup: ${(err as Error).message}`);
	}
	let header: Partial<BackupHeader> | undefined;
	try {
		header = line === undefined ? undefined : JSON.parse(line);
	} catch {
		header = undefined;
	}
	if (header?.["@"] !== BACKUP_FORMAT) throw new BackupError("not a platform backup (its first line is no platform-backup header)");
	if (header.version !== BACKUP_VERSION)
		throw new BackupError(
			`the backup is of format ${header.version}, this version of the platform reads format ${BACKUP_VERSION}: restore with the platform ${header.platform} that made it`,
		);
	return header as BackupHeader;
}

/** Tables of the target that hold a row (the schema's versions aside). */
async function tablesWithRows(q: TextQuery): Promise<string[]> {
	const { rows } = await q<{ name: string }>(
		`select relname as name from pg_class where relkind in ('r', 'p') and relnamespace = to_regnamespace(current_schema()) and relname <> '${SCHEMA_TABLE}' order by relname`,
	);
	const full: string[] = [];
	for (const { name } of rows) if ((await q(`select 1 from ${quoted(name)} limit 1`)).rows.length) full.push(name);
	return full;
}

const notEmpty = (where: string, tables: string[]) =>
	new BackupError(
		`${where} already holds data (${tables.slice(0, 3).join(", ")}${tables.length > 3 ? `, and ${tables.length - 3} more tables` : ""}): restore into an empty DATA_DIR or database`,
	);

/**
 * The schema of every table of the backup, as the platform creates it: each collection's store, the outbox, the
 * components' migrations up to the backup's versions. Refused when the backup or the target has a version this code
 * does not know, or the target's schema is newer than the backup's.
 */
async function createSchema(cfg: PlatformConfig, header: BackupHeader, query: TextQuery, db: Awaited<ReturnType<typeof openRelational>>): Promise<void> {
	const current: Record<string, number> = {};
	if ((await query<{ e: boolean }>(`select to_regclass('${SCHEMA_TABLE}') is not null as e`)).rows[0].e)
		for (const r of (await query<{ component: string; v: number }>(`select component, max(version)::int as v from ${SCHEMA_TABLE} group by component`)).rows)
			current[r.component] = r.v;
	for (const [name, version] of Object.entries(header.schema)) {
		const c = COMPONENTS.find((x) => x.name === name);
		const newest = Math.max(0, ...(c?.migrations.map((m) => m.version) ?? []));
		if (!c || version > newest)
			throw new BackupError(
				`the backup's ${name} schema (version ${version}) is newer than this version of the platform knows: restore with the platform ${header.platform} that made it`,
			);
		if ((current[name] ?? 0) > version)
			throw new BackupError(`the target's ${name} schema (version ${current[name]}) is newer than the backup's (${version}): restore into a new database`);
	}
	for (const t of header.tables) {
		if (t.store !== undefined) {
			if (ident(`${DOCS_PREFIX}${t.store}`) !== quoted(t.name)) throw new BackupError(`the backup's table ${t.name} does not belong to store ${t.store}: damaged backup`);
			const store = new PgStore(cfg, t.store);
			await store.connect();
			await store.disconnect();
		}
	}
	if (header.tables.some((t) => t.name === OUTBOX_TABLE)) {
		const outbox = new PgOutbox(cfg);
		await outbox.connect();
		await outbox.disconnect();
	}
	for (const c of COMPONENTS)
		if (header.schema[c.name])
			await migrate(
				db,
				c.name,
				c.migrations.filter((m) => m.version <= header.schema[c.name]),
			);
	// Every table of the backup now exists with (at least) the backup's columns.
	for (const t of header.tables) {
		const { rows } = await query<{ a: string }>(`select attname::text as a from pg_attribute where attrelid = to_regclass($1) and attnum > 0 and not attisdropped`, [
			quoted(t.name),
		]);
		const have = new Set(rows.map((r) => r.a));
		const missing = t.columns.filter((c) => !have.has(targetColumn(t, c)));
		if (!rows.length || missing.length)
			throw new BackupError(
				`the backup's table ${t.name} ${rows.length ? `has columns the platform's has not (${missing.join(", ")})` : "is not one this version of the platform creates"}: restore with the platform ${header.platform} that made it`,
			);
	}
}

/**
 * Inserts rows (the backup's JSON objects) into `t`, `INSERT_ROWS` (or `INSERT_BYTES`) a statement; a collection's
 * `body` (a backup of the earlier form) into `doc`.
 */
class TableLoader {
	private rows: string[] = [];
	private bytes = 0;
	count = 0;
	private readonly sql: string;
	constructor(
		private readonly q: TextQuery,
		t: BackupTable,
	) {
		const cols = t.columns.map(quoted).join(", ");
		const legacy = t.columns.some((c) => targetColumn(t, c) !== c);
		this.sql = legacy
			? `insert into ${quoted(t.name)} (${t.columns.map((c) => quoted(targetColumn(t, c))).join(", ")}) ` +
				`select ${t.columns.map((c) => (targetColumn(t, c) === c ? `r.${quoted(c)}` : `(x->'${LEGACY_BODY}')::jsonb`)).join(", ")} ` +
				`from json_array_elements($1::json) x cross join lateral json_populate_record(null::${quoted(t.name)}, x) r`
			: `insert into ${quoted(t.name)} (${cols}) select ${cols} from json_populate_recordset(null::${quoted(t.name)}, $1::json)`;
	}
	async add(row: string): Promise<void> {
		this.rows.push(row);
		this.bytes += row.length;
		this.count++;
		if (this.rows.length >= INSERT_ROWS || this.bytes >= INSERT_BYTES) await this.flush();
	}
	async flush(): Promise<void> {
		if (!this.rows.length) return;
		const batch = `[${this.rows.join(",")}]`;
		this.rows = [];
		this.bytes = 0;
		await this.q(this.sql, [batch]);
	}
}

/**
 * Streams one blob of the backup into `blobs` (unless it is there already with its size), checking its size and hash:
 * a blob that does not match is removed again and the restore fails.
 */
async function restoreBlob(r: LineReader, blobs: BlobStore, key: string, size: number, summary: RestoreSummary): Promise<void> {
	const there = await blobs.stat(key);
	const stream = there?.size === size ? undefined : new PassThrough();
	const put = stream ? blobs.put(key, stream, size) : undefined;
	// Observed at once: a store that fails early (a full disk) must not leave an unhandled rejection behind.
	put?.catch(() => undefined);
	const hash = createHash("sha256");
	let n = 0;
	try {
		for (;;) {
			const f = await r.frame();
			if (f["@"] === "blob-end" && f.key === key) {
				stream?.end();
				await put;
				if (n !== size || f.size !== size || hash.digest("hex") !== f.sha256)
					throw new BackupError(`the backup is damaged: the content of file ${key} does not match its size and hash`);
				break;
			}
			if (f["@"] !== "bytes") throw new BackupError(`the backup is damaged at line ${r.lineNo}: content of file ${key} expected`);
			const part = Buffer.from(String(f.b), "base64");
			hash.update(part);
			n += part.length;
			if (stream && !stream.write(part)) await Promise.race([once(stream, "drain"), put]);
		}
	} catch (err) {
		stream?.destroy();
		if (stream) await blobs.remove(key).catch(() => undefined);
		throw err;
	}
	if (!stream) summary.blobsPresent++;
	else {
		summary.blobs++;
		summary.blobBytes += size;
	}
}

/**
 * Restores the backup read from `input` into the store `cfg` names (DATABASE_URL, else DATA_DIR's embedded
 * PostgreSQL, which is held meanwhile: refused while a platform runs on it), its file content into the blob store and
 * its key files into DATA_DIR. Refused, having written nothing, when the target holds data.
 */
export async function restoreBackup(cfg: PlatformConfig, input: Readable, log: Log = () => undefined): Promise<RestoreSummary> {
	const refused = unmigratedDataDir(cfg.dataDir);
	if (refused) throw new BackupError(refused);
	const r = new LineReader(input);
	const header = await readHeader(r);
	const summary: RestoreSummary = { header, tables: {}, rows: 0, sequences: 0, blobs: 0, blobBytes: 0, blobsPresent: 0, files: [], warnings: [] };
	const warn = (w: string) => {
		summary.warnings.push(w);
		log(`warning: ${w}`);
	};
	log(`Restoring the backup of ${header.created_at} (platform ${header.platform}, ${header.source}, PostgreSQL ${header.server}): ${header.tables.length} tables`);
	if (header.platform !== PLATFORM_VERSION) warn(`the backup was made by platform ${header.platform}, this is ${PLATFORM_VERSION}`);
	const target = cfg.databaseUrl ? "the database at DATABASE_URL" : `DATA_DIR ${cfg.dataDir}`;
	let frame = await r.frame();
	const keys: Array<{ name: string; content: string }> = [];
	for (; frame["@"] === "file"; frame = await r.frame()) {
		if (typeof frame.name !== "string" || !KEY_FILES.includes(frame.name))
			throw new BackupError(`the backup is damaged at line ${r.lineNo}: file ${frame.name} is not one a backup holds`);
		keys.push({ name: frame.name, content: String(frame.content) });
	}
	checkKeyFiles(cfg, keys);
	const lock = await lockDataDir(cfg);
	try {
		const db = await openRelational(cfg);
		try {
			const query: TextQuery = (text, params) => db.query(text, params);
			const full = await tablesWithRows(query);
			if (full.length) throw notEmpty(target, full);
			await createSchema(cfg, header, query, db);

			const blobs = frame["@"] === "blob" ? createBlobStore(cfg) : undefined;
			try {
				for (; frame["@"] === "blob"; frame = await r.frame()) await restoreBlob(r, blobs!, String(frame.key), Number(frame.size), summary);
			} finally {
				await blobs?.close();
			}
			if (summary.blobs || summary.blobsPresent)
				log(`  file content: ${summary.blobs} files, ${summary.blobBytes} bytes${summary.blobsPresent ? ` (${summary.blobsPresent} there already)` : ""}`);

			await db.transaction(async (q) => {
				// The restore waits for another on the same database, then finds its rows: one restore only.
				await q("set local idle_in_transaction_session_timeout = 0; select pg_advisory_xact_lock(hashtext('platform-restore'))");
				const raced = await tablesWithRows(q);
				if (raced.length) throw notEmpty(target, raced);
				for (; frame["@"] === "table"; frame = await r.frame()) {
					const t = header.tables.find((x) => x.name === frame.name);
					if (!t) throw new BackupError(`the backup is damaged at line ${r.lineNo}: table ${frame.name} is not in its header`);
					const loader = new TableLoader(q, t);
					for (;;) {
						const line = await r.next();
						if (line === undefined) throw new BackupError("the backup is cut short (no `complete` record): nothing restored");
						if (line.startsWith('{"@":')) {
							const end = JSON.parse(line);
							if (end["@"] !== "end" || end.name !== t.name || end.rows !== loader.count)
								throw new BackupError(`the backup is damaged at line ${r.lineNo}: table ${t.name} does not end as recorded`);
							break;
						}
						await loader.add(line);
					}
					await loader.flush();
					summary.tables[t.name] = loader.count;
					summary.rows += loader.count;
					if (loader.count) log(`  ${t.name}: ${loader.count} rows`);
				}
				for (; frame["@"] === "sequence"; frame = await r.frame()) {
					await q(`select setval($1::regclass, $2::bigint, $3::boolean)`, [quoted(String(frame.name)), String(frame.last_value), frame.is_called === true]);
					summary.sequences++;
				}
				if (frame["@"] !== "complete") throw new BackupError(`the backup is damaged at line ${r.lineNo}: unexpected ${String(frame["@"])} record`);
				if (frame.rows !== summary.rows || frame.tables !== Object.keys(summary.tables).length) throw new BackupError("the backup is damaged: its counts do not match its rows");
				if ((await r.next()) !== undefined) throw new BackupError(`the backup is damaged at line ${r.lineNo}: lines after its end`);
			}, SCHEMA_LIMIT_MS);

			for (const f of keys) {
				if (!existsSync(path.join(cfg.dataDir, f.name))) writePrivateJson(path.join(cfg.dataDir, f.name), JSON.parse(f.content));
				summary.files.push(f.name);
			}
			const fromEnv = KEY_SETTINGS.filter((k) => process.env[k] || process.env[`${k}_FILE`]);
			if (fromEnv.length)
				warn(
					`${fromEnv.join(", ")} ${fromEnv.length > 1 ? "are" : "is"} given by the environment and used instead of the backup's keys.json: ${fromEnv.length > 1 ? "they" : "it"} must be the deployment's of the backup`,
				);
			if (!keys.some((f) => f.name === "keys.json") && !fromEnv.includes("AES_SECRET"))
				warn("the backup holds no keys.json: set JWT_SECRET and AES_SECRET to the deployment's before starting (sealed values cannot be read otherwise)");
			return summary;
		} finally {
			await releaseRelational(cfg);
		}
	} finally {
		await lock?.release();
	}
}

/** A key file of the backup that DATA_DIR holds already with another content: refused (it belongs to other data). */
function checkKeyFiles(cfg: PlatformConfig, keys: Array<{ name: string; content: string }>): void {
	for (const f of keys) {
		const file = path.join(cfg.dataDir, f.name);
		if (!existsSync(file)) continue;
		const same = (() => {
			try {
				return JSON.stringify(JSON.parse(readFileSync(file, "utf8"))) === JSON.stringify(JSON.parse(f.content));
			} catch {
				return false;
			}
		})();
		if (!same) throw new BackupError(`DATA_DIR ${cfg.dataDir} already holds ${f.name}, not the backup's: restore into an empty DATA_DIR (nothing restored)`);
	}
}

// -------------------------------------------------------------------------------------------------------- commands

const USAGE = {
	backup: "usage: npm run backup -- <file>   (or - for standard output; DATA_DIR or DATABASE_URL as the platform's)",
	restore: "usage: npm run restore -- <file>  (or - for standard input; into an empty DATA_DIR or DATABASE_URL)",
};

/**
 * `npm run backup -- <file>` and `npm run restore -- <file>` (backup.ts, restore.ts), configured as the platform is
 * (DATA_DIR, DATABASE_URL, DOCUMENT_STORE, S3_*). Progress goes to standard error. Exit status: 0 done, 1 refused or
 * failed (a backup leaves no file behind; a restore no row), 2 wrong arguments.
 */
export async function command(kind: "backup" | "restore", args: string[]): Promise<number> {
	const log = (line: string) => process.stderr.write(`${line}\n`);
	if (args.length === 1 && (args[0] === "--help" || args[0] === "-h")) {
		process.stdout.write(`${USAGE[kind]}\n`);
		return 0;
	}
	if (args.length !== 1 || !args[0] || (args[0].startsWith("-") && args[0] !== "-")) {
		log(args.length ? `${kind}: expected one file, got ${args.map((a) => JSON.stringify(a)).join(" ")}` : `${kind}: which file?`);
		log(USAGE[kind]);
		return 2;
	}
	const file = args[0];
	const started = Date.now();
	try {
		const cfg = readConfig();
		if (kind === "backup") {
			const s = await backupToFile(cfg, file, log);
			log(
				`Backup written to ${file === "-" ? "standard output" : file} in ${((Date.now() - started) / 1000).toFixed(1)} s: ${Object.keys(s.tables).length} tables, ${s.rows} rows, ` +
					`${s.blobs} files of content (${s.blobBytes} bytes), key files: ${s.files.join(", ") || "none"}.`,
			);
			log("It holds password hashes, sealed secrets and the keys that unseal them: keep it as secret as DATA_DIR.");
		} else {
			const s = await restoreFromFile(cfg, file, log);
			log(
				`Restored ${Object.keys(s.tables).length} tables, ${s.rows} rows, ${s.blobs + s.blobsPresent} files of content and key files ${s.files.join(", ") || "none"} ` +
					`into ${cfg.databaseUrl ? "the database at DATABASE_URL" : `DATA_DIR ${cfg.dataDir}`} in ${((Date.now() - started) / 1000).toFixed(1)} s. Start the platform on it.`,
			);
		}
		return 0;
	} catch (err) {
		const known = err instanceof BackupError || err instanceof StartupError;
		log(`${kind} failed: ${known ? (err as Error).message : ((err as Error)?.stack ?? String(err))}`);
		return 1;
	}
}

/** A backup into `file` (0600): written beside it under a temporary name, renamed once complete; `-`: standard output. */
async function backupToFile(cfg: PlatformConfig, file: string, log: Log): Promise<BackupSummary> {
	if (file === "-") {
		if (process.stdout.isTTY) throw new BackupError("standard output is a terminal: give a file, or redirect it");
		return writeBackup(cfg, process.stdout, log);
	}
	const tmp = `${file}.partial-${process.pid}`;
	const drop = () => rmSync(tmp, { force: true });
	const onSignal = () => {
		drop();
		process.exit(130);
	};
	process.once("SIGINT", onSignal).once("SIGTERM", onSignal);
	try {
		const out = createWriteStream(tmp, { flags: "wx", mode: 0o600 });
		await once(out, "open").catch((err: NodeJS.ErrnoException) => Promise.reject(new BackupError(`cannot write ${tmp}: ${err.code ?? err.message}`)));
		const summary = await writeBackup(cfg, out, log);
		chmodSync(tmp, 0o600);
		renameSync(tmp, file);
		return summary;
	} catch (err) {
		drop();
		throw err;
	} finally {
		process.off("SIGINT", onSignal).off("SIGTERM", onSignal);
	}
}

async function restoreFromFile(cfg: PlatformConfig, file: string, log: Log): Promise<RestoreSummary> {
	if (file === "-") return restoreBackup(cfg, process.stdin, log);
	const input = createReadStream(file);
	await once(input, "open").catch((err: NodeJS.ErrnoException) => Promise.reject(new BackupError(`cannot read ${file}: ${err.code ?? err.message}`)));
	try {
		return await restoreBackup(cfg, input, log);
	} finally {
		input.destroy();
	}
}
