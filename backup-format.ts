/**
 * The backup file's format (data-backup.ts says what a backup holds): gzip of JSON lines, in this order: the header
 * (format, platform version, schema versions, every table with its columns), the key files, each file's content
 * (`blob`, `bytes`..., `blob-end` with its size and SHA-256), each table (`table`, its rows, `end` with their count),
 * the sequences, `complete`. Framing lines are objects whose first key is `@`; a row is the row as PostgreSQL's
 * `to_json` writes it (a document: `{"id": ..., "doc": {...}}`). A file without its `complete` line is cut short and
 * restores nothing. Backups of collections' tables of the earlier form (`body`, the document's JSON text, beside a
 * generated `doc`: their rows are `{"id": ..., "body": {...}}`) restore into today's form, `body` into `doc`
 * (LEGACY_BODY). A document holding its id as `_id` (every backup of a version before `id`) restores holding it as
 * `id` (backup-restore.ts, stores/pg.store.ts idKeyed).
 */
import type { Migration } from "./runtime/relational";
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
export const KEY_SETTINGS = ["JWT_SECRET", "AES_SECRET", "VAPID_PRIVATE_KEY"];

export const DOCS_PREFIX = "docs/";
export const SCHEMA_TABLE = "schema_migrations";

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

export type Log = (line: string) => void;

// Read at run time: the version of the package actually deployed (as lib/openapi/document.ts does).
export const PLATFORM_VERSION = (require("./package.json") as { version: string }).version;

/**
 * The column of a collection's table of the earlier form that held the document (JSON text, beside a `doc` generated
 * from it; stores/pg.store.ts `storeOnce`): a backup of such a table restores it into `doc`.
 */
export const LEGACY_BODY = "body";

/** The column of today's table a backup's column of table `t` restores into. */
export const targetColumn = (t: BackupTable, column: string) => (t.store !== undefined && column === LEGACY_BODY ? "doc" : column);

/** A table or sequence name as an SQL identifier (names read from the catalog: at most 63 bytes, never shortened). */
export const quoted = (name: string) => `"${name.replace(/"/g, '""')}"`;
