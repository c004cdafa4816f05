/**
 * `npm run migrate-store` (in the image: `node dist/migrate-store.js`): copies the NeDB documents of DATA_DIR into the
 * PostgreSQL document store (DATABASE_URL, else the embedded PostgreSQL under DATA_DIR), then moves the NeDB files to
 * DATA_DIR/nedb-migrated/ so that the directory starts on PostgreSQL (store-migration.ts; docs/production.md,
 * "From NeDB to PostgreSQL"). Stop the platform first: while one runs on DATA_DIR the command exits with status 1 and
 * `DATA_DIR <path> is in use by pid <n>`, having changed nothing. Running it again copies nothing twice.
 */
import { StartupError } from "./runtime/config";
import { DataDirInUse } from "./runtime/datadir-lock";
import { migrateNedbToPostgres } from "./store-migration";

async function main() {
	const env = (k: string) => (process.env[k] === "" ? undefined : process.env[k]);
	if (env("MONGO_URI")) throw new StartupError("MONGO_URI is set: migrate-store copies NeDB documents into PostgreSQL only; unset it");
	if (env("DOCUMENT_STORE") === "nedb") throw new StartupError("DOCUMENT_STORE=nedb is set: the platform would go on starting on NeDB after the copy; unset it (or set postgres)");
	const { readConfig } = await import("./runtime/config");
	const cfg = readConfig();
	await migrateNedbToPostgres({ dataDir: cfg.dataDir, databaseUrl: cfg.databaseUrl, namespace: cfg.namespace }, (line) => console.log(line));
}

main().then(
	() => process.exit(0),
	(err) => {
		console.error(err instanceof DataDirInUse ? err.message : err instanceof StartupError ? `cannot migrate: ${err.message}` : err);
		process.exit(1);
	},
);
