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
 * The file's format: backup-format.ts. Taking one: backup-dump.ts (writeBackup); restoring one: backup-restore.ts
 * (restoreBackup); this file is the commands.
 *
 * A restore goes into an empty target (a DATA_DIR or database holding no row), creates the schema the way the
 * platform does (each collection's store, the outbox, the components' migrations up to the versions of the backup:
 * the platform's next start applies the later ones to the restored rows), loads every row in one transaction, sets the
 * sequences, then writes the key files: a restore that fails leaves the database without a row (file content it
 * wrote is collected as orphans by the cleaner).
 */
import { chmodSync, createReadStream, createWriteStream, renameSync, rmSync } from "fs";
import { once } from "events";
import { writeBackup } from "./backup-dump";
import { BackupError, type BackupSummary, type RestoreSummary, type Log } from "./backup-format";
import { restoreBackup } from "./backup-restore";
import { readConfig, StartupError, type PlatformConfig } from "./runtime/config";

export { BackupError, BACKUP_FORMAT, BACKUP_VERSION, COMPONENTS, KEY_FILES, type BackupHeader, type BackupSummary, type BackupTable, type RestoreSummary } from "./backup-format";
export { writeBackup } from "./backup-dump";
export { restoreBackup } from "./backup-restore";

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
