/** Taking a backup (writeBackup): one snapshot of every platform table, its file content and DATA_DIR's keys, as backup-format.ts lays them out. */
import { createHash } from "crypto";
import { existsSync, readFileSync } from "fs";
import path from "path";
import type { Writable } from "stream";
import { once } from "events";
import { pipeline } from "stream/promises";
import { createGzip } from "zlib";
import { Client, type ClientConfig } from "pg";
import {
	BACKUP_FORMAT,
	BACKUP_VERSION,
	COMPONENTS,
	KEY_FILES,
	KEY_SETTINGS,
	DOCS_PREFIX,
	SCHEMA_TABLE,
	BackupError,
	type BackupTable,
	type BackupHeader,
	type BackupSummary,
	type Log,
	PLATFORM_VERSION,
	quoted,
} from "./backup-format";
import type { PlatformConfig } from "./runtime/config";
import { DataDirInUse, lockDataDir, type DataDirLock } from "./runtime/datadir-lock";
import { openRelational, releaseRelational, runningEmbedded } from "./runtime/relational";
import { storeNames } from "./runtime/store-names";
import { unmigratedDataDir } from "./store-migration";
import { createBlobStore, type BlobStore } from "./stores/blobs";
import { OUTBOX_SEQUENCE, OUTBOX_TABLE } from "./stores/pg.outbox";
import { ident } from "./stores/pg.store";

/** Rows per fetch of the backup's cursor. */
const FETCH_ROWS = 1000;
/** Bytes of file content per `bytes` line (base64: 64 KiB of text). */
const BLOB_CHUNK = 48 * 1024;
/** How long a backup waits for the embedded server of a platform that is starting. */
const SERVER_WAIT_MS = 30_000;

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
