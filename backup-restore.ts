/** Restoring a backup (restoreBackup) into an empty DATA_DIR or database: the schema as the platform creates it, then every row in one transaction. */
import { createHash } from "crypto";
import { existsSync, readFileSync } from "fs";
import path from "path";
import { PassThrough, type Readable } from "stream";
import { once } from "events";
import { createGunzip } from "zlib";
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
	type RestoreSummary,
	type Log,
	LEGACY_BODY,
	PLATFORM_VERSION,
	targetColumn,
	quoted,
} from "./backup-format";
import { writePrivateJson, type PlatformConfig } from "./runtime/config";
import { lockDataDir } from "./runtime/datadir-lock";
import { textLines } from "./runtime/lines";
import { migrate, openRelational, releaseRelational, SCHEMA_LIMIT_MS, type TextQuery } from "./runtime/relational";
import { unmigratedDataDir } from "./store-migration";
import { createBlobStore, type BlobStore } from "./stores/blobs";
import { OUTBOX_TABLE, PgOutbox } from "./stores/pg.outbox";
import { ident, idKeyed, PgStore } from "./stores/pg.store";

/** The most rows (and bytes of them) per insert of a restore. */
const INSERT_ROWS = 1000;
const INSERT_BYTES = 4 * 1024 * 1024;

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
		this.it = textLines(input.pipe(gunzip))[Symbol.asyncIterator]();
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
 * `body` (a backup of the earlier form) into `doc`, and each of its documents in the current form (idKeyed: a backup
 * of a version that stored the id as `_id` restores it as `id`, into a table connect has marked DOCS_FORM).
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
		// A collection's document as the backup holds it (`body` of the earlier form, else `doc`), in the current form.
		const valueOf = (c: string) => {
			if (targetColumn(t, c) !== "doc") return `r.${quoted(c)}`;
			return idKeyed(c === LEGACY_BODY ? `(x->'${LEGACY_BODY}')::jsonb` : `r.${quoted(c)}`);
		};
		this.sql =
			t.store !== undefined
				? `insert into ${quoted(t.name)} (${t.columns.map((c) => quoted(targetColumn(t, c))).join(", ")}) ` +
					`select ${t.columns.map(valueOf).join(", ")} ` +
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
